"""Router mode (llama-server without -m) with whisper-tiny.en in the model cache: it is listed,
/v1/audio/transcriptions routes to it by the form's `model` field (its child gets none of the
router's LLM flags), and the LLM routes refuse it with a 400."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import start_server, stop_server

from .test_server import wav  # noqa: F401 - the espeak-ng clip fixture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def router(tmp_path_factory, whisper_gguf):
    root = tmp_path_factory.mktemp("router")
    (root / "cache").mkdir()
    (root / "cache" / "whisper-tiny.en-f16.gguf").symlink_to(whisper_gguf.path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LLAMA_CACHE", str(root / "cache"))
        r = start_server(["-c", "2048", "-t", "2"], str(root / "router.log"))
    yield r
    stop_server(r)


def test_whisper_model_is_routed_by_the_form_field(router, wav):  # noqa: F811
    listed = httpx.get(router.url + "/v1/models").json()["data"]
    assert [m["id"] for m in listed] == ["whisper-tiny.en"]
    resp = httpx.post(router.url + "/v1/audio/transcriptions", timeout=300,
                      files={"file": ("fox.wav", wav.read_bytes())},
                      data={"model": "whisper-tiny.en", "response_format": "json"})
    assert resp.status_code == 200, resp.text + router.log()[-2000:]
    assert "quick brown fox" in resp.json()["text"]
    resp = httpx.post(router.url + "/v1/chat/completions", timeout=60,
                      json={"model": "whisper-tiny.en",
                            "messages": [{"role": "user", "content": "hi"}]})
    assert resp.status_code == 400 and "speech-to-text (whisper) model" in \
        resp.json()["error"]["message"]
    resp = httpx.post(router.url + "/v1/audio/transcriptions",
                      files={"file": ("fox.wav", b"x")}, data={"model": "whisper-1"})
    assert resp.status_code == 400 and resp.json()["error"]["message"] == \
        "model 'whisper-1' not found"
