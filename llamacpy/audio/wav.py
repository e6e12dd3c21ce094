"""WAV input: 8/16/24/32-bit PCM and 32/64-bit float, any rate and channel count, to 16 kHz mono
float32 (whisper.cpp's read_audio_data converts any input the same way)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from .mel import SAMPLE_RATE

PCM, IEEE_FLOAT, EXTENSIBLE = 1, 3, 0xFFFE


class AudioError(ValueError):
    pass


def _chunks(data: bytes, path: str) -> dict[bytes, bytes]:
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise AudioError(f"{path}: not a WAV file (no RIFF/WAVE header)")
    chunks, pos = {}, 12
    while pos + 8 <= len(data):
        cid, size = data[pos:pos + 4], struct.unpack("<I", data[pos + 4:pos + 8])[0]
        chunks.setdefault(cid, data[pos + 8:pos + 8 + size])
        pos += 8 + size + (size & 1)
    for need in (b"fmt ", b"data"):
        if need not in chunks:
            raise AudioError(f"{path}: WAV file without a '{need.decode().strip()}' chunk")
    return chunks


def _samples(raw: bytes, fmt: int, bits: int, path: str) -> np.ndarray:
    """Interleaved samples as float32 in [-1, 1)."""
    if fmt == PCM and bits == 8:
        return (np.frombuffer(raw, np.uint8).astype(np.float32) - 128) / 128
    if fmt == PCM and bits in (16, 32):
        a = np.frombuffer(raw[:len(raw) // (bits // 8) * (bits // 8)], f"<i{bits // 8}")
        return (a / float(2 ** (bits - 1))).astype(np.float32)
    if fmt == PCM and bits == 24:
        b = np.frombuffer(raw[:len(raw) // 3 * 3], np.uint8).reshape(-1, 3).astype(np.int32)
        v = b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)
        return (np.where(v >= 1 << 23, v - (1 << 24), v) / float(1 << 23)).astype(np.float32)
    if fmt == IEEE_FLOAT and bits in (32, 64):
        return np.frombuffer(raw[:len(raw) // (bits // 8) * (bits // 8)],
                             f"<f{bits // 8}").astype(np.float32)
    raise AudioError(f"{path}: unsupported WAV encoding (format {fmt}, {bits} bits)")


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(float32 [frames, channels], sample rate) of a WAV file."""
    data = Path(path).read_bytes()
    chunks = _chunks(data, str(path))
    fmt_chunk = chunks[b"fmt "]
    if len(fmt_chunk) < 16:
        raise AudioError(f"{path}: WAV 'fmt' chunk is too short")
    fmt, channels, rate, _, _, bits = struct.unpack("<HHIIHH", fmt_chunk[:16])
    if fmt == EXTENSIBLE and len(fmt_chunk) >= 26:
        fmt = struct.unpack("<H", fmt_chunk[24:26])[0]  # the sub-format GUID's first two bytes
    if channels == 0 or rate == 0:
        raise AudioError(f"{path}: WAV header has {channels} channels at {rate} Hz")
    x = _samples(chunks[b"data"], fmt, bits, str(path))
    frames = len(x) // channels
    if frames == 0:
        raise AudioError(f"{path}: WAV file holds no audio")
    return x[:frames * channels].reshape(frames, channels), rate


def resample(x: np.ndarray, rate_in: int, rate_out: int = SAMPLE_RATE, taps: int = 32) -> np.ndarray:
    """Band-limited resampling of mono float32 audio: a Kaiser-windowed sinc (beta 8.6) with its
    cutoff at the lower Nyquist, `taps` input samples either side of each output sample."""
    if rate_in == rate_out:
        return np.asarray(x, np.float32)
    n_out = int(len(x) * rate_out // rate_in)
    scale = min(1.0, rate_out / rate_in)
    half = int(np.ceil(taps / scale))
    padded = np.pad(np.asarray(x, np.float64), half)
    out = np.empty(n_out, np.float32)
    offsets = np.arange(-half, half + 1)
    for start in range(0, n_out, 16384):
        t = np.arange(start, min(start + 16384, n_out)) * (rate_in / rate_out)
        base = np.floor(t).astype(np.int64)
        idx = base[:, None] + offsets[None, :]
        d = idx - t[:, None]
        window = np.i0(8.6 * np.sqrt(np.clip(1 - (d / (half + 1)) ** 2, 0, 1))) / np.i0(8.6)
        kernel = scale * np.sinc(scale * d) * window
        out[start:start + len(t)] = np.einsum("ij,ij->i", kernel, padded[idx + half])
    return out


def is_wav(path: str | Path) -> bool:
    with open(path, "rb") as f:
        head = f.read(12)
    return head[:4] == b"RIFF" and head[8:12] == b"WAVE"


def load_audio(path: str | Path) -> np.ndarray:
    """16 kHz mono float32 audio of a WAV file (channels averaged), or of any other format
    through ffmpeg when it is on PATH (audio/ffmpeg.py); AudioError saying what went wrong."""
    from .ffmpeg import FFmpegError, decode_with_ffmpeg

    if not is_wav(path):
        try:
            return decode_with_ffmpeg(path)
        except FFmpegError as e:
            raise AudioError(f"{path}: not a WAV file, and {e}") from None
    x, rate = read_wav(path)
    return resample(x.mean(axis=1), rate)
