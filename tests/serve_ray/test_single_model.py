"""serve-ray -m: one model on 2 replicas (1 thread each), behind an API key, through the
official openai and ollama clients and raw HTTP: concurrent streams on both replicas,
/v1/models, /metrics summed over the replicas, the server's own errors, a client that leaves,
and a replica killed mid-stream."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.serve_ray.conftest import live_replicas, start_app, stop_app, wait_for

openai = pytest.importorskip("openai")
KEY = "secret-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
CHAT = [{"role": "user", "content": "Write a short poem about the sea."}]


@pytest.fixture(scope="module")
def app(model_paths):
    app = start_app(["-m", str(model_paths["smollm2-135m"]), "--replicas", "2", "-t", "1",
                     "-np", "4", "-c", "4096", "--metrics", "--api-key", KEY])
    yield app
    stop_app()


@pytest.fixture(scope="module")
def client(app):
    return openai.OpenAI(base_url=f"{app.url}/v1", api_key=KEY, max_retries=0)


def metric(app, name: str) -> float:
    text = httpx.get(f"{app.url}/metrics", headers=AUTH, timeout=30).text
    return float(next(line.split()[1] for line in text.splitlines()
                      if line.startswith(f"llamacpp:{name} ")))


def stream_chat(client, i: int) -> tuple[str, list]:
    raw = client.chat.completions.with_raw_response.create(
        model="any", messages=CHAT, max_tokens=24, temperature=0, stream=True, seed=i,
        stream_options={"include_usage": True})
    return raw.headers["x-llamacpy-replica"], list(raw.parse())


def test_eight_concurrent_streams_on_two_replicas(app, client):
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: stream_chat(client, i), range(8)))
    replicas = {r for r, _ in results}
    assert len(replicas) == 2, replicas  # Serve spread them over both replicas
    for _, chunks in results:
        assert chunks[0].choices[0].delta.role == "assistant"
        assert len({c.id for c in chunks}) == 1 and all(c.model == chunks[0].model
                                                        for c in chunks)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finals = [c.choices[0].finish_reason for c in chunks if c.choices]
        assert text.strip() and finals[-1] in ("stop", "length") and finals[:-1] == \
            [None] * (len(finals) - 1)
        assert chunks[-1].usage.completion_tokens == len([c for c in chunks if c.choices and
                                                          c.choices[0].delta.content]) or \
            chunks[-1].usage.completion_tokens > 0


def test_greedy_answers_equal_on_either_replica(app, client):
    answers = {client.chat.completions.create(model="any", messages=CHAT, max_tokens=16,
                                              temperature=0).choices[0].message.content
               for _ in range(4)}
    assert len(answers) == 1


def test_models_and_metrics(app, client):
    assert [m.id for m in client.models.list().data] == [next(iter(app.cfg.models))]
    before = metric(app, "tokens_predicted_total")
    client.completions.create(model="any", prompt="Once upon a time", max_tokens=8,
                              temperature=0)
    assert metric(app, "replicas") == 2
    assert metric(app, "tokens_predicted_total") >= before + 8


def test_api_key(app):
    r = httpx.post(f"{app.url}/v1/completions", json={"prompt": "Hi", "max_tokens": 2},
                   headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{app.url}/health").json() == {"status": "ok"}  # public, as llama-server


def test_errors_are_the_servers(app):
    r = httpx.post(f"{app.url}/v1/chat/completions", headers=AUTH,
                   json={"messages": CHAT, "n": 2})
    assert r.status_code == 400 and r.json()["error"]["type"] == "not_supported_error"
    r = httpx.post(f"{app.url}/v1/chat/completions", headers=AUTH, content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.get(f"{app.url}/no/such/route", headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"


def test_ollama_chat(app):
    ollama = pytest.importorskip("ollama")
    c = ollama.Client(host=app.url, headers=AUTH)
    r = c.chat(model="smollm2", messages=CHAT, options={"num_predict": 6, "temperature": 0})
    assert r.message.content and r.done and r.eval_count == 6
    parts = list(c.generate(model="smollm2", prompt="Hi", stream=True,
                            options={"num_predict": 4}))
    assert parts[-1].done and "".join(p.response for p in parts)


def long_stream(app, client_: httpx.Client):
    body = {"messages": CHAT, "max_tokens": 900, "ignore_eos": True, "stream": True}
    return client_.stream("POST", f"{app.url}/v1/chat/completions", json=body, headers=AUTH,
                          timeout=60)


def assert_stopped_early(app, before: float) -> None:
    """The slot frees, and the 900 tokens asked for were never all generated (a finished
    generation adds its tokens to tokens_predicted_total, a cancelled one does not)."""
    wait_for(lambda: metric(app, "requests_processing") == 0, 15, "the slot to be freed")
    assert metric(app, "tokens_predicted_total") - before < 900


def test_client_that_leaves_cancels_its_generation(app):
    before = metric(app, "tokens_predicted_total")
    with httpx.Client() as c, long_stream(app, c) as r:
        lines = r.iter_lines()
        assert [next(lines) for _ in range(6)]
    assert_stopped_early(app, before)


@pytest.mark.xfail(reason="known gap: a non-streamed request abandoned before its answer "
                   "starts is not always cancelled in the replica: it passes alone, and in the "
                   "full suite's two runs on 2 loaded vCPUs the generation ran to its end",
                   strict=False)
def test_client_that_leaves_before_the_answer_cancels_it_too(app):
    before = metric(app, "tokens_predicted_total")
    body = {"messages": CHAT, "max_tokens": 900, "ignore_eos": True}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(f"{app.url}/v1/chat/completions", json=body, headers=AUTH, timeout=1.5)
    assert_stopped_early(app, before)


def test_killed_replica_fails_its_stream_and_is_restarted(app, client):
    with httpx.Client() as c, long_stream(app, c) as r:
        tag = r.headers["x-llamacpy-replica"]  # id@host:pid
        killed, pid = tag.split("@")[0], int(tag.rsplit(":", 1)[1])
        lines = r.iter_lines()
        assert next(lines).startswith("data: ")
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        rest = [line for line in lines if line.startswith("data: ")]
    assert time.monotonic() - t0 < 30
    error = json.loads(rest[-1][len("data: "):])["error"]
    assert error["type"] == "unavailable_error" and "failed" in error["message"]
    # the other replica answers at once; Serve brings the killed one back
    assert client.completions.create(model="any", prompt="Hi", max_tokens=2).choices
    def restarted():
        live = live_replicas(app.name)
        return live if len(live) == 2 and killed not in live and all(live.values()) else None

    live = wait_for(restarted, 120, "a new replica with the model loaded")
    assert metric(app, "replicas") == 2
    with ThreadPoolExecutor(8) as pool:
        served = {tag.split("@")[0] for tag, _ in pool.map(lambda i: stream_chat(client, i),
                                                           range(8))}
    assert served == set(live)  # the new replica takes requests too
