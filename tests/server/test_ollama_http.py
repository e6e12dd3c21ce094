"""Ollama's routes over raw HTTP: NDJSON framing, the final object's fields and nanosecond
durations, error bodies and codes, the Host check, CORS, the API key, load/unload answers,
cancellation, and that the OpenAI routes keep llama.cpp's rules. Field names and codes from
ollama's docs/api.md and server/routes.go."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from unittest import mock

import httpx
import pytest

from llamacpy.server.ollama_http import allowed_origins, host_allowed, origin_allowed
from tests.server.conftest import start_server, stop_server

KEY = "sesame"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPT = "Write a long story about a lighthouse keeper."


@pytest.fixture(scope="module")
def server(model_paths, tmp_path_factory):
    log = tmp_path_factory.mktemp("ollama-http") / "server.log"
    with mock.patch.dict(os.environ, {"OLLAMA_ORIGINS": "https://notes.example.org"}):
        srv = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "2048", "-t", "2",
                            "--jinja", "--api-key", KEY, "--slots"], str(log))
    yield srv
    stop_server(srv)


def post(server, path, body, headers=AUTH, **kw):
    return httpx.post(server.url + path, json=body, headers=headers, timeout=120, **kw)


def test_stream_is_ndjson_with_a_final_object_in_nanoseconds(server):
    body = {"model": "m", "prompt": PROMPT, "options": {"num_predict": 12, "temperature": 0}}
    t0 = time.perf_counter_ns()
    r = post(server, "/api/generate", body)
    wall = time.perf_counter_ns() - t0
    assert r.status_code == 200 and r.headers["content-type"] == "application/x-ndjson"
    assert r.text.endswith("\n")
    lines = [json.loads(line) for line in r.text.splitlines()]  # one object a line
    *parts, last = lines
    assert parts and all(p["done"] is False and p["model"] == "m" for p in parts)
    assert last["done"] is True and last["done_reason"] == "length" and last["eval_count"] == 12
    keys = ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration",
            "eval_count", "eval_duration")
    assert all(isinstance(last[k], int) for k in keys)
    # nanoseconds: the server's total is within the client's measured wall time, and the
    # parts add up inside it
    assert 1_000_000 < last["total_duration"] <= wall
    assert last["prompt_eval_duration"] + last["eval_duration"] <= last["total_duration"]
    assert last["eval_duration"] > 1_000_000 * last["eval_count"] / 1000  # > 1 us a token
    assert last["created_at"].endswith("Z")
    nonstream = post(server, "/api/generate", {**body, "stream": False}).json()
    assert nonstream["response"] == "".join(p["response"] for p in lines)
    assert post(server, "/api/generate", {**body, "stream": False}).headers[
        "content-type"] == "application/json"


def test_chat_stream_lines_and_final(server):
    body = {"model": "m", "messages": [{"role": "user", "content": PROMPT}],
            "options": {"num_predict": 6, "temperature": 0}}
    lines = [json.loads(x) for x in post(server, "/api/chat", body).text.splitlines()]
    assert all(x["message"]["role"] == "assistant" for x in lines)
    assert lines[-1]["done"] and lines[-1]["message"]["content"] == ""
    assert lines[-1]["eval_count"] == 6 and lines[-1]["prompt_eval_count"] > 5


@pytest.mark.parametrize("path,body,status,says", [
    ("/api/generate", b"{", 400, "Invalid JSON"),
    ("/api/chat", b"[1]", 400, "JSON object"),
    ("/api/generate", {"prompt": "hi"}, 400, "model is required"),
    ("/api/generate", {"model": "m", "prompt": "hi", "format": "yaml"}, 400, "invalid format"),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                   "format": {"type": "object", "properties": {"a": {"type": 7}}}}, 400,
     "JSON schema"),
    ("/api/generate", {"model": "m", "prompt": "hi", "options": {"num_gpu": 1}}, 400,
     "-ngl"),
    ("/api/generate", {"model": "m", "prompt": "hi", "options": {"bogus": 1}}, 400,
     "not an Ollama option"),
    ("/api/generate", {"model": "m", "prompt": "hi", "options": {"num_ctx": 99999}}, 400,
     "num_ctx"),
    ("/api/generate", {"model": "m", "prompt": "hi", "raw": True, "system": "x"}, 400,
     "raw mode"),
    ("/api/generate", {"model": "m", "prompt": "hi", "suffix": "x"}, 400, "insert"),
    ("/api/generate", {"model": "m", "prompt": "hi", "template": "{{ .Prompt }}"}, 400,
     "template"),
    ("/api/generate", {"model": "m", "prompt": "hi", "images": ["aGk="]}, 400, "image"),
    ("/api/generate", {"model": "m", "prompt": "hi", "keep_alive": "soon"}, 400,
     "duration"),
    ("/api/chat", {"model": "m", "messages": [{"content": "hi"}]}, 400, "role"),
    ("/api/pull", {"model": "llama3.2"}, 404, "not found"),
    ("/api/copy", {"source": "a", "destination": "b"}, 501, "not supported"),
    ("/api/create", {"model": "a"}, 501, "not supported"),
    ("/api/push", {"model": "a"}, 501, "not supported"),
])
def test_errors_have_ollamas_shape(server, path, body, status, says):
    if isinstance(body, bytes):
        r = httpx.post(server.url + path, content=body, headers=AUTH, timeout=60)
    else:
        r = post(server, path, body)
    assert r.status_code == status, r.text
    assert list(r.json()) == ["error"] and says in r.json()["error"], r.text


def test_delete_and_the_openai_routes_keep_their_shapes(server):
    r = httpx.request("DELETE", server.url + "/api/delete", json={"model": "a"}, headers=AUTH)
    assert r.status_code == 501 and isinstance(r.json()["error"], str)
    r = httpx.post(server.url + "/v1/chat/completions", content=b"{", headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_num_ctx_bounds_prompt_and_answer(server):
    body = {"model": "m", "prompt": PROMPT, "stream": False,
            "options": {"num_ctx": 48, "temperature": 0}}
    r = post(server, "/api/generate", body).json()
    assert r["done_reason"] == "length"
    assert r["prompt_eval_count"] + r["eval_count"] == 48


def test_empty_prompt_loads_and_keep_alive_zero_is_refused(server):
    r = post(server, "/api/generate", {"model": "m"}).json()
    assert r["done"] and r["done_reason"] == "load" and r["response"] == ""
    r = post(server, "/api/chat", {"model": "m", "messages": []}).json()
    assert r["done_reason"] == "load" and r["message"] == {"role": "assistant", "content": ""}
    r = post(server, "/api/generate", {"model": "m", "keep_alive": 0})
    assert r.status_code == 400 and "router mode" in r.json()["error"]


def test_api_key(server):
    tags = httpx.get(server.url + "/api/tags")  # public, as in llama.cpp
    assert tags.json()["models"][0]["name"] == "SmolLM2-135M-Instruct.Q4_1.gguf"  # no --alias
    r = httpx.post(server.url + "/api/chat", json={"model": "m", "messages": []})
    assert r.status_code == 401 and r.json() == {"error": "Invalid API Key"}
    assert httpx.get(server.url + "/api/ps").status_code == 401
    assert httpx.get(server.url + "/api/ps", headers=AUTH).status_code == 200
    import ollama

    client = ollama.Client(host=server.url, headers=AUTH)  # how the README says to pass it
    assert client.ps().models[0].context_length == 2048


@pytest.mark.parametrize("host,status", [
    ("evil.example.com", 403), ("evil.example.com:11434", 403), ("localhost", 200),
    ("localhost:11434", 200), ("127.0.0.1:1", 200), ("[::1]:11434", 200),
    ("notes.localhost", 200), ("box.local", 200), ("10.0.0.2", 200)])
def test_host_header_check_on_loopback(server, host, status):
    r = httpx.get(server.url + "/api/version", headers={"Host": host, **AUTH})
    assert r.status_code == status
    if status == 200:
        assert r.json()["version"].count(".") == 2
    # the OpenAI and llama.cpp routes are not Ollama's: no check there
    assert httpx.get(server.url + "/health", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("origin,allowed", [
    ("http://localhost:5173", True), ("http://127.0.0.1:8000", True), ("https://0.0.0.0", True),
    ("app://obsidian.md", True), ("file://", True), ("tauri://localhost", True),
    ("vscode-webview://abc", True), ("https://notes.example.org", True),
    ("https://evil.example.com", False), ("http://localhost.evil.com", False)])
def test_cors_follows_ollamas_origins(server, origin, allowed):
    pre = httpx.options(server.url + "/api/chat", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,authorization"})
    r = httpx.get(server.url + "/api/tags", headers={"Origin": origin})
    if allowed:
        assert pre.status_code == 204 and pre.headers["access-control-allow-origin"] == origin
        assert "Authorization" in pre.headers["access-control-allow-headers"]
        assert "POST" in pre.headers["access-control-allow-methods"]
        assert r.headers["access-control-allow-origin"] == origin
    else:
        assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_origin_and_host_rules():
    origins = allowed_origins("http://a.test, https://*.b.test")
    assert origin_allowed("https://x.b.test", origins) and origin_allowed("http://a.test", origins)
    assert not origin_allowed("http://c.test", origins)
    assert origin_allowed("https://anything", allowed_origins("*"))
    assert host_allowed("") and not host_allowed("example.com") and host_allowed("192.168.1.9")


def test_a_client_that_leaves_cancels_the_generation(server):
    body = {"model": "m", "prompt": PROMPT, "options": {"num_predict": 1500}}
    with httpx.stream("POST", server.url + "/api/generate", json=body, headers=AUTH,
                      timeout=60) as r:
        lines = r.iter_lines()
        assert json.loads(next(lines))["done"] is False
    deadline = time.monotonic() + 3  # 1500 tokens take over 8 s here: only a cancel is this quick
    while time.monotonic() < deadline:
        slots = httpx.get(server.url + "/slots", headers=AUTH).json()
        if not any(s["is_processing"] for s in slots):
            break
        time.sleep(0.2)
    assert not any(s["is_processing"] for s in slots)
    assert slots[0]["next_token"]["n_decoded"] < 1500


def test_pull_streams_progress_for_a_cached_model(server):
    r = post(server, "/api/pull", {"model": "smollm2-135m"})
    lines = [json.loads(x) for x in r.text.splitlines()]
    assert r.headers["content-type"] == "application/x-ndjson"
    assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
    assert any(x.get("completed") == x.get("total") == 98362432 for x in lines)
    r = post(server, "/api/pull", {"model": "smollm2-135m", "stream": False})
    assert r.json() == {"status": "success"}


@pytest.mark.parametrize("path,body,says", [
    ("/api/generate", {"prompt": "hi", "options": []}, "'options' must be an object"),
    ("/api/generate", {"prompt": "hi", "options": {"temperature": "hot"}},
     "'options.temperature' must be a number"),
    ("/api/generate", {"prompt": "hi", "options": {"num_predict": 1e30}},
     "'options.num_predict' must be an integer"),
    ("/api/chat", {"messages": [], "options": {"stop": 5}}, "'options.stop' must be"),
    ("/api/generate", {"prompt": "hi", "images": [1]}, "'images[0]' must be a string"),
    ("/api/generate", {"prompt": "hi", "context": [-1]}, "'context[0]' must be an integer"),
    ("/api/generate", {"prompt": "hi", "context": [10**9]}, "outside the vocabulary"),
    ("/api/generate", {"prompt": "hi", "keep_alive": True}, "'keep_alive' must be"),
    ("/api/generate", {"prompt": "hi", "think": "huge"}, "'think' must be"),
    ("/api/generate", {"prompt": "hi", "think": True}, "does not support thinking"),
    ("/api/generate", {"prompt": "hi", "stream": "yes"}, "'stream' must be a boolean"),
    ("/api/generate", {"prompt": "hi", "top_logprobs": 50}, "'top_logprobs' must be"),
    ("/api/chat", {"messages": "x"}, "'messages' must be an array"),
    ("/api/chat", {"messages": [{"role": "user", "content": ["a"]}]},
     "'messages[0].content' must be a string"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "tools": "x"},
     "'tools' must be an array"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "tools": [
        {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"type": "nonsense"}}}}}]}, "JSON schema"),
    ("/api/chat", {"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"function": {"name": "f", "arguments": "notjson"}}]}, {"role": "user", "content": "x"}]},
     "not valid JSON"),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]},
     "mmproj"),
])
def test_bad_fields_are_400_and_the_server_stays_up(server, path, body, says):
    r = post(server, path, {"model": "m", **body})
    assert r.status_code == 400 and says in r.json()["error"], r.text
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_logprobs_match_the_openai_route(server):
    messages = [{"role": "user", "content": "Say hello."}]
    body = {"model": "m", "messages": messages, "stream": False, "logprobs": True,
            "top_logprobs": 2, "options": {"num_predict": 4, "temperature": 0}}
    post(server, "/api/chat", body)  # so both requests below find the prompt in the cache
    r = post(server, "/api/chat", body).json()
    v1 = post(server, "/v1/chat/completions", {
        "messages": messages, "logprobs": True, "top_logprobs": 2, "max_tokens": 4,
        "temperature": 0}).json()["choices"][0]["logprobs"]["content"]
    assert len(r["logprobs"]) == r["eval_count"] == 4
    for ours, theirs in zip(r["logprobs"], v1):
        assert set(ours) == {"token", "logprob", "bytes", "top_logprobs"}
        assert ours["token"] == theirs["token"]
        assert ours["logprob"] == pytest.approx(theirs["logprob"], abs=1e-6)
        assert [t["token"] for t in ours["top_logprobs"]] == \
            [t["token"] for t in theirs["top_logprobs"]]
    assert "".join(x["token"] for x in r["logprobs"]) == r["message"]["content"]


def test_serve_ollama_listens_on_ollama_host(model_paths, tmp_path):
    """`llamacpy serve --ollama` with OLLAMA_HOST set (as Ollama reads it) answers there."""
    from tests.server.conftest import Server, free_port, wait_ready

    port = free_port()
    env = dict(os.environ, OLLAMA_HOST=f"127.0.0.1:{port}", PYTHONUNBUFFERED="1")
    log = tmp_path / "serve.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "llamacpy", "serve", "--ollama", "-m",
                                 str(model_paths["smollm2-135m"]), "--no-warmup", "-c", "256"],
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, str(log))
    try:
        wait_ready(server, 120)
        assert httpx.get(server.url + "/api/version").json()["version"].count(".") == 2
    finally:
        stop_server(server)


def test_unknown_api_paths_and_methods_have_ollamas_shape(server):
    r = httpx.get(server.url + "/api/nothing", headers=AUTH)
    assert r.status_code == 404 and r.json() == {"error": "404 page not found"}
    r = httpx.get(server.url + "/api/chat", headers=AUTH)
    assert r.status_code == 405 and r.json() == {"error": "405 method not allowed"}
    assert r.headers["allow"] == "POST"
    r = httpx.get(server.url + "/nothing", headers=AUTH)  # llama.cpp's own 404 elsewhere
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
