"""Ollama's routes in router mode (llama-server without -m) over a folder of two catalogue
models: names with Ollama's :latest tag route like "model", an unknown name is Ollama's 404,
/api/tags and /api/ps list the folder and the loaded models, keep_alive unloads (Ollama's
server/routes.go behaviour: "load" and "unload" answers, expiry after the duration)."""

from __future__ import annotations

import os
import time
from unittest import mock

import httpx
import ollama
import pytest

from tests.server.conftest import start_server, stop_server

SMOL, GEMMA = "SmolLM2-135M-Instruct.Q4_1", "gemma-3-270m-q4_k_m"
HELLO = [{"role": "user", "content": "Say hello."}]
GREEDY = {"temperature": 0, "num_predict": 8}


@pytest.fixture(scope="module")
def router(model_paths, tmp_path_factory):
    root = tmp_path_factory.mktemp("ollama-router")
    (root / "models").mkdir()
    (root / "cache").mkdir()
    (root / "models" / f"{SMOL}.gguf").symlink_to(model_paths["smollm2-135m"])
    (root / "models" / f"{GEMMA}.gguf").symlink_to(model_paths["gemma3-270m"])
    with mock.patch.dict(os.environ, {"LLAMA_CACHE": str(root / "cache")}):
        srv = start_server(["--models-dir", str(root / "models"), "--no-warmup", "-c", "1024",
                            "-t", "1", "--jinja"], str(root / "router.log"))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def client(router):
    return ollama.Client(host=router.url, timeout=300)


def loaded(client) -> list[str]:
    return [m.name for m in client.ps().models]


def test_tags_list_the_folder(client):
    models = {m.model: m for m in client.list().models}
    assert set(models) == {SMOL, GEMMA}
    assert models[SMOL].details.family == "llama" and models[GEMMA].details.family == "gemma3"
    assert models[GEMMA].details.quantization_level == "Q4_K_M"


def test_a_tagged_name_routes_and_answers_as_the_openai_route(client, router):
    r = client.chat(model=f"{SMOL}:latest", messages=HELLO, options=GREEDY)
    v1 = httpx.post(router.url + "/v1/chat/completions", timeout=300, json={
        "model": SMOL, "messages": HELLO, "temperature": 0, "max_tokens": 8}).json()
    assert r.message.content == v1["choices"][0]["message"]["content"] != ""
    (m,) = [m for m in client.ps().models if m.name == SMOL]
    assert m.context_length == 1024 and m.details.family == "llama"


@pytest.mark.parametrize("path,body", [
    ("/api/chat", {"messages": HELLO}), ("/api/generate", {"prompt": "hi"}),
    ("/api/show", {}), ("/api/embed", {"input": "hi"})])
def test_an_unknown_name_is_ollamas_404(router, path, body):
    r = httpx.post(router.url + path, json={"model": "llama3.2:3b", **body}, timeout=60)
    assert r.status_code == 404 and r.json() == {"error": "model 'llama3.2:3b' not found"}


def test_empty_requests_load_and_keep_alive_zero_unloads(client):
    r = client.generate(model=GEMMA)
    assert r.done and r.done_reason == "load" and GEMMA in loaded(client)
    r = client.generate(model=GEMMA, keep_alive=0)
    assert r.done_reason == "unload" and GEMMA not in loaded(client)
    r = client.chat(model=SMOL, messages=[], keep_alive=0)
    assert r.done_reason == "unload" and loaded(client) == []


def test_load_duration_counts_the_routers_load(client):
    client.generate(model=GEMMA, keep_alive=0)  # not loaded
    first = client.chat(model=GEMMA, messages=HELLO, options=GREEDY)
    again = client.chat(model=GEMMA, messages=HELLO, options=GREEDY)
    assert first.load_duration > 10**8 and first.total_duration > first.load_duration  # > 0.1 s
    assert again.load_duration == 0 and again.total_duration < first.total_duration
    streamed = list(client.generate(model=GEMMA, prompt="Hi", options=GREEDY, stream=True,
                                    keep_alive=0))
    deadline = time.monotonic() + 10  # keep_alive 0: unloaded once the answer is out
    while GEMMA in loaded(client) and time.monotonic() < deadline:
        time.sleep(0.1)
    cold = list(client.generate(model=GEMMA, prompt="Hi", options=GREEDY, stream=True))
    assert streamed[-1].load_duration == 0 and cold[-1].load_duration > 10**8


def test_keep_alive_duration_unloads_once_idle(client):
    client.chat(model=SMOL, messages=HELLO, options=GREEDY, keep_alive="2s")
    (m,) = [m for m in client.ps().models if m.name == SMOL]
    assert 0 < m.expires_at.timestamp() - time.time() <= 2.5
    deadline = time.monotonic() + 15
    while SMOL in loaded(client) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert SMOL not in loaded(client)
    client.chat(model=SMOL, messages=HELLO, options=GREEDY, keep_alive=-1)
    time.sleep(3)
    (m,) = [m for m in client.ps().models if m.name == SMOL]
    assert m.expires_at.year > 2100


def test_tags_rescan_the_folder(client, router, model_paths):
    folder = next(p for p in router.proc.args if str(p).endswith("models"))
    extra = os.path.join(folder, "extra-smol.gguf")
    os.symlink(model_paths["smollm2-135m"], extra)
    try:
        assert "extra-smol" in {m.model for m in client.list().models}
    finally:
        os.unlink(extra)
    assert "extra-smol" not in {m.model for m in client.list().models}


def test_show_and_version_through_the_router(client, router):
    r = client.show(GEMMA)
    assert r.modelinfo["general.architecture"] == "gemma3" and "completion" in r.capabilities
    assert httpx.get(router.url + "/api/version").json()["version"].count(".") == 2


def test_unknown_api_paths_are_ollamas_404(router):
    r = httpx.get(router.url + "/api/nothing")
    assert r.status_code == 404 and r.json() == {"error": "404 page not found"}
