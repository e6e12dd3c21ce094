"""Rotary position embeddings as ggml_rope_ext computes them (ggml-cpu ops.cpp: rope_yarn,
ggml_rope_cache_init), with angles in float64 so positions far out keep full precision.

Two pairings: NORM (llama: adjacent pairs x[2i], x[2i+1]) and NEOX (qwen2/qwen3/gemma3: x[i] with
x[i + n_rot/2]). Only the first `n_rot` dimensions of each head rotate.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from ..kernels.elementwise import rope_neox, rope_norm

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
    """Rotate x [n_tokens, n_heads, head_dim] in place; cos/sin [n_tokens, n_rot / 2]. float32
    goes to the numba kernels (bit-identical to the numpy twin, ~15x faster at decode size)."""
    if x.dtype == cos.dtype == sin.dtype == np.float32 and x.ndim == 3:
        (rope_neox if mode == ROPE_NEOX else rope_norm)(x, cos, sin)
        return x
    return apply_rope_reference(x, cos, sin, mode)


def apply_rope_reference(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, mode: int) -> np.ndarray:
    """The numpy twin of apply_rope."""
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


# -- M-RoPE (ggml_rope_multi): each rotated pair takes its angle from one of four positions ------

ROPE_MROPE, ROPE_IMROPE = 8, 40  # GGML_ROPE_TYPE_MROPE / _IMROPE; both rotate NEOX pairs


@functools.lru_cache(maxsize=16)
def _mrope_components(sections: tuple[int, ...], n_pairs: int, interleaved: bool) -> np.ndarray:
    comp = mrope_components(sections, n_pairs, interleaved)
    comp.flags.writeable = False
    return comp


def mrope_components(sections, n_pairs: int, interleaved: bool) -> np.ndarray:
    """Which position component (0..3: t, h, w, e) each of the n_pairs rotated pairs uses, as
    ggml_mrope_cache_init picks it: contiguous sections (Qwen2-VL), or interleaved t, h, w, t, ...
    while each lasts (Qwen3-VL, Qwen3.5); the pattern repeats every sum(sections) pairs."""
    s = [int(x) for x in sections]
    comp = np.empty(n_pairs, np.int64)
    for i in range(n_pairs):
        sector = i % sum(s)
        if interleaved:
            if sector % 3 == 1 and sector < 3 * s[1]:
                comp[i] = 1
            elif sector % 3 == 2 and sector < 3 * s[2]:
                comp[i] = 2
            elif sector % 3 == 0 and sector < 3 * s[0]:
                comp[i] = 0
            else:
                comp[i] = 3
        else:
            comp[i] = int(np.searchsorted(np.cumsum(s), sector, side="right"))
    return comp


def mrope_cos_sin(c: RopeConfig, sections, positions: np.ndarray,
                  interleaved: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin float32 [n_tokens, n_rot / 2] for positions int [n_tokens, 4]; rotate with
    apply_rope(..., ROPE_NEOX). Each pair's angle is rope_cos_sin's for its own component, so
    tokens whose four positions are equal (text) get exactly the plain rope."""
    comp = _mrope_components(tuple(int(x) for x in sections), c.n_rot // 2, interleaved)
    used = [int(j) for j in np.unique(comp)]
    if all(np.array_equal(positions[:, j], positions[:, used[0]]) for j in used):
        return rope_cos_sin(c, positions[:, used[0]])  # text: one position for every pair
    n = positions.shape[0]
    cos, sin = np.empty((n, c.n_rot // 2), np.float32), np.empty((n, c.n_rot // 2), np.float32)
    for j in used:
        cj, sj = rope_cos_sin(c, positions[:, j])
        cols = comp == j
        cos[:, cols], sin[:, cols] = cj[:, cols], sj[:, cols]
    return cos, sin
