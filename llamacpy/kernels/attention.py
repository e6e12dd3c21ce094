"""Causal attention over an fp16 KV cache (one sequence, one layer at a time).

`attend_cached` is the numba kernel for decode-sized batches (it reads the fp16 cache in place);
`attend_blas` converts the visible cache once and uses BLAS, faster for prompt chunks;
`attend_reference` is the plain numpy twin both are tested against.

Shapes: q float32 [n_tok, n_head, d_k]; k_cache [n_ctx, n_head_kv, d_k] as uint16 fp16 bits or
float32 (-ctk f32); v_cache likewise [n_ctx, n_head_kv, d_v]; q_pos int32 [n_tok] (each query sees keys at positions
0..q_pos, and with a sliding window only the last n_swa of them); out float32 [n_tok, n_head, d_v].
Query head h reads KV head h // (n_head / n_head_kv) (grouped-query attention).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from .dequant import f16_bits_to_f32, ld, ld2

# the score reduction and the softmax may be reassociated: SIMD sums, not bit-exact to numpy
ATTN_FASTMATH = {"contract", "reassoc"}

BLAS_MIN_TOKENS = 16  # from here on converting the cache once and calling BLAS wins


def visible_range(pos: int, n_swa: int) -> tuple[int, int]:
    """Key positions [lo, hi) a query at `pos` attends to (llama.cpp: is_masked_swa, standard)."""
    hi = pos + 1
    return (max(0, hi - n_swa) if n_swa > 0 else 0), hi


def as_f32(value):
    """A cache cell as float32: fp16 bits are converted, float32 passes through."""
    raise NotImplementedError  # compiled through the overload below


@overload(as_f32, inline="always")
def _as_f32(value):
    if isinstance(value, types.Float):
        return lambda value: np.float32(value)
    return lambda value: f16_bits_to_f32(value)


def to_f32(cache: np.ndarray) -> np.ndarray:
    return cache.view(np.float16).astype(np.float32) if cache.dtype == np.uint16 else cache


@njit(parallel=True, cache=True, fastmath=ATTN_FASTMATH)
def attend_cached(q, k_cache, v_cache, q_pos, n_swa, scale, out):
    n_tok, n_head, d_k = q.shape
    n_ctx, n_kv_head = k_cache.shape[0], k_cache.shape[1]
    d_v = v_cache.shape[2]
    group = n_head // n_kv_head
    keys = k_cache.reshape(n_ctx, n_kv_head * d_k)  # rows are positions
    values = v_cache.reshape(n_ctx, n_kv_head * d_v)
    for t in prange(n_tok * n_head):
        i, h = t // n_head, t % n_head
        k0, v0 = (h // group) * d_k, (h // group) * d_v
        hi = q_pos[i] + 1
        lo = max(0, hi - n_swa) if n_swa > 0 else 0
        qv = q[i, h]
        scores = np.empty(hi - lo, np.float32)
        best = np.float32(-np.inf)
        for j in range(lo, hi):
            s = np.float32(0)
            for c in range(d_k):
                s += ld(qv, c) * as_f32(ld2(keys, j, k0 + c))
            s *= scale
            scores[j - lo] = s
            best = max(best, s)
        total = np.float32(0)
        for j in range(hi - lo):
            e = np.exp(scores[j] - best)
            scores[j] = e
            total += e
        acc = np.zeros(d_v, np.float32)
        for j in range(lo, hi):
            w = scores[j - lo] / total
            for c in range(d_v):
                acc[c] += w * as_f32(ld2(values, j, v0 + c))
        out[i, h, :] = acc


def attend_blas(q, k_cache, v_cache, q_pos, n_swa, scale, out):
    """Same result via float32 BLAS: per KV head, scores = Q K^T over the visible keys."""
    n_tok, n_head, _ = q.shape
    n_kv_head = k_cache.shape[1]
    group = n_head // n_kv_head
    lo = visible_range(int(q_pos.min()), n_swa)[0]
    hi = int(q_pos.max()) + 1
    keys = to_f32(k_cache[lo:hi])  # [n_keys, n_kv_head, d_k]
    values = to_f32(v_cache[lo:hi])
    key_pos = np.arange(lo, hi)
    mask = key_pos[None, :] > q_pos[:, None]
    if n_swa > 0:
        mask |= key_pos[None, :] <= q_pos[:, None] - n_swa
    for kvh in range(n_kv_head):
        heads = slice(kvh * group, (kvh + 1) * group)
        qg = q[:, heads, :].reshape(n_tok * group, -1)
        s = (qg @ keys[:, kvh, :].T).reshape(n_tok, group, -1) * np.float32(scale)
        s[np.broadcast_to(mask[:, None, :], s.shape)] = -np.inf
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        out[:, heads, :] = (s.reshape(n_tok * group, -1) @ values[:, kvh, :]).reshape(n_tok, group, -1)


def attend(q, k_cache, v_cache, q_pos, n_swa, scale, out) -> np.ndarray:
    """Dispatch by batch size; returns out."""
    if q.shape[0] >= BLAS_MIN_TOKENS:
        attend_blas(q, k_cache, v_cache, q_pos, n_swa, scale, out)
    else:
        attend_cached(q, k_cache, v_cache, q_pos, n_swa, np.float32(scale), out)
    return out


def attend_reference(q, k_cache, v_cache, q_pos, n_swa, scale) -> np.ndarray:
    """Plain numpy, one query and head at a time, in float64."""
    n_tok, n_head, _ = q.shape
    group = n_head // k_cache.shape[1]
    k = to_f32(k_cache).astype(np.float64)
    v = to_f32(v_cache).astype(np.float64)
    out = np.zeros((n_tok, n_head, v.shape[2]))
    for i in range(n_tok):
        lo, hi = visible_range(int(q_pos[i]), n_swa)
        for h in range(n_head):
            s = k[lo:hi, h // group] @ q[i, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[lo:hi, h // group]
    return out
