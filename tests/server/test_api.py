"""Endpoints, JSON shapes and errors, with llama.cpp's field names."""

from __future__ import annotations

import json

import httpx
import pytest


def post(server, path, body, **kw):
    return httpx.post(f"{server.url}{path}", json=body, timeout=120, **kw)


def test_chat_completion_like_llama_cpp_docs(smollm_server):
    r = post(smollm_server, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16,
        "temperature": 0.0, "chat_template_kwargs": {"enable_thinking": False}})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion"
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str) and msg["content"]
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    assert body["usage"]["completion_tokens"] <= 16
    assert {"prompt_n", "predicted_n", "predicted_per_second"} <= set(body["timings"])


def test_streaming_chat_sse(smollm_server):
    chunks, done = [], False
    with httpx.stream("POST", f"{smollm_server.url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "Count to five."}], "max_tokens": 20,
            "temperature": 0.0, "stream": True, "stream_options": {"include_usage": True}}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            if line == "data: [DONE]":
                done = True
                continue
            chunks.append(json.loads(line[6:]))
    assert done
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] > 0


def test_greedy_is_deterministic_and_cached(smollm_server):
    body = {"prompt": "The capital of France is", "n_predict": 12, "temperature": 0}
    a, b = post(smollm_server, "/completion", body).json(), post(smollm_server, "/completion",
                                                                   body).json()
    assert a["content"] == b["content"] and a["content"]
    assert b["timings"]["cache_n"] > 0  # the second request reused the prompt prefix
    assert a["stop_type"] in ("limit", "eos", "word") and a["tokens_predicted"] <= 12


def test_native_completion_fields(smollm_server):
    r = post(smollm_server, "/completion", {"prompt": "Hello", "n_predict": 4, "n_probs": 3,
                                            "temperature": 0, "stop": ["\n\n"]})
    body = r.json()
    probs = body["completion_probabilities"]
    assert len(probs) == body["tokens_predicted"]
    assert len(probs[0]["top_logprobs"]) == 3 and probs[0]["logprob"] <= 0


def test_stop_string_cuts_the_text(smollm_server):
    r = post(smollm_server, "/v1/completions", {"prompt": "1, 2, 3, 4,", "max_tokens": 30,
                                                "temperature": 0, "stop": ["7"]})
    choice = r.json()["choices"][0]
    assert "7" not in choice["text"] and choice["finish_reason"] == "stop"


def test_tokenize_detokenize_template(smollm_server):
    toks = post(smollm_server, "/tokenize", {"content": "Hello world"}).json()["tokens"]
    assert toks and all(isinstance(t, int) for t in toks)
    assert post(smollm_server, "/detokenize", {"tokens": toks}).json()["content"] == "Hello world"
    prompt = post(smollm_server, "/apply-template",
                  {"messages": [{"role": "user", "content": "Hi"}]}).json()["prompt"]
    assert "<|im_start|>user\nHi<|im_end|>" in prompt and prompt.endswith("assistant\n")


def test_models_props_slots_metrics(smollm_server):
    models = httpx.get(f"{smollm_server.url}/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["object"] == "model"
    props = httpx.get(f"{smollm_server.url}/props").json()
    assert props["total_slots"] == 4 and props["modalities"]["vision"] is False
    slots = httpx.get(f"{smollm_server.url}/slots").json()
    assert len(slots) == 4 and {"id", "n_ctx", "is_processing"} <= set(slots[0])
    metrics = httpx.get(f"{smollm_server.url}/metrics").text
    assert "# TYPE llamacpp:prompt_tokens_total counter" in metrics
    assert "llamacpp:requests_processing" in metrics


@pytest.mark.parametrize("path, body, status, kind", [
    ("/v1/chat/completions", b"{not json", 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "temperature": "hot"}, 400, "invalid_request_error"),
    ("/completion", {"prompt": "x", "n_predict": "ten"}, 400, "invalid_request_error"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]},
     400, "invalid_request_error"),
    ("/nowhere", {}, 404, "not_found_error"),
])
def test_errors_have_llama_cpp_shape(smollm_server, path, body, status, kind):
    content = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{smollm_server.url}{path}", content=content, timeout=30)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == status and err["type"] == kind and err["message"]


def test_prompt_longer_than_context(smollm_server):
    slot_ctx = httpx.get(f"{smollm_server.url}/slots").json()[0]["n_ctx"]
    r = post(smollm_server, "/completion", {"prompt": " hello" * (slot_ctx + 50), "n_predict": 1})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "exceed_context_size_error"
    assert err["n_ctx"] == slot_ctx and err["n_prompt_tokens"] > slot_ctx
    # and the server still answers
    assert post(smollm_server, "/completion", {"prompt": "Hi", "n_predict": 2}).status_code == 200
