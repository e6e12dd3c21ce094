"""Rotary position embeddings as ggml_rope_ext computes them (ggml-cpu ops.cpp: rope_yarn,
ggml_rope_cache_init), with angles in float64 so positions far out keep full precision.

Two pairings: NORM (llama: adjacent pairs x[2i], x[2i+1]) and NEOX (qwen2/qwen3/gemma3: x[i] with
x[i + n_rot/2]). Only the first `n_rot` dimensions of each head rotate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ROPE_NORM, ROPE_NEOX = 0, 2  # ggml's mode values


@dataclass(frozen=True)
class RopeConfig:
    n_rot: int
    freq_base: float
    mode: int = ROPE_NEOX
    freq_scale: float = 1.0  # 1 / rope.scaling.factor for linear and yarn scaling
    ext_factor: float = 0.0  # yarn: 1.0 when scaling type is yarn
    attn_factor: float = 1.0
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    n_ctx_orig: int = 0
    freq_factors: np.ndarray | None = None  # rope_freqs.weight (llama3 scaling): [n_rot / 2]


def yarn_corr_dims(c: RopeConfig) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims: the dimension range where yarn ramps between interp and extrap."""
    def corr_dim(n_rot_turns: float) -> float:
        return c.n_rot * math.log(c.n_ctx_orig / (n_rot_turns * 2 * math.pi)) / (2 * math.log(c.freq_base))

    start = math.floor(corr_dim(c.beta_fast))
    end = math.ceil(corr_dim(c.beta_slow))
    return max(0.0, start), min(c.n_rot - 1.0, end)


def rope_cos_sin(c: RopeConfig, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin, float32 [n_tokens, n_rot / 2], magnitude-scaled as rope_yarn does."""
    i = np.arange(c.n_rot // 2, dtype=np.float64)
    theta_extrap = positions.astype(np.float64)[:, None] * c.freq_base ** (-2.0 * i / c.n_rot)
    if c.freq_factors is not None:
        theta_extrap = theta_extrap / c.freq_factors.astype(np.float64)
    theta = c.freq_scale * theta_extrap
    mscale = c.attn_factor
    if c.ext_factor != 0.0:
        low, high = yarn_corr_dims(c)
        ramp = 1 - np.clip((i - low) / max(0.001, high - low), 0, 1)
        mix = ramp * c.ext_factor
        theta = theta * (1 - mix) + theta_extrap * mix
        mscale *= 1.0 + 0.1 * math.log(1.0 / c.freq_scale)
    return (np.cos(theta) * mscale).astype(np.float32), (np.sin(theta) * mscale).astype(np.float32)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, mode: int) -> np.ndarray:
    """Rotate x [n_tokens, n_heads, head_dim] in place; cos/sin [n_tokens, n_rot / 2]."""
    half = cos.shape[1]
    c, s = cos[:, None, :], sin[:, None, :]
    if mode == ROPE_NEOX:
        x0, x1 = x[..., :half].copy(), x[..., half : 2 * half].copy()
        x[..., :half] = x0 * c - x1 * s
        x[..., half : 2 * half] = x0 * s + x1 * c
    else:
        x0, x1 = x[..., 0 : 2 * half : 2].copy(), x[..., 1 : 2 * half : 2].copy()
        x[..., 0 : 2 * half : 2] = x0 * c - x1 * s
        x[..., 1 : 2 * half : 2] = x0 * s + x1 * c
    return x
