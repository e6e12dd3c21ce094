"""Ollama's `images` and `think` with the tiny Qwen3.5 and its projector (the vision tests'
model): /api/chat and /api/generate with base64 images, and thinking in message.thinking,
each equal to what /v1/chat/completions answers with the same messages (image_url parts,
enable_thinking)."""

from __future__ import annotations

import httpx
import ollama
import pytest

from .conftest import start_server, stop_server
from .test_vision import FRAME, QUESTION, QWEN, QWEN_MMPROJ

OPTS = {"temperature": 0, "num_predict": 12}
# ChatML that thinks unless enable_thinking is false (as Qwen3's): the tiny model has no template
TEMPLATE = ("{%- for m in messages -%}{{ '<|im_start|>' + m.role + '\\n' + m.content + "
            "'<|im_end|>\\n' }}{%- endfor -%}{{ '<|im_start|>assistant\\n' }}"
            "{%- if enable_thinking is defined and not enable_thinking -%}"
            "{{ '<think>\\n\\n</think>\\n\\n' }}{%- else -%}{{ '<think>\\n' }}{%- endif -%}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-vision")
    (folder / "think.jinja").write_text(TEMPLATE)
    srv = start_server(["-m", str(QWEN), "--mmproj", str(QWEN_MMPROJ), "-c", "2048", "-t", "2",
                        "--jinja", "--chat-template-file", str(folder / "think.jinja")],
                       str(folder / "server.log"))
    yield srv
    stop_server(srv)


def v1(server, content, think: bool) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "temperature": 0,
            "max_tokens": 12, "chat_template_kwargs": {"enable_thinking": think}}
    return httpx.post(server.url + "/v1/chat/completions", json=body,
                      timeout=120).json()["choices"][0]["message"]


def test_images_equal_image_url_parts(server):
    client = ollama.Client(host=server.url)
    parts = [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{FRAME}"}},
             {"type": "text", "text": QUESTION}]
    reference = v1(server, parts, think=False)
    r = client.chat(model="x", think=False, options=OPTS, messages=[
        {"role": "user", "content": QUESTION, "images": [FRAME]}])
    assert r.message.content == reference["content"] and r.prompt_eval_count > 20
    assert r.message.thinking is None and "reasoning_content" not in reference
    g = client.generate(model="x", prompt=QUESTION, images=[FRAME], think=False, options=OPTS)
    assert g.response == reference["content"]


def test_thinking_comes_back_in_message_thinking(server):
    client = ollama.Client(host=server.url)
    reference = v1(server, QUESTION, think=True)
    r = client.chat(model="x", think=True, options=OPTS,
                    messages=[{"role": "user", "content": QUESTION}])
    assert (r.message.thinking or "") == reference.get("reasoning_content", "")
    assert r.message.content == reference["content"]
    assert r.message.thinking  # the prompt opens a think block: the first tokens are thinking
    streamed = list(client.chat(model="x", think=True, options=OPTS, stream=True,
                                messages=[{"role": "user", "content": QUESTION}]))
    assert "".join(p.message.thinking or "" for p in streamed) == (r.message.thinking or "")


def test_show_says_vision_and_thinking(server):
    caps = ollama.Client(host=server.url).show("x").capabilities
    assert "vision" in caps and "thinking" in caps and "completion" in caps
