"""Against transformers' WhisperForConditionalGeneration (float32), the catalogue's weights mapped
back to its names (convert/whisper.py hf_state_dict): log-mel features from its
WhisperFeatureExtractor, encoder output, and the decoder's teacher-forced next-token
distributions over a whole transcript (mean KL divergence), for tiny.en and base."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, greedy_tokens, language_token
from llamacpy.convert.whisper import hf_config, hf_state_dict
from llamacpy.format import open_gguf
from llamacpy.hub import pull

from .test_timestamps import LONG

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow


def transformers_model(g):
    """transformers' WhisperForConditionalGeneration (float32, eval) holding a GGUF's weights."""
    config = transformers.WhisperConfig(**hf_config(g))
    model = transformers.WhisperForConditionalGeneration(config)
    state = {k: torch.from_numpy(v) for k, v in hf_state_dict(g).items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("k_proj.bias") for k in missing), missing
    return model.float().eval()


def kl_divergence(ref_logits: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """KL(P_ref || P) per row, in float64 (llama-perplexity's KLD)."""
    def log_softmax(x):
        x = x.astype(np.float64)
        x = x - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    lp, lq = log_softmax(ref_logits), log_softmax(logits)
    return (np.exp(lp) * (lp - lq)).sum(-1)


@pytest.fixture(scope="module", params=["whisper-tiny.en", "whisper-base"])
def pair(request):
    from llamacpy.models.whisper import WhisperModel

    g = open_gguf(pull(request.param, quiet=True))
    return g, WhisperModel(g), transformers_model(g)


@pytest.fixture(scope="module")
def audio(speak):
    return speak(LONG)


def test_features_encoder_and_logits_match_transformers(pair, audio):
    g, ours, ref = pair
    extractor = transformers.WhisperFeatureExtractor(feature_size=ours.args.n_mels)
    ref_mel = extractor(audio, sampling_rate=16000, return_tensors="np").input_features[0]
    mel = pad_or_trim(log_mel_spectrogram(audio, ours.args.n_mels, padding=N_SAMPLES))
    assert np.linalg.norm(mel - ref_mel) / np.linalg.norm(ref_mel) <= 1e-4
    with torch.no_grad():
        ref_enc = ref.model.encoder(torch.from_numpy(ref_mel[None])).last_hidden_state[0].numpy()
    enc = ours.encode(ref_mel)
    assert np.linalg.norm(enc - ref_enc) / np.linalg.norm(ref_enc) <= 1e-4

    sp = SpecialTokens.from_gguf(g)
    start = [sp.sot] if not sp.multilingual else [sp.sot, language_token(g, "en"), sp.transcribe]
    transcript = greedy_tokens(ours, sp, ref_mel, start)  # with timestamps: the full vocabulary
    assert len(transcript) > 30
    tokens = start + transcript
    logits = ours.decode(tokens, ours.new_cache(enc))
    with torch.no_grad():
        ref_logits = ref(encoder_outputs=(torch.from_numpy(ref_enc[None]),),
                         decoder_input_ids=torch.tensor([tokens])).logits[0].numpy()
    kld = kl_divergence(ref_logits, logits)
    assert kld.mean() <= 1e-4, kld.mean()
    assert (logits.argmax(-1) == ref_logits.argmax(-1)).all()
