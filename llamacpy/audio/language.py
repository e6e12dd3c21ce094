"""Spoken-language detection (whisper.cpp's whisper_lang_auto_detect_with_state): decode
<|startoftranscript|> over the first window and softmax the logits of the language tokens."""

from __future__ import annotations

import numpy as np

from ..format import GGUFFile
from ..models.whisper import WhisperModel
from .vocab import SpecialTokens, languages


def detect_language(g: GGUFFile, model: WhisperModel, sp: SpecialTokens,
                    features: np.ndarray) -> tuple[str, dict[str, float]]:
    """(the likeliest language code, {code: probability} over the model's languages) from one
    window's encoder output."""
    if not sp.multilingual:
        raise ValueError("language detection needs a multilingual model (this one is "
                         "English-only)")
    codes = languages(g)
    logits = model.decode([sp.sot], model.new_cache(features))[-1]
    x = logits[list(codes.values())].astype(np.float64)
    p = np.exp(x - x.max())
    p /= p.sum()
    probs = dict(zip(codes, p.tolist()))
    return max(probs, key=probs.get), probs
