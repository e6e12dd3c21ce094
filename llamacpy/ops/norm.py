"""Normalisations (ggml_rms_norm then a multiply by the weight, as llama.cpp's build_norm)."""

from __future__ import annotations

import numpy as np

from ..kernels.norm import rms_norm_rows


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis, float32 in and out."""
    d = x.shape[-1]
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, d)
    out = np.empty_like(flat)
    rms_norm_rows(flat, weight, float(eps), out)
    return out.reshape(x.shape)


def rms_norm_reference(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """The numpy twin of rms_norm."""
    ms = np.einsum("...i,...i->...", x, x, dtype=np.float64)[..., None] / x.shape[-1]
    return (x * (1.0 / np.sqrt(ms + eps)).astype(np.float32)) * weight


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float) -> np.ndarray:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last axis (ggml_norm, then
    build_norm's multiply and add: LLM_NORM), float32."""
    x = np.asarray(x, np.float32)
    centred = x - x.mean(axis=-1, keepdims=True)
    var = np.einsum("...i,...i->...", centred, centred)[..., None] / np.float32(x.shape[-1])
    out = centred * (np.float32(1) / np.sqrt(var + np.float32(eps)))
    out *= weight
    if bias is not None:
        out += bias
    return out
