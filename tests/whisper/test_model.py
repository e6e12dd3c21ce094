"""Whisper tiny.en in our engine against CTranslate2 (faster-whisper's engine) on the same
model.bin, float32: encoder output on the same mel, greedy tokens on espeak-ng speech, and the
end-to-end text against faster-whisper's own pipeline."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import (
    SpecialTokens,
    greedy_tokens,
    prompt_tokens,
    tokens_to_text,
    transcribe_window,
)
from llamacpy.models.whisper import gelu, gelu_reference

ctranslate2 = pytest.importorskip("ctranslate2")
SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Please call Stella and ask her to bring these things with her from the store."]


def _mel(audio: np.ndarray) -> np.ndarray:
    return pad_or_trim(log_mel_spectrogram(audio, 80, padding=N_SAMPLES))


def test_gelu_kernel_matches_twin_and_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(0).standard_normal(5000).astype(np.float32) * 4
    ref = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(gelu_reference(x), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gelu(x.copy()), ref, rtol=1e-6, atol=2e-6)  # rational erf


def test_encoder_matches_ctranslate2(whisper_model, ct2_model):
    t = np.arange(16000 * 4) / 16000
    rng = np.random.default_rng(1)
    audio = (0.3 * np.sin(2 * np.pi * 330 * t) * (t < 2.5) + 0.01 * rng.standard_normal(t.size))
    mel = _mel(audio.astype(np.float32))
    ours = whisper_model.encode(mel)
    ref = np.array(ct2_model.encode(ctranslate2.StorageView.from_array(mel[None]), to_cpu=True))[0]
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < 1e-4, rel
    np.testing.assert_allclose(ours, ref, atol=2e-3 * np.abs(ref).max())


@pytest.mark.slow
@pytest.mark.parametrize("sentence", SENTENCES)
def test_greedy_tokens_match_ctranslate2(whisper_gguf, whisper_model, ct2_model, speak, sentence):
    mel = _mel(speak(sentence))
    sp = SpecialTokens.from_gguf(whisper_gguf)
    prompt = prompt_tokens(sp)
    ours = greedy_tokens(whisper_model, sp, mel, prompt)
    ref = ct2_model.generate(ctranslate2.StorageView.from_array(mel[None]), [prompt],
                             beam_size=1, suppress_blank=True, suppress_tokens=[-1],
                             max_length=448)[0].sequences_ids[0]
    assert ours == [t for t in ref if t < sp.eot]
    text = tokens_to_text(whisper_gguf.require("tokenizer.ggml.tokens"), ours)
    assert sentence.split()[1].lower() in text.lower()  # it heard the speech, not noise


@pytest.mark.slow
@pytest.mark.parametrize("sentence", SENTENCES)
def test_text_matches_faster_whisper_parts(whisper_gguf, whisper_model, ct2_folder, ct2_model,
                                           speak, sentence):
    """End to end against independent parts: faster-whisper's FeatureExtractor (padded with a
    window of zeros, as OpenAI whisper and whisper.cpp pad), CTranslate2's greedy search, and
    the Hugging Face tokenizer's decode. (faster-whisper's transcribe() pads only 160 samples
    and fills the window with zero features, which changes words on short clips.)"""
    fw = pytest.importorskip("faster_whisper.feature_extractor")
    tokenizers = pytest.importorskip("tokenizers")
    audio = speak(sentence)
    mel = fw.FeatureExtractor()(audio, padding=N_SAMPLES)[:, :3000]
    prompt = [50257, 50362]  # <|startoftranscript|> <|notimestamps|>
    ids = ct2_model.generate(ctranslate2.StorageView.from_array(np.ascontiguousarray(mel[None])),
                             [prompt], beam_size=1, max_length=448)[0].sequences_ids[0]
    tok = tokenizers.Tokenizer.from_file(str(ct2_folder / "tokenizer.json"))
    ref = tok.decode(ids, skip_special_tokens=True)
    assert transcribe_window(whisper_gguf, whisper_model, audio) == ref
