"""Whisper's log-mel spectrogram, as OpenAI whisper's audio.log_mel_spectrogram computes it.

16 kHz audio, a 400-sample periodic Hann window every 160 samples (centred, reflect-padded),
|STFT|^2 without the last frame, Slaney-scale mel filters (librosa.filters.mel with norm="slaney",
computed here: CTranslate2 stores none), log10 clamped at 1e-10, then at max - 8, and (x + 4) / 4.
"""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
CHUNK_SECONDS = 30
N_SAMPLES = SAMPLE_RATE * CHUNK_SECONDS  # 480000 samples in a 30-second window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window


def _hz_to_mel(f: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above."""
    f = np.asarray(f, np.float64)
    mel = f / (200.0 / 3)
    log_part = 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
    return np.where(f >= 1000.0, log_part, mel)


def _mel_to_hz(m: np.ndarray) -> np.ndarray:
    m = np.asarray(m, np.float64)
    return np.where(m >= 15.0, 1000.0 * np.exp((np.log(6.4) / 27.0) * (m - 15.0)),
                    (200.0 / 3) * m)


def mel_filters(n_mels: int, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """float32 [n_mels, n_fft // 2 + 1]: triangular filters between mel-spaced edges from 0 Hz to
    Nyquist, each scaled to unit area (norm="slaney"), as librosa.filters.mel."""
    fft_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2))
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def _power_spectrum(audio: np.ndarray) -> np.ndarray:
    """|STFT|^2, float32 [n_fft // 2 + 1, frames]; torch.stft(center=True) minus its last frame."""
    padded = np.pad(audio, N_FFT // 2, mode="reflect")
    n_frames = 1 + (len(padded) - N_FFT) // HOP_LENGTH
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]
    window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)).astype(np.float32)
    spectrum = np.fft.rfft(frames * window, axis=-1)
    return (np.abs(spectrum[:-1]) ** 2).astype(np.float32).T


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """float32 [n_mels, frames] for 16 kHz mono float audio; `padding` zero samples are appended
    first (whisper pads a full window, N_SAMPLES, before cutting 3000-frame windows)."""
    audio = np.asarray(audio, np.float32).reshape(-1)
    if padding:
        audio = np.pad(audio, (0, padding))
    if len(audio) <= N_FFT // 2:
        raise ValueError(f"audio of {len(audio)} samples is too short for a spectrogram")
    mel = mel_filters(n_mels) @ _power_spectrum(audio)
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def pad_or_trim(mel: np.ndarray, n_frames: int = N_FRAMES) -> np.ndarray:
    """[n_mels, n_frames]: the first window of a spectrogram, zero-padded (whisper.pad_or_trim)."""
    if mel.shape[-1] >= n_frames:
        return np.ascontiguousarray(mel[:, :n_frames])
    return np.pad(mel, ((0, 0), (0, n_frames - mel.shape[-1])))
