"""llama-server -m whisper-tiny.en: OpenAI's /v1/audio/transcriptions and /translations through
the official openai client, every response_format against the same transcription run in this
process, and bad uploads: each a 400 in llama.cpp's error shape, while a good request sent at
the same time still gets its transcript."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from llamacpy.audio.formats import to_srt, to_vtt
from llamacpy.audio.token_times import with_token_times
from llamacpy.audio.transcribe import SpecialTokens, TranscribeOptions, transcribe
from llamacpy.audio.wav import load_audio
from tests.server.conftest import start_server, stop_server

pytestmark = pytest.mark.slow

SENTENCE = "The quick brown fox jumps over the lazy dog."
# whisper.cpp server's decoding defaults (greedy, best_of 2, fallback steps of 0.2)
SERVER_OPTIONS = TranscribeOptions(beam_size=1, best_of=2)


def spoken_wav(folder: Path, name: str, text: str, voice: str = "en") -> Path:
    """espeak-ng saying `text` into folder/name (its 22.05 kHz WAV); skips without espeak-ng."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    path = folder / name
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(path), text], check=True)
    return path


@pytest.fixture(scope="module")
def wav(tmp_path_factory):
    return spoken_wav(tmp_path_factory.mktemp("speech"), "fox.wav", SENTENCE)


@pytest.fixture(scope="module")
def expected(wav, whisper_gguf, whisper_model):
    """What the server must answer: the same file through transcribe() in this process."""
    return transcribe(whisper_gguf, whisper_model, load_audio(wav), SERVER_OPTIONS)


@pytest.fixture(scope="module")
def server(tmp_path_factory, whisper_gguf):
    log = tmp_path_factory.mktemp("srv") / "server.log"
    s = start_server(["-m", "whisper-tiny.en", "-t", "2", "--no-warmup"], str(log))
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def test_openai_client_transcribes_json_and_verbose_json(client, wav, expected, whisper_gguf):
    with open(wav, "rb") as fh:
        result = client.audio.transcriptions.create(model="whisper-1", file=fh)
    assert result.text == expected.text.strip()
    assert "quick brown fox" in result.text
    with open(wav, "rb") as fh:
        verbose = client.audio.transcriptions.create(
            model="whisper-1", file=fh, response_format="verbose_json",
            timestamp_granularities=["segment", "word"])
    assert verbose.language == "english" and verbose.text == expected.text.strip()
    assert abs(verbose.duration - expected.duration) < 1e-6
    assert [(s.start, s.end, s.text) for s in verbose.segments] == \
        [(s.start, s.end, s.text) for s in expected.segments]
    assert verbose.segments[0].tokens == [t.id for t in expected.segments[0].tokens
                                          if t.id < expected.segments[0].eot]
    # words: whisper.cpp's token times (audio/token_times.py), tokens joined at spaces
    timed = with_token_times(expected.segments, load_audio(wav),
                             whisper_gguf.require("tokenizer.ggml.tokens"),
                             SpecialTokens.from_gguf(whisper_gguf))
    text = [t for t in timed[0].tokens if t.id < timed[0].eot]
    assert [w.word for w in verbose.words] == expected.text.split()
    assert (verbose.words[0].start, verbose.words[-1].end) == (text[0].t0, text[-1].t1)
    starts = [w.start for w in verbose.words]
    assert starts == sorted(starts) and all(w.start <= w.end for w in verbose.words)


@pytest.mark.parametrize("fmt", ["text", "srt", "vtt"])
def test_openai_client_text_formats(client, wav, expected, fmt):
    with open(wav, "rb") as fh:
        body = client.audio.transcriptions.create(model="any-name", file=fh, response_format=fmt)
    want = {"text": expected.text.strip() + "\n", "srt": to_srt(expected.segments),
            "vtt": to_vtt(expected.segments)}[fmt]
    assert body == want


def post(server, path: str, files=None, data=None, **kw) -> httpx.Response:
    return httpx.post(server.url + path, files=files, data=data, timeout=300, **kw)


def assert_error(resp: httpx.Response, message: str, kind: str = "invalid_request_error"):
    assert resp.status_code == 400, resp.text
    body = resp.json()
    assert body["error"]["code"] == 400 and body["error"]["type"] == kind
    assert message in body["error"]["message"]


def test_bad_uploads_are_400s_and_a_concurrent_request_still_succeeds(server, wav, expected):
    good: dict = {}

    def transcribe_good():
        good["resp"] = post(server, "/v1/audio/transcriptions",
                            files={"file": ("fox.wav", wav.read_bytes())},
                            data={"model": "whisper-1"})

    worker = threading.Thread(target=transcribe_good)
    worker.start()
    raw = wav.read_bytes()
    url = "/v1/audio/transcriptions"
    assert_error(post(server, url, files={"file": ("a.wav", b"this is not audio")}),
                 "not a WAV file")
    assert_error(post(server, url, files={"file": ("a.wav", b"")}), "the uploaded file is empty")
    assert_error(post(server, url, files={"file": ("a.wav", raw[:30])}), "failed to read audio")
    assert_error(post(server, url, data={"model": "whisper-1"}, files={"x": ("a", b"1")}),
                 "no 'file' field")
    assert_error(post(server, url, files={"file": ("a.wav", raw)},
                      data={"response_format": "mp3"}), "unknown response_format 'mp3'")
    assert_error(post(server, url, content=b"{}", headers={"content-type": "application/json"}),
                 "multipart/form-data")
    assert_error(post(server, url, files={"file": ("a.wav", raw)},
                      data={"temperature": "hot"}), "'temperature' must be a number")
    assert_error(post(server, url, files={"file": ("a.wav", raw)}, data={"colour": "red"}),
                 "unknown field: colour")
    worker.join()
    assert good["resp"].status_code == 200, good["resp"].text
    assert good["resp"].json()["text"] == expected.text.strip()
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_refusals_name_what_is_not_supported(server, wav):
    raw = wav.read_bytes()
    url = "/v1/audio/transcriptions"
    assert_error(post(server, url, files={"file": ("a.wav", raw)},
                      data={"timestamp_granularities[]": "segment"}), "verbose_json")
    assert_error(post(server, "/v1/audio/translations", files={"file": ("a.wav", raw)}),
                 "English-only model cannot translate", "not_supported_error")
    assert_error(post(server, url, files={"file": ("a.wav", raw)}, data={"language": "de"}),
                 "English-only", "not_supported_error")
    resp = httpx.post(server.url + "/v1/chat/completions",
                      json={"messages": [{"role": "user", "content": "hi"}]})
    assert_error(resp, "speech-to-text (whisper) model")


def test_models_lists_the_whisper_model(server):
    data = httpx.get(server.url + "/v1/models").json()["data"]
    assert [m["id"] for m in data] == ["whisper-tiny.en-f16.gguf"]
    assert json.loads(json.dumps(data))[0]["meta"]["architecture"] == "whisper"


def test_llm_flags_are_refused_for_a_whisper_model(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "llamacpy", "server", "-m", "whisper-tiny.en", "-c", "8192"],
        check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == \
        "llama-server: error: --ctx-size does not apply to a speech-to-text (whisper) model"


def test_translation_on_a_multilingual_model_detects_the_language(tmp_path):
    """/v1/audio/translations on whisper-base (in process): German speech, the language
    detected (translations never name it), the task and the text in English."""
    from starlette.testclient import TestClient

    from llamacpy.cli.whisper_server import parser, transcribe_defaults
    from llamacpy.hub import pull
    from llamacpy.server.audio import AudioConfig, AudioState, build_audio_app

    german = spoken_wav(tmp_path, "de.wav", "Guten Morgen, wie geht es dir heute? Das Wetter "
                        "ist schön.", voice="de")
    state = AudioState(AudioConfig(str(pull("whisper-base", quiet=True)), verbosity=0,
                                   defaults=transcribe_defaults(parser().parse_args([]))))
    state.load()
    try:
        resp = TestClient(build_audio_app(state)).post(
            "/v1/audio/translations", files={"file": ("de.wav", german.read_bytes())},
            data={"model": "whisper-1", "response_format": "verbose_json"})
    finally:
        state.stop()
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert (body["task"], body["language"]) == ("translate", "german")
    assert "good morning" in body["text"].lower()


def test_long_uploads_log_progress(tmp_path, whisper_gguf, capsys):
    """Audio longer than one window logs whisper.cpp-style progress lines (in process)."""
    import wave

    from starlette.testclient import TestClient

    from llamacpy.server.audio import AudioConfig, AudioState, build_audio_app

    path = tmp_path / "long.wav"
    with wave.open(str(path), "wb") as w:  # 45 s of faint noise at 16 kHz
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
        noise = np.random.default_rng(0).integers(-30, 30, 45 * 16000, dtype=np.int16)
        w.writeframes(noise.tobytes())
    state = AudioState(AudioConfig(whisper_gguf.path, defaults={"beam_size": 1}))
    state.load()
    try:
        resp = TestClient(build_audio_app(state)).post(
            "/inference", files={"file": ("long.wav", path.read_bytes())})
    finally:
        state.stop()
    assert resp.status_code == 200, resp.text
    lines = [line for line in capsys.readouterr().err.splitlines() if "progress =" in line]
    assert lines and lines[-1] == "whisper-server: 'long.wav': progress = 100%"


def test_api_key_and_loading_state_gate_every_route(whisper_gguf):
    """--api-key guards the audio routes (not /health); before the model is loaded they are 503."""
    from starlette.testclient import TestClient

    from llamacpy.server.audio import AudioConfig, AudioState, build_audio_app

    state = AudioState(AudioConfig(whisper_gguf.path, api_keys=["secret"]))
    try:
        client = TestClient(build_audio_app(state))
        resp = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", b"x")})
        assert resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"
        resp = client.post("/inference", files={"file": ("a.wav", b"x")},
                           headers={"Authorization": "Bearer secret"})
        assert resp.status_code == 503 and resp.json()["error"]["message"] == "Loading model"
        assert client.get("/health").status_code == 503
    finally:
        state.stop()
