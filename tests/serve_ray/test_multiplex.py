"""serve-ray --models-dir: two models multiplexed on one replica that holds one at a time
(--models-max 1): requests routed by "model" (OpenAI and Ollama routes), the least recently
used model unloaded (after its requests in flight finish), router mode's listing and errors."""

from __future__ import annotations

import os
import threading

import httpx
import pytest

from tests.serve_ray.conftest import live_replicas, start_app, stop_app, wait_for

CHAT = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def app(model_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    (folder / "smol.gguf").symlink_to(model_paths["smollm2-135m"])
    (folder / "gemma.gguf").symlink_to(model_paths["gemma3-270m"])
    (folder / "broken.gguf").write_bytes(b"GGUF" + bytes(60))  # not a model
    app = start_app(["--models-dir", str(folder), "--models-max", "1", "--replicas", "1",
                     "-t", "1", "-np", "2", "-c", "2048", "--metrics"], name="multiplexed")
    yield app
    stop_app()


def chat(app, model: str, **extra) -> httpx.Response:
    return httpx.post(f"{app.url}/v1/chat/completions", timeout=120,
                      json={"model": model, "messages": CHAT, "max_tokens": 6,
                            "temperature": 0, **extra})


def loaded(app) -> list[str]:
    return [m for models in live_replicas(app.name).values() for m in models]


def test_requests_route_by_model_name(app):
    for name, file in (("smol", "SmolLM2"), ("gemma", "gemma-3")):
        r = chat(app, name)
        assert r.status_code == 200 and r.json()["model"] == name
        props = httpx.get(f"{app.url}/props", params={"model": name}, timeout=60).json()
        assert file in os.path.realpath(props["model_path"])
        assert loaded(app) == [name]  # the replica tells the board as it loads and unloads
    listed = {m["id"]: m["status"]["value"] for m in httpx.get(f"{app.url}/v1/models").json()
              ["data"]}
    assert listed["gemma"] == "loaded" and listed["smol"] == "unloaded"


def test_eviction_waits_for_requests_in_flight(app):
    chat(app, "smol")  # the replica holds smol
    result = {}

    def stream():
        with httpx.stream("POST", f"{app.url}/v1/chat/completions", timeout=120, json={
                "model": "smol", "messages": CHAT, "max_tokens": 48, "ignore_eos": True,
                "stream": True}) as r:
            result["lines"] = [line for line in r.iter_lines() if line.startswith("data: ")]

    t = threading.Thread(target=stream)
    t.start()
    wait_for(lambda: httpx.get(f"{app.url}/slots", params={"model": "smol"}).json()[0]
             .get("is_processing"), 30, "the stream to start")
    assert chat(app, "gemma").status_code == 200  # evicts smol once its stream is done
    t.join(120)
    assert result["lines"][-1] == "data: [DONE]"
    assert '"finish_reason": "length"' in result["lines"][-2]
    assert wait_for(lambda: loaded(app) == ["gemma"], 5, "gemma alone loaded")


def test_unknown_and_missing_models(app):
    r = chat(app, "nope")
    assert r.status_code == 400 and r.json()["error"]["message"] == "model 'nope' not found"
    r = httpx.post(f"{app.url}/v1/completions", json={"prompt": "Hi"})
    assert r.json()["error"]["message"] == "model name is missing from the request"
    r = httpx.post(f"{app.url}/api/chat", json={"model": "nope", "messages": CHAT})
    assert r.status_code == 404 and r.json() == {"error": "model 'nope' not found"}


def test_a_model_that_fails_to_load_fails_its_request_only(app):
    r = chat(app, "broken")
    err = r.json()["error"]
    assert r.status_code == 503 and err["type"] == "unavailable_error"
    assert err["message"].startswith("the replica serving model 'broken' failed: ")
    assert chat(app, "smol").status_code == 200


def test_ollama_routes(app):
    r = httpx.post(f"{app.url}/api/generate", timeout=120, json={
        "model": "smol:latest", "prompt": "Hi", "stream": False, "options": {"num_predict": 3}})
    assert r.status_code == 200 and r.json()["done"] and r.json()["model"] == "smol:latest"
    names = {m["name"] for m in httpx.get(f"{app.url}/api/tags", timeout=60).json()["models"]}
    assert {"smol", "gemma"} <= names
    ps = httpx.get(f"{app.url}/api/ps", timeout=60).json()["models"]
    assert [m["name"] for m in ps] == ["smol"]
    r = httpx.post(f"{app.url}/api/pull", json={"model": "smollm2-135m"})
    assert r.status_code == 400 and "llamacpy pull" in r.json()["error"]


def test_router_props_and_model_metrics(app):
    props = httpx.get(f"{app.url}/props").json()
    assert props["role"] == "router" and props["max_instances"] == 1
    chat(app, "gemma")
    text = httpx.get(f"{app.url}/metrics", params={"model": "gemma"}, timeout=30).text
    assert "llamacpp:replicas 1" in text and "llamacpp:tokens_predicted_total" in text
    text = httpx.get(f"{app.url}/metrics", params={"model": "smol"}, timeout=30).text
    assert "llamacpp:replicas 0" in text  # no replica holds it now
