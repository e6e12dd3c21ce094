"""Prompt attention (many query rows of one sequence) through float32 BLAS, causal by blocks.

Query rows go in blocks of QUERY_BLOCK tokens; a block multiplies only the keys its rows can see
(from the first visible key of its first row to its last row's position), so a causal prompt
costs about half the full Q K^T and P V products. Between the two products, one numba kernel
masks, scales and normalises each row in place, in parallel over rows (numpy's mask, max,
subtract, exp, sum and divide were six single-threaded passes, most of the attention's time and
the part that did not scale with threads).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .threading_layer import NOGIL

QUERY_BLOCK = 128  # tokens per block: smaller blocks skip more masked keys, larger ones make
# bigger (faster per flop) BLAS calls; 128 is within noise of the best from 64 to 256


# reassociation lets the row max and sum vectorise; no ninf/nnan: masked scores are -inf
FAST = {"nsz", "arcp", "contract", "afn", "reassoc"}


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FAST)
def _scale_and_shift(s, row_pos, key0, n_swa, scale):
    """Row r of scores s [rows, n_keys] (key j at position key0 + j) times scale, minus its
    largest visible score; keys its query (at row_pos[r]) may not see set to -inf."""
    n_keys = s.shape[1]
    for r in prange(s.shape[0]):
        row = s[r]
        hi = min(n_keys, row_pos[r] - key0 + 1)
        lo = max(0, row_pos[r] - n_swa + 1 - key0) if n_swa > 0 else 0
        best = np.float32(-np.inf)
        for j in range(lo, hi):
            best = max(best, row[j])
        best *= scale  # scale > 0
        for j in range(lo):
            row[j] = -np.inf
        for j in range(lo, hi):
            row[j] = row[j] * scale - best
        for j in range(hi, n_keys):
            row[j] = -np.inf


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FAST)
def _normalize(s):
    for r in prange(s.shape[0]):
        row = s[r]
        total = np.float32(0.0)
        for j in range(row.shape[0]):
            total += row[j]
        inv = np.float32(1.0) / total if total > 0 else np.float32(0.0)
        for j in range(row.shape[0]):
            row[j] *= inv


def masked_softmax_rows(s, row_pos, key0, n_swa, scale) -> None:
    """In place: each row of scores s [rows, n_keys] scaled and softmax-normalised over the keys
    its query sees (zero elsewhere). numpy's exp in between: SIMD, where numba's is scalar and
    took ~9x as long."""
    _scale_and_shift(s, row_pos, key0, n_swa, np.float32(scale))
    np.exp(s, out=s)
    _normalize(s)


def cells_f32(cells: np.ndarray) -> np.ndarray:
    """Cache cells as float32 (fp16 caches hold their uint16 bit patterns)."""
    return cells.view(np.float16).astype(np.float32) if cells.dtype == np.uint16 else cells


def attend_prompt(q, k_cache, v_cache, q_pos, n_swa, scale, out,
                  block: int = QUERY_BLOCK) -> np.ndarray:
    """out [n_tok, n_head, d_v] = softmax(q K^T * scale) V over the keys each query sees, for
    f16/f32 caches [n_ctx, n_kv_head, d] of one sequence; q_pos int [n_tok]."""
    n_tok, n_head, d_k = q.shape
    n_kv_head = k_cache.shape[1]
    group = n_head // n_kv_head
    q_pos = np.asarray(q_pos, np.int64)
    scale = np.float32(scale)
    for t0 in range(0, n_tok, block):
        t1 = min(n_tok, t0 + block)
        pos = q_pos[t0:t1]
        hi = int(pos.max()) + 1
        lo = max(0, int(pos.min()) + 1 - n_swa) if n_swa > 0 else 0
        keys = cells_f32(k_cache[lo:hi])  # [n_keys, n_kv_head, d_k]
        values = cells_f32(v_cache[lo:hi])
        row_pos = np.repeat(pos, group)  # rows are (token, head in group)
        for kvh in range(n_kv_head):
            heads = slice(kvh * group, (kvh + 1) * group)
            qg = q[t0:t1, heads, :].reshape((t1 - t0) * group, d_k)
            s = qg @ keys[:, kvh, :].T
            masked_softmax_rows(s, row_pos, lo, n_swa, scale)
            out[t0:t1, heads, :] = (s @ values[:, kvh, :]).reshape(t1 - t0, group, -1)
    return out
