"""Images through llama-server (--mmproj): the reference deployment's request (a base64 JPEG
data URL of a 448x252 frame and a question, stream off and on), /completion's multimodal_data,
/props and /v1/models advertising vision, llama.cpp's 400s for bad images and for images sent
to a server without a projector, and first-token probabilities against llama.cpp's mtmd
(tests/golden/vision/mtmd_prompts.*) with prompt chunks that cut through images.
"""

from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

from .conftest import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "vision"
QWEN, QWEN_MMPROJ = ROOT / "tests/golden/qwen35/qwen35.gguf", GOLDEN / "qwen35.gguf"
GEMMA, GEMMA_MMPROJ = ROOT / "tests/golden/tiny_hf/gemma3.gguf", GOLDEN / "gemma3.gguf"
META = json.loads((GOLDEN / "mtmd_prompts.json").read_text())
DATA = np.load(GOLDEN / "mtmd_prompts.npz")
QUESTION = "What is in this picture?"


def frame_jpeg() -> bytes:
    """A 448x252 camera-like frame: colour ramps and noise, JPEG-compressed."""
    rng = np.random.default_rng(7)
    y, x = np.mgrid[0:252, 0:448]
    img = np.stack([x * 255 // 447, y * 255 // 251, (x + y) % 256], axis=-1)
    img = (img + rng.normal(0, 10, img.shape)).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=85)
    return buf.getvalue()


FRAME = base64.b64encode(frame_jpeg()).decode()


def chat_body(url: str, stream: bool = False, max_tokens: int = 16) -> dict:
    return {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": QUESTION}]}],
        "max_tokens": max_tokens, "temperature": 0, "stream": stream,
        "chat_template_kwargs": {"enable_thinking": False}}


def server(tmp_path_factory, name: str, args: list[str]):
    log = tmp_path_factory.mktemp(name) / "server.log"
    return start_server([str(a) for a in args], str(log))


@pytest.fixture(scope="module")
def vision_server(tmp_path_factory):
    """The reference deployment's command line, with the tiny Qwen3.5 and its projector."""
    s = server(tmp_path_factory, "vision", ["--model", QWEN, "--mmproj", QWEN_MMPROJ,
                                            "--ctx-size", "2048", "--parallel", "1", "--jinja"])
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def text_server(tmp_path_factory):
    s = server(tmp_path_factory, "text", ["--model", QWEN, "--ctx-size", "512"])
    yield s
    stop_server(s)


def post(srv, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(f"{srv.url}{path}", json=body, timeout=120, **kw)


def test_reference_request(vision_server):
    r = post(vision_server, "/v1/chat/completions",
             chat_body(f"data:image/jpeg;base64,{FRAME}"))
    assert r.status_code == 200, r.text
    body = r.json()
    msg = body["choices"][0]["message"]
    assert msg["role"] == "assistant" and isinstance(msg["content"], str)
    assert body["usage"]["completion_tokens"] <= 16
    t = body["timings"]
    assert t["image_ms"] > 0 and t["prompt_n"] == body["usage"]["prompt_tokens"]
    # 448x252 -> the tiny projector's grid; the image cells count as prompt tokens
    assert body["usage"]["prompt_tokens"] > 100


def test_reference_request_streamed_matches(vision_server):
    url = f"data:image/jpeg;base64,{FRAME}"
    whole = post(vision_server, "/v1/chat/completions", chat_body(url)).json()
    text, finish, timings = "", None, None
    with httpx.stream("POST", f"{vision_server.url}/v1/chat/completions",
                      json=chat_body(url, stream=True), timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                finish = choice.get("finish_reason") or finish
            timings = chunk.get("timings", timings)
    assert text == whole["choices"][0]["message"]["content"]
    assert finish == whole["choices"][0]["finish_reason"]
    # the same image again: its cells come from the cache, it is not encoded again
    assert timings["cache_n"] > 100 and timings["image_ms"] == 0


def test_completion_multimodal_data(vision_server):
    prompt = {"prompt_string": "Look: <__media__> What is it?", "multimodal_data": [FRAME]}
    r = post(vision_server, "/completion", {"prompt": prompt, "n_predict": 4,
                                            "temperature": 0})
    assert r.status_code == 200, r.text
    assert r.json()["tokens_evaluated"] > 100
    r = post(vision_server, "/completion", {"prompt": {"prompt_string": "no marker",
                                                       "multimodal_data": [FRAME]}})
    assert r.status_code == 400 and "media markers" in r.json()["error"]["message"]


def test_props_and_models_advertise_vision(vision_server, text_server):
    assert httpx.get(f"{vision_server.url}/props").json()["modalities"] == {
        "vision": True, "audio": False}
    assert httpx.get(f"{text_server.url}/props").json()["modalities"]["vision"] is False
    models = httpx.get(f"{vision_server.url}/v1/models").json()["models"]
    assert models[0]["capabilities"] == ["completion", "multimodal"]
    assert httpx.get(f"{text_server.url}/v1/models").json()["models"][0]["capabilities"] == [
        "completion"]


def assert_error(r: httpx.Response, message: str) -> None:
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] == "invalid_request_error"
    assert message in err["message"]


def test_image_without_projector(text_server):
    r = post(text_server, "/v1/chat/completions", chat_body(f"data:image/jpeg;base64,{FRAME}"))
    assert_error(r, "image input is not supported - hint: if this is unexpected, you may need "
                    "to provide the mmproj")
    r = post(text_server, "/completion", {"prompt": {"prompt_string": "<__media__>",
                                                     "multimodal_data": [FRAME]}})
    assert_error(r, "Multimodal data provided, but model does not support multimodal requests")


def png_bytes(w: int, h: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("url, message", [
    ("data:image/jpeg;base64,!!not base64!!", "Invalid base64 value"),
    ("data:image/png;base64," + base64.b64encode(b"not an image at all").decode(),
     "Failed to load image"),
    ("data:image/jpeg;base64," + FRAME[: len(FRAME) // 2 // 4 * 4], "Failed to load image"),
    ("data:text/plain;base64,AAAA", "Invalid uri format"),
    ("data:image/png,AAAA", "uri must be base64 encoded"),
    ("http://example.com/cat.jpg", "Failed to download image"),
    ("data:image/png;base64," + base64.b64encode(png_bytes(9000, 8000)).decode(),
     "Failed to load image"),
])
def test_bad_images_are_400(vision_server, url, message):
    assert_error(post(vision_server, "/v1/chat/completions", chat_body(url)), message)
    assert httpx.get(f"{vision_server.url}/health").json() == {"status": "ok"}


def test_bad_images_leave_other_requests_alone(vision_server):
    """A generation in flight finishes while bad images are refused beside it."""
    result = {}

    def run():
        result["r"] = post(vision_server, "/v1/chat/completions",
                           chat_body(f"data:image/jpeg;base64,{FRAME}", max_tokens=24))

    t = threading.Thread(target=run)
    t.start()
    for _ in range(3):
        assert_error(post(vision_server, "/v1/chat/completions",
                          chat_body("data:image/png;base64,AAAA")), "Failed to load image")
    t.join()
    assert result["r"].status_code == 200


@pytest.fixture(scope="module")
def golden_servers(tmp_path_factory):
    """Small batches (-b 8) so prompt chunks end inside images; f32 cache as the goldens."""
    common = ["-b", "8", "-ctk", "f32", "-ctv", "f32", "-c", "512", "-np", "2"]
    servers = {"qwen35.gguf": server(tmp_path_factory, "gq", ["-m", QWEN, "--mmproj",
                                                               QWEN_MMPROJ, *common]),
               "gemma3.gguf": server(tmp_path_factory, "gg", ["-m", GEMMA, "--mmproj",
                                                               GEMMA_MMPROJ, *common])}
    yield servers
    for s in servers.values():
        stop_server(s)


@pytest.mark.parametrize("name", ["qwen35-two", "gemma3-two"])
def test_first_token_probabilities_match_llamacpp(golden_servers, name):
    case = META["cases"][name]
    files = [base64.b64encode((GOLDEN / "images" / i).read_bytes()).decode()
             for i in case["images"]]
    r = post(golden_servers[case["mmproj"]], "/completion", {
        "prompt": {"prompt_string": case["prompt"], "multimodal_data": files},
        "n_predict": 1, "n_probs": 5, "temperature": 0})
    assert r.status_code == 200, r.text
    top = r.json()["completion_probabilities"][0]["top_logprobs"]
    logits = DATA[f"{name}.logits"][0].astype(np.float64)
    ref = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    assert top[0]["id"] == int(np.argmax(ref))
    for entry in top:
        assert abs(entry["logprob"] - ref[entry["id"]]) < 5e-3
