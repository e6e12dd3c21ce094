"""WAV input (PCM 16/24/32-bit and float, stereo, other rates) against Python's wave module and
scipy's polyphase resampler; other formats through ffmpeg (whisper-cli itself: test_cli.py)."""

from __future__ import annotations

import shutil
import struct
import subprocess
import wave

import numpy as np
import pytest

from llamacpy.audio.wav import AudioError, load_audio, read_wav, resample

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
