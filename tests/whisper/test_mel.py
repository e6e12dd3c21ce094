"""The log-mel front end against faster-whisper's FeatureExtractor (its own numpy port of OpenAI
whisper's log_mel_spectrogram and of librosa's Slaney filters) and torch.stft."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.mel import HOP_LENGTH, N_FFT, _power_spectrum, log_mel_spectrogram, mel_filters

fw = pytest.importorskip("faster_whisper.feature_extractor")


def _test_audio(seconds: float = 2.5) -> np.ndarray:
    rng = np.random.default_rng(7)
    t = np.arange(int(16000 * seconds)) / 16000
    chirp = np.sin(2 * np.pi * (200 + 900 * t) * t)
    return (0.4 * chirp + 0.02 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_match_faster_whisper(n_mels):
    ref = fw.FeatureExtractor.get_mel_filters(16000, N_FFT, n_mels)
    np.testing.assert_allclose(mel_filters(n_mels), ref, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_matches_faster_whisper(n_mels):
    audio = _test_audio()
    ref = fw.FeatureExtractor(feature_size=n_mels)(audio, padding=160)
    ours = log_mel_spectrogram(audio, n_mels, padding=160)
    assert ours.shape == ref.shape == (n_mels, len(audio) // HOP_LENGTH + 1)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_power_spectrum_matches_torch_stft():
    torch = pytest.importorskip("torch")
    audio = _test_audio(1.0)
    spec = torch.stft(torch.from_numpy(audio), N_FFT, HOP_LENGTH,
                      window=torch.hann_window(N_FFT), return_complex=True)
    ref = (spec[..., :-1].abs() ** 2).numpy()
    np.testing.assert_allclose(_power_spectrum(audio), ref, rtol=1e-4, atol=1e-5 * ref.max())


def test_too_short_audio_is_refused():
    with pytest.raises(ValueError, match="too short"):
        log_mel_spectrogram(np.zeros(100, np.float32))
