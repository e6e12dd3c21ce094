"""--reasoning-budget and the reasoning split through the server, with a template that opens a
think block (as Qwen3.5's does) on a small model."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import start_server, stop_server

TEMPLATE = ("{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
            "'<|im_end|>\\n' }}{%- endfor -%}{{ '<|im_start|>assistant\\n<think>\\n' }}")


@pytest.fixture(scope="module")
def thinking_server(model_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("think")
    (folder / "t.jinja").write_text(TEMPLATE)
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "1024",
                           "--chat-template-file", str(folder / "t.jinja"),
                           "--reasoning-budget", "6"], str(folder / "log"))
    yield server
    stop_server(server)


def test_budget_forces_the_end_of_thinking(thinking_server):
    r = httpx.post(f"{thinking_server.url}/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
        "max_tokens": 40, "temperature": 0})
    msg = r.json()["choices"][0]["message"]
    # six thinking tokens, then the forced "</think>", then the answer (which the model may
    # fill with anything, even another "</think>": that is answer text)
    assert msg.get("reasoning_content"), msg
    assert len(msg["reasoning_content"]) < 80 and not msg["content"].startswith("</think>")
    assert msg["content"] and r.json()["usage"]["completion_tokens"] > 10


def test_streamed_reasoning_deltas(thinking_server):
    reasoning, content = "", ""
    with httpx.stream("POST", f"{thinking_server.url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 30,
            "temperature": 0, "stream": True}) as r:
        import json

        for line in r.iter_lines():
            if line.startswith("data: {"):
                for choice in json.loads(line[6:])["choices"]:
                    reasoning += choice["delta"].get("reasoning_content") or ""
                    content += choice["delta"].get("content") or ""
    assert reasoning and "<think>" not in content and "</think>" not in content


def test_reasoning_format_per_request(thinking_server):
    """reasoning_format in the request beats the server's: "none" leaves the thinking in
    content, as llama.cpp does."""
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 30,
            "temperature": 0}
    split = httpx.post(f"{thinking_server.url}/v1/chat/completions", json=body,
                       timeout=120).json()["choices"][0]["message"]
    kept = httpx.post(f"{thinking_server.url}/v1/chat/completions", timeout=120,
                      json={**body, "reasoning_format": "none"}).json()["choices"][0]["message"]
    assert split.get("reasoning_content") and "reasoning_content" not in kept
    assert "</think>" in kept["content"] and split["reasoning_content"] in kept["content"]
    bad = httpx.post(f"{thinking_server.url}/v1/chat/completions", timeout=30,
                     json={**body, "reasoning_format": "sideways"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400


def test_timings_per_token_and_bounded_stop_strings(thinking_server):
    import json

    chunks = []
    with httpx.stream("POST", f"{thinking_server.url}/completion", timeout=120, json={
            "prompt": "Hello", "n_predict": 5, "stream": True, "timings_per_token": True,
            "ignore_eos": True}) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunks.append(json.loads(line[6:]))
    assert len(chunks) == 6 and chunks[-1]["stop"] and all("timings" in c for c in chunks)
    assert [c["timings"]["predicted_n"] for c in chunks] == [1, 2, 3, 4, 5, 5]
    r = httpx.post(f"{thinking_server.url}/completion", timeout=30, json={
        "prompt": "Hello", "n_predict": 2, "stop": [f"s{i}" for i in range(1000)]})
    assert r.status_code == 400 and "stop" in r.json()["error"]["message"]
