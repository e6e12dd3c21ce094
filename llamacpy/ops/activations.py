"""Activations used by the feed-forward blocks (ggml_silu, ggml_gelu with the tanh form)."""

from __future__ import annotations

import numpy as np

SQRT_2_OVER_PI = np.float32(0.7978845608028654)
GELU_COEF_A = np.float32(0.044715)


def silu(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp overflow for x < -88 correctly gives silu = -0
        return x / (np.float32(1) + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (ggml_gelu; HF gelu_pytorch_tanh)."""
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(SQRT_2_OVER_PI * x * (np.float32(1) + GELU_COEF_A * x * x)))
