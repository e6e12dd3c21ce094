"""Normalisations (ggml_rms_norm then a multiply by the weight, as llama.cpp's build_norm)."""

from __future__ import annotations

import numpy as np


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis, float32 in and out."""
    ms = np.einsum("...i,...i->...", x, x, dtype=np.float64)[..., None] / x.shape[-1]
    return (x * (1.0 / np.sqrt(ms + eps)).astype(np.float32)) * weight
