"""serve-ray's command line and pieces that need no running Ray: the flags each replica gets,
the refusals, the deployments' Serve options (checked by Serve's own option types), the
/metrics sum, and the in-process ASGI call (a client that leaves cancels the handler)."""

from __future__ import annotations

import asyncio

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from llamacpy.serve_ray import asgi
from llamacpy.serve_ray.config import config_from_argv
from llamacpy.serve_ray.prometheus import aggregate


def refusal(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        config_from_argv(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("llamacpy serve-ray: error: ")
    return err


def test_single_model_flags(model_paths):
    cfg = config_from_argv(["-m", str(model_paths["smollm2-135m"]), "--replicas", "3",
                            "-np", "4", "-c", "2048", "--api-key", "a,b", "--port", "9000",
                            "--temp", "0.2", "--metrics"])
    [(name, spec)] = cfg.models.items()
    assert name == "SmolLM2-135M-Instruct.Q4_1.gguf" and cfg.single and cfg.metrics
    # every llama-server flag but -m, the address and the keys goes to the replicas, and -t
    # is the replica's CPU share
    assert cfg.flags == ["-np", "4", "-c", "2048", "--temp", "0.2", "--metrics", "-t", "1"]
    assert spec.child_args()[:2] == ["-m", str(model_paths["smollm2-135m"])]
    assert cfg.api_keys == ["a", "b"] and cfg.port == 9000
    opts = cfg.model_options()
    assert opts["num_replicas"] == 3 and opts["max_ongoing_requests"] == 8
    assert opts["ray_actor_options"] == {"num_cpus": 1.0, "runtime_env": {"env_vars": {
        "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD": "0"}}}


def test_autoscaling_options_are_servable(model_paths):
    serve = pytest.importorskip("ray.serve")
    from llamacpy.serve_ray.replica import LlamaModel

    cfg = config_from_argv(["-m", str(model_paths["smollm2-135m"]), "--autoscale", "1:4",
                            "--target-ongoing-requests", "3", "--num-cpus", "2", "-t", "2"])
    assert cfg.flags == ["-t", "2"]
    d = LlamaModel.options(**cfg.model_options())
    auto = d._deployment_config.autoscaling_config
    assert (auto.min_replicas, auto.max_replicas, auto.target_ongoing_requests) == (1, 4, 3)
    assert d.ray_actor_options["num_cpus"] == 2
    assert serve is not None


def test_models_dir_is_discovered_as_router_mode(model_paths, tmp_path):
    (tmp_path / "smol.gguf").symlink_to(model_paths["smollm2-135m"])
    sub = tmp_path / "gemma"
    sub.mkdir()
    (sub / "gemma-3-270m.gguf").symlink_to(model_paths["gemma3-270m"])
    cfg = config_from_argv(["--models-dir", str(tmp_path), "--models-max", "2", "-c", "1024"])
    assert {"smol", "gemma"} <= set(cfg.models) and not cfg.single
    assert cfg.models_max == 2 and cfg.flags == ["-c", "1024", "-t", "1"]


def test_models_dir_skips_whisper_models(model_paths, tmp_path, capsys):
    from llamacpy.hub import pull

    (tmp_path / "smol.gguf").symlink_to(model_paths["smollm2-135m"])
    (tmp_path / "speech.gguf").symlink_to(pull("whisper-tiny.en", quiet=True))
    cfg = config_from_argv(["--models-dir", str(tmp_path)])
    assert "smol" in cfg.models and "speech" not in cfg.models
    assert not any("whisper" in name for name in cfg.models)  # nor the cached ones
    assert "skipping 'speech': a whisper model" in capsys.readouterr().err


def test_refusals(capsys, model_paths):
    model = str(model_paths["smollm2-135m"])
    assert "not both" in refusal(capsys, ["-m", model, "--replicas", "2", "--autoscale", "1:2"])
    assert "MIN:MAX" in refusal(capsys, ["-m", model, "--autoscale", "3:1"])
    assert "at least 1" in refusal(capsys, ["-m", model, "--replicas", "0"])
    assert "-m MODEL or --models-dir" in refusal(capsys, ["-np", "2"])
    assert "--sleep-idle-seconds is not supported with serve-ray" in refusal(
        capsys, ["--models-dir", "/tmp", "--sleep-idle-seconds", "5"])
    assert "--no-models-autoload is not supported" in refusal(
        capsys, ["--models-dir", "/tmp", "--no-models-autoload"])
    assert "--models-max goes with --models-dir" in refusal(capsys, ["-m", model,
                                                                     "--models-max", "2"])
    assert "--no-jinja is not supported" in refusal(capsys, ["-m", model, "--no-jinja"])
    assert "--reasoning-format" in refusal(capsys, ["-m", model, "--reasoning-format", "x"])


def test_serve_config_args_are_checked():
    pytest.importorskip("ray.serve")
    from llamacpy.serve_ray import app_builder

    with pytest.raises(ValueError, match="unknown serve-ray args"):
        app_builder({"argv": [], "replicas": 2})
    with pytest.raises(ValueError, match="-m MODEL or --models-dir"):
        app_builder({"argv": "-np 2"})


REPLICA = """# HELP llamacpp:tokens_predicted_total Number of generation tokens processed
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total {n}
# HELP llamacpp:n_tokens_max Largest observed sequence length (prompt + generation)
# TYPE llamacpp:n_tokens_max counter
llamacpp:n_tokens_max {longest}
# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call
# TYPE llamacpp:n_busy_slots_per_decode gauge
llamacpp:n_busy_slots_per_decode {busy}
"""


def test_metrics_sum():
    text = aggregate([REPLICA.format(n=10, longest=50, busy=1),
                      REPLICA.format(n=32, longest=70, busy=3)])
    values = dict(line.split() for line in text.splitlines() if not line.startswith("#"))
    assert values == {"llamacpp:replicas": "2", "llamacpp:tokens_predicted_total": "42",
                      "llamacpp:n_tokens_max": "70", "llamacpp:n_busy_slots_per_decode": "2"}
    assert "# TYPE llamacpp:tokens_predicted_total counter" in text
    assert aggregate([]).splitlines()[-1] == "llamacpp:replicas 0"


def request(path: str, body: bytes = b"") -> dict:
    return {"method": "POST", "path": path, "query": "a=1", "body": body,
            "headers": [("content-type", "application/json")]}


def test_asgi_call_answers_and_cancels():
    seen = {}

    async def echo(request):
        return JSONResponse({"body": (await request.body()).decode(),
                             "query": request.url.query})

    async def forever(request):
        async def body():
            try:
                for i in range(10_000):
                    yield f"data: {i}\n\n"
                    await asyncio.sleep(0.01)
            finally:
                seen["closed"] = True
        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/echo", echo, methods=["POST"]),
                            Route("/stream", forever, methods=["POST"])])

    async def run():
        parts = [p async for p in asgi.call(app, request("/echo", b"hi"))]
        assert parts[0]["status"] == 200 and b'"body":"hi"' in parts[1]
        assert "content-length" not in dict(parts[0]["headers"])  # hop-by-hop: re-framed
        stream = asgi.call(app, request("/stream"))
        head = await anext(stream)
        assert dict(head["headers"])["content-type"].startswith("text/event-stream")
        assert (await anext(stream)).startswith(b"data: 0")
        await stream.aclose()  # the client left
        await asyncio.sleep(0.05)
        assert seen.get("closed")

    asyncio.run(run())


def test_route_prefix_is_stripped():
    pytest.importorskip("ray.serve")
    from llamacpy.serve_ray.ingress import without_prefix

    seen = []

    async def app(scope, receive, send):
        seen.append((scope["path"], scope["root_path"]))

    scope = {"type": "http", "path": "/r1/v1/models", "root_path": "/r1"}
    asyncio.run(without_prefix(app)(scope, None, None))
    asyncio.run(without_prefix(app)({**scope, "path": "/r1"}, None, None))
    assert seen == [("/v1/models", ""), ("/", "")]
