"""whisper-server -m whisper-tiny.en: whisper.cpp's POST /inference (its JSON, verbose_json and SRT
shapes, against the same transcription run in this process), POST /load, its error shape for bad
uploads, and whisper.cpp flags that llamacpy cannot honour refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from llamacpy.audio.formats import to_srt, to_txt
from llamacpy.audio.transcribe import TranscribeOptions, transcribe
from llamacpy.audio.wav import load_audio
from llamacpy.cli import whisper_server
from tests.server.conftest import Server, free_port, stop_server, wait_ready

from .test_server import wav  # noqa: F401 - the espeak-ng clip fixture

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory, whisper_gguf):
    log = tmp_path_factory.mktemp("wsrv") / "server.log"
    port = free_port()
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "llamacpy.cli.whisper_server", "-m",
                                 "whisper-tiny.en", "-t", "2", "--port", str(port), "-on", "2"],
                                stdout=fh, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))
    s = Server(proc, port, str(log))
    wait_ready(s, 180)
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def expected(wav, whisper_gguf, whisper_model):  # noqa: F811
    # whisper-server's defaults: -bs -1 (greedy), -bo 2
    options = TranscribeOptions(beam_size=1, best_of=2)
    return transcribe(whisper_gguf, whisper_model, load_audio(wav), options)


def inference(server, wav, **fields) -> httpx.Response:  # noqa: F811
    return httpx.post(server.url + "/inference", files={"file": ("fox.wav", wav.read_bytes())},
                      data=fields, timeout=300)


def test_inference_json_verbose_json_and_srt(server, wav, expected):  # noqa: F811
    assert inference(server, wav).json() == {"text": to_txt(expected.segments)}
    body = inference(server, wav, response_format="verbose_json").json()
    assert (body["task"], body["language"], body["text"]) == \
        ("transcribe", "english", to_txt(expected.segments))
    seg, want = body["segments"][0], expected.segments[0]
    assert (seg["id"], seg["text"], seg["start"], seg["end"]) == (0, want.text, want.start,
                                                                  want.end)
    text_tokens = [t for t in want.tokens if t.id < want.eot]
    assert seg["tokens"] == [t.id for t in text_tokens]
    assert [w["word"] for w in seg["words"]] == [t.text for t in text_tokens]
    # the server's process may sum in another order (its thread count): equal to float32 rounding
    assert [w["probability"] for w in seg["words"]] == pytest.approx([t.p for t in text_tokens],
                                                                     rel=1e-5)
    assert all(0 <= w["start"] <= w["end"] <= body["duration"] + 0.01 for w in seg["words"])
    srt = inference(server, wav, response_format="srt", offset_n="5")
    assert srt.headers["content-type"].startswith("application/x-subrip")
    assert srt.text == to_srt(expected.segments, 5)


def test_bad_uploads_get_whisper_cpp_error_shape(server, wav):  # noqa: F811
    resp = httpx.post(server.url + "/inference", data={"response_format": "json"})
    assert resp.status_code == 400 and resp.json() == {"error": "no 'file' field in the request"}
    resp = httpx.post(server.url + "/inference", files={"file": ("x.wav", b"RIFF\0\0\0\0WAVE")})
    assert resp.status_code == 400 and resp.json()["error"].startswith("failed to read audio")
    resp = inference(server, wav, response_format="json", diarize="true")
    assert resp.status_code == 400 and "diarize" in resp.json()["error"]
    resp = inference(server, wav, beam_size="nine")
    assert resp.json() == {"error": "'beam_size' must be an integer, not 'nine'"}
    resp = inference(server, wav, max_len="30")  # whisper.cpp wraps verbose_json only
    assert resp.status_code == 400 and resp.json() == {
        "error": "max_len applies only to verbose_json with timestamps (the token times "
                 "whisper.cpp computes)"}


def test_load_swaps_the_model_and_keeps_it_on_failure(server, tmp_path, wav, expected):  # noqa: F811
    resp = httpx.post(server.url + "/load", data={"model": str(tmp_path / "missing.bin")})
    assert resp.status_code == 400 and resp.json() == {"error": "model not found!"}
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    resp = httpx.post(server.url + "/load", data={"model": str(bad)})
    assert resp.status_code == 400 and resp.json()["error"].startswith("cannot load")
    resp = httpx.post(server.url + "/load", data={"model": "whisper-tiny.en"}, timeout=300)
    assert resp.status_code == 200 and resp.text == "Load was successful!"
    assert inference(server, wav).json() == {"text": to_txt(expected.segments)}


@pytest.mark.parametrize("flag", [["-di"], ["-tdrz"], ["-dtw", "tiny.en"], ["-p", "2"]])
def test_flags_llamacpy_cannot_honour_are_refused(flag, capsys):
    assert whisper_server.main(["-m", "whisper-tiny.en", *flag]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"whisper-server: error: {flag[0]}: ")
    assert "not supported by llamacpy" in err[0]
