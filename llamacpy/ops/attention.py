"""Attention for the rows of one sequence over its KV cache, by segment: causal rows go to the
kernels (kernels/attention.py); a non-causal segment (an image chunk of Gemma 3, decoded with
llama_set_causal_attn(false) by mtmd) sees every cached key up to its own last row, with a
sliding window still cutting keys more than n_swa - 1 positions behind each query
(llama_kv_cache::set_input_kq_mask with causal_attn off, is_masked_swa).
"""

from __future__ import annotations

import numpy as np

from ..memory.batch import Segment
from ..kernels.attention import attend, attend_seqs, to_f32

__all__ = ["attend_non_causal", "attend_segment", "attend_seqs"]


def attend_segment(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, s: Segment,
                   positions: np.ndarray, n_swa: int, scale: float, out: np.ndarray,
                   types: tuple[str, str] | None = None) -> None:
    """q float32 [n, n_head, d_k] of segment `s` -> out [n, n_head, d_v]; caches [n_ctx, n_kv,
    units] of this sequence and layer, of the KV types `types` (None: f16 or f32 by dtype),
    already holding the segment's own keys and values."""
    if s.causal:
        attend(q, k_cache, v_cache, positions, n_swa, scale, out, types)
    else:
        out[:] = attend_non_causal(q, k_cache, v_cache, positions, n_swa, scale, types)


def attend_non_causal(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
                      positions: np.ndarray, n_swa: int, scale: float,
                      types: tuple[str, str] | None = None) -> np.ndarray:
    """Every query sees keys [lo, hi): hi is the segment's end, lo = p - n_swa + 1 with a
    window (else 0). Plain numpy with BLAS over the visible cells as float32; image chunks are
    a few hundred rows."""
    n, n_head, _ = q.shape
    hi = int(positions[-1]) + 1
    lo = max(0, int(positions[0]) - n_swa + 1) if n_swa > 0 else 0
    tk, tv = types or (None, None)
    keys, values = to_f32(k_cache[lo:hi], tk), to_f32(v_cache[lo:hi], tv)  # [m, n_kv, d]
    group = n_head // keys.shape[1]
    key_pos = np.arange(lo, hi)
    masked = (positions[:, None] - key_pos[None, :] >= n_swa) if n_swa > 0 else None
    out = np.empty((n, n_head, values.shape[2]), np.float32)
    for h in range(n_head):
        scores = (q[:, h] @ keys[:, h // group].T) * np.float32(scale)  # [n, m]
        if masked is not None:
            scores[masked] = -np.inf
        scores -= scores.max(axis=1, keepdims=True)
        np.exp(scores, out=scores)
        scores /= scores.sum(axis=1, keepdims=True)
        out[:, h] = scores @ values[:, h // group]
    return out
