"""Audio that is not WAV (MP3, FLAC, Ogg, M4A, video...), decoded by the ffmpeg program when it
is on PATH, to 16 kHz mono float32 (`ffmpeg -i X -f f32le -ac 1 -ar 16000 -`)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from .mel import SAMPLE_RATE

NO_FFMPEG = ("only WAV is read without ffmpeg; install ffmpeg (apt-get install ffmpeg) for "
             "other formats, or convert it: ffmpeg -i IN -ar 16000 -ac 1 -c:a pcm_s16le out.wav")


class FFmpegError(ValueError):
    """ffmpeg is missing, or could not decode the file (the message says which)."""


def have_ffmpeg() -> bool:
    return shutil.which("ffmpeg") is not None


def decode_with_ffmpeg(path: str | Path, timeout: float = 600.0) -> np.ndarray:
    """16 kHz mono float32 samples of any file ffmpeg decodes; FFmpegError with ffmpeg's own
    last error line when it cannot, or when ffmpeg is not installed."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        raise FFmpegError(NO_FFMPEG)
    cmd = [exe, "-nostdin", "-hide_banner", "-loglevel", "error", "-i", str(path), "-vn",
           "-f", "f32le", "-acodec", "pcm_f32le", "-ac", "1", "-ar", str(SAMPLE_RATE), "-"]
    try:
        run = subprocess.run(cmd, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise FFmpegError(f"ffmpeg took more than {timeout:.0f} s to decode it") from None
    if run.returncode != 0:
        lines = run.stderr.decode("utf-8", "replace").strip().splitlines()
        raise FFmpegError(f"ffmpeg cannot decode it: {lines[-1] if lines else 'no output'}")
    samples = np.frombuffer(run.stdout[:len(run.stdout) // 4 * 4], "<f4").astype(np.float32)
    if samples.size == 0:
        raise FFmpegError("ffmpeg found no audio in it")
    return samples
