"""Against OpenAI's whisper package itself (float32, the catalogue's weights loaded into it by
openai_reference.py): log-mel features, encoder output and greedy decoding on the same mel."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, greedy_tokens, prompt_tokens

from .test_timestamps import LONG

whisper = pytest.importorskip("whisper")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(ct2_folder):
    from .openai_reference import openai_whisper_model

    return openai_whisper_model(ct2_folder)


def test_mel_encoder_and_greedy_match_openai_whisper(reference, whisper_gguf, whisper_model,
                                                     speak):
    audio = speak(LONG)
    ref_mel = whisper.log_mel_spectrogram(torch.from_numpy(audio), 80,
                                          padding=whisper.audio.N_SAMPLES).numpy()
    mel = log_mel_spectrogram(audio, 80, padding=N_SAMPLES)
    np.testing.assert_allclose(mel, ref_mel, atol=1e-4)
    window = pad_or_trim(ref_mel)
    with torch.no_grad():
        ref_enc = reference.encoder(torch.from_numpy(window[None])).numpy()[0]
    enc = whisper_model.encode(window)
    assert np.linalg.norm(enc - ref_enc) / np.linalg.norm(ref_enc) < 1e-4
    sp = SpecialTokens.from_gguf(whisper_gguf)
    for without_timestamps in (False, True):
        opts = whisper.DecodingOptions(language="en", temperature=0.0, fp16=False,
                                       without_timestamps=without_timestamps)
        ref = whisper.decode(reference, torch.from_numpy(window), opts)
        prompt = prompt_tokens(sp) if without_timestamps else [sp.sot]
        assert greedy_tokens(whisper_model, sp, window, prompt) == ref.tokens
