"""WAV input (PCM 16/24/32-bit and float, stereo, other rates) against Python's wave module and
scipy's polyphase resampler; whisper-cli end to end and its refusals."""

from __future__ import annotations

import shutil
import struct
import subprocess
import wave

import numpy as np
import pytest

from llamacpy.audio.wav import AudioError, load_audio, read_wav, resample
from llamacpy.cli.whisper_cli import main

signal = pytest.importorskip("scipy.signal")


def _tone(rate: int, seconds: float = 0.5, channels: int = 1) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    x = 0.5 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 3000 * t)
    return np.stack([x * (1 - 0.3 * c) for c in range(channels)], axis=1)


def _write_pcm(path, x: np.ndarray, rate: int, width: int) -> None:
    ints = np.round(x * (2 ** (8 * width - 1) - 1)).astype(np.int64)
    raw = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints.reshape(-1))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(x.shape[1])
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(raw)


def _write_float(path, x: np.ndarray, rate: int) -> None:
    data = x.astype("<f4").tobytes()
    ch = x.shape[1]
    fmt = struct.pack("<HHIIHH", 3, ch, rate, rate * ch * 4, ch * 4, 32)
    body = b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt + b"data" + \
        struct.pack("<I", len(data)) + data
    path.write_bytes(b"RIFF" + struct.pack("<I", len(body)) + body)


@pytest.mark.parametrize("width", [2, 3, 4])
def test_pcm_widths_read_like_the_wave_module(tmp_path, width):
    x = _tone(16000, channels=2)
    path = tmp_path / "a.wav"
    _write_pcm(path, x, 16000, width)
    ours, rate = read_wav(path)
    assert rate == 16000 and ours.shape == x.shape
    np.testing.assert_allclose(ours, x, atol=2.0 / 2 ** (8 * width - 1) + 1e-7)


def test_float_wav_and_stereo_mixdown(tmp_path):
    x = _tone(16000, channels=2).astype(np.float32)
    path = tmp_path / "f.wav"
    _write_float(path, x, 16000)
    np.testing.assert_allclose(load_audio(path), x.mean(axis=1), atol=1e-6)


@pytest.mark.parametrize("rate", [8000, 22050, 44100, 48000])
def test_resample_matches_scipy(rate):
    x = _tone(rate, seconds=1.0)[:, 0]
    g = np.gcd(rate, 16000)
    ref = signal.resample_poly(x, 16000 // g, rate // g)
    ours = resample(x, rate)
    n = min(len(ours), len(ref))
    assert abs(len(ours) - len(ref)) <= 1
    inner = slice(200, n - 200)  # the two filters differ in their edge handling only
    np.testing.assert_allclose(ours[inner], ref[:n][inner], atol=2e-3)


def test_not_a_wav_is_a_clear_error(tmp_path):
    path = tmp_path / "x.wav"
    path.write_bytes(b"this is not audio at all")
    with pytest.raises(AudioError, match="not a WAV file"):
        read_wav(path)


needs_ffmpeg = pytest.mark.skipif(shutil.which("ffmpeg") is None,
                                  reason="ffmpeg is not installed (apt-get install ffmpeg)")


@needs_ffmpeg
@pytest.mark.parametrize("ext", ["flac", "mp3", "ogg"])
def test_other_formats_go_through_ffmpeg(tmp_path, ext):
    x = _tone(16000, seconds=1.0)[:, 0]
    wav, other = tmp_path / "t.wav", tmp_path / f"t.{ext}"
    _write_pcm(wav, x[:, None], 16000, 2)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(wav), str(other)], check=True)
    ours = load_audio(other)
    assert abs(len(ours) - len(x)) <= 1600  # mp3/ogg add encoder delay and padding
    if ext == "flac":  # lossless: the same samples to 16-bit rounding
        np.testing.assert_allclose(ours[:len(x)], x, atol=2e-4)
    else:  # lossy: the tones' power survives
        assert abs(float(np.sqrt(np.mean(ours ** 2))) - float(np.sqrt(np.mean(x ** 2)))) < 0.03


@needs_ffmpeg
def test_non_audio_through_ffmpeg_is_a_clear_error(tmp_path):
    junk = tmp_path / "junk.mp3"
    junk.write_bytes(bytes(range(256)) * 20)
    with pytest.raises(AudioError, match=f"^{junk}: not a WAV file, and ffmpeg cannot decode "
                                         f"it: {junk}: (Invalid data found|Invalid argument)"):
        load_audio(junk)


def test_without_ffmpeg_one_line_says_so(tmp_path, monkeypatch):
    from llamacpy.audio import ffmpeg

    monkeypatch.setattr(ffmpeg.shutil, "which", lambda name: None)
    song = tmp_path / "song.mp3"
    song.write_bytes(b"ID3\x03\x00" + bytes(100))
    with pytest.raises(AudioError) as e:
        load_audio(song)
    assert str(e.value) == f"{song}: not a WAV file, and {ffmpeg.NO_FFMPEG}"
    assert "\n" not in str(e.value)


def test_cli_refuses_bad_input_and_unknown_flags(tmp_path, capsys):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x04\x00\x00\x00WAVE")
    assert main(["-m", "whisper-tiny.en", "-f", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"whisper-cli: error: cannot read '{bad}': {bad}: WAV file without a 'fmt' chunk"]
    assert main(["-f", str(bad), "-osrt"]) == 1
    assert "not supported yet: -osrt" in capsys.readouterr().err
    assert main([]) == 1


@pytest.mark.slow
def test_cli_prints_the_transcript(tmp_path, capsys, whisper_gguf, whisper_model, speak):
    import subprocess

    from llamacpy.audio.transcribe import transcribe
    from llamacpy.cli.whisper_cli import console_time

    path = tmp_path / "s.wav"
    speech = "The quick brown fox jumps over the lazy dog. Please call Stella and ask her."
    subprocess.run(["espeak-ng", "-w", str(path), speech], check=True)
    segments = transcribe(whisper_gguf, whisper_model, load_audio(path)).segments
    texts = [s.text for s in segments]
    assert main(["-m", "whisper-tiny.en", "-f", str(path), "-t", "1", "-nt"]) == 0
    out = capsys.readouterr().out
    assert out == "".join(texts) + "\n" and "lazy dog" in out.lower()
    assert main(["-m", "whisper-tiny.en", str(path), "-t", "1"]) == 0  # positional input
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"[{console_time(s.start)} --> {console_time(s.end)}]  {t}"
                     for s, t in zip(segments, texts)]
    assert lines[0].startswith("[00:00:00.000 --> 00:00:0")


def test_console_time_is_whisper_cpp_to_timestamp():
    from llamacpy.cli.whisper_cli import console_time

    assert console_time(0) == "00:00:00.000"
    assert console_time(3723.456) == "01:02:03.460"  # 10 ms ticks, as whisper.cpp keeps time
    assert console_time(59.999) == "00:01:00.000"


def test_cli_language_flags(tmp_path, capsys):
    wav = tmp_path / "t.wav"
    _write_pcm(wav, _tone(16000), 16000, 2)
    assert main(["-f", str(wav), "-l", "auto"]) == 1
    assert "-l auto (language detection) is not supported yet" in capsys.readouterr().err
    assert main(["-m", "whisper-tiny.en", "-f", str(wav), "-l", "de"]) == 0  # as whisper.cpp
    assert "model is not multilingual, ignoring language" in capsys.readouterr().err
