"""Causal attention over the KV cache (one sequence, one layer at a time).

`attend_cached` is the numba kernel for decode-sized batches (it reads the fp16 cache in place),
written in kernels/simd.py's SIMD values: per token and KV head, the query heads that share it
go four at a time (grouped-query attention), so each key and value row is read and converted once
per four heads: scores two keys by four heads per pass, a softmax with a vectorised exp, then the
weighted values 16 columns by four heads per pass; values are prefetched while the scores run,
since between two tokens the weights streamed through the cache evict the KV rows. With fewer
than three query heads per KV head, or fewer (token, KV head) tasks than threads, one head at a
time (eight keys per pass). Head sizes that are not a multiple of 8 take `attend_cached_scalar`.
`attend_cached_seqs` is the same for one row of each of several sequences (the server's
batched decode step), so that step makes one call per layer instead of one per sequence; one
sequence's call goes through it too, so the two share their compiled kernels.
`attend_prompt` (kernels/attention_prompt.py) converts the visible cache once and uses BLAS in
causal blocks of queries, faster for prompt chunks;
`attend_reference` is the plain numpy twin all three are tested against.

Quantized caches (-ctk / -ctv q8_0, q4_0, ..., and bf16): `attend_cached_q` and
`attend_cached_seqs_q` are the same kernels reading K and V through kv_quant.row8, which
dequantizes eight values of a ggml block in registers where the fp16 kernel converts eight
halves (the type comes as a tag array, kv_quant.TAGS, so numba picks the loader at compile
time); prompts take `attend_blas_tiled`, which dequantizes TILE_KEYS positions at a time with an
online softmax. Callers pass the cache types as `types=(type_k, type_v)`.

Shapes: q float32 [n_tok, n_head, d_k]; k_cache [n_ctx, n_head_kv, d_k] as uint16 fp16 bits or
float32 (-ctk f32), or [n_ctx, n_head_kv, units] of another KV type (kv_quant.row_units);
v_cache likewise for d_v; q_pos int32 [n_tok] (each query sees keys at positions 0..q_pos, and
with a sliding window only the last n_swa of them); out float32 [n_tok, n_head, d_v].
Query head h reads KV head h // (n_head / n_head_kv) (grouped-query attention).
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange, types
from numba.extending import overload

from .attention_prompt import attend_prompt
from .dequant import f16_bits_to_f32, ld, ld2
from .kv_quant import FLOAT_TAG, TAGS, dequantize_cells, row8
from .simd import (f32x8_add, f32x8_exp, f32x8_fma, f32x8_hmax, f32x8_max, f32x8_mul, f32x8_recip,
                   f32x8_splat, f32x8_sum, f32x8_zero, lane, load_f32, load_row8, prefetch,
                   store_f32, store_row8, sums8, swap_halves)
from .threading_layer import NOGIL

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


def to_f32(cache: np.ndarray, name: str | None = None) -> np.ndarray:
    """Cache cells as float32: fp16 bits converted, float32 as it is; with a KV type name
    (kv_quant.KV_TYPES), bf16 or ggml blocks dequantized."""
    if name is not None:
        return dequantize_cells(cache, name)
    return cache.view(np.float16).astype(np.float32) if cache.dtype == np.uint16 else cache


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=ATTN_FASTMATH)
def attend_cached_scalar(q, k_cache, v_cache, q_pos, n_swa, scale, out):
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


@njit(inline="always")
def _scores(qs, row, keys, k0, lo, hi, scale, p, g, ktag):
    """p[g, j - lo] = scale * (q . k_j) for keys lo..hi - 1: eight keys per pass, so each query
    vector load serves eight FMAs and one transposing add tree gives the eight sums."""
    d_k = qs.shape[1]
    j = lo
    while j + 8 <= hi:
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = f32x8_zero()
        for c in range(0, d_k, 8):
            qv = load_row8(qs, row, c)
            a0 = f32x8_fma(qv, row8(ktag, keys, j, k0 + c), a0)
            a1 = f32x8_fma(qv, row8(ktag, keys, j + 1, k0 + c), a1)
            a2 = f32x8_fma(qv, row8(ktag, keys, j + 2, k0 + c), a2)
            a3 = f32x8_fma(qv, row8(ktag, keys, j + 3, k0 + c), a3)
            a4 = f32x8_fma(qv, row8(ktag, keys, j + 4, k0 + c), a4)
            a5 = f32x8_fma(qv, row8(ktag, keys, j + 5, k0 + c), a5)
            a6 = f32x8_fma(qv, row8(ktag, keys, j + 6, k0 + c), a6)
            a7 = f32x8_fma(qv, row8(ktag, keys, j + 7, k0 + c), a7)
        store_row8(p, g, j - lo, f32x8_mul(sums8(a0, a1, a2, a3, a4, a5, a6, a7), scale))
        j += 8
    while j < hi:
        a0 = f32x8_zero()
        for c in range(0, d_k, 8):
            a0 = f32x8_fma(load_row8(qs, row, c), row8(ktag, keys, j, k0 + c), a0)
        p[g, j - lo] = f32x8_sum(a0) * scale
        j += 1


@njit(inline="always")
def _softmax_numerators(p, g, n):
    """p[g, :n] <- exp(p[g, :n] - max); returns their sum."""
    n8 = n // 8 * 8
    m = np.float32(-np.inf)
    if n8 > 0:
        mv = load_row8(p, g, 0)
        for j in range(8, n8, 8):
            mv = f32x8_max(mv, load_row8(p, g, j))
        m = f32x8_hmax(mv)
    for j in range(n8, n):
        m = max(m, p[g, j])
    total = f32x8_zero()
    for j in range(0, n8, 8):
        e = f32x8_exp(f32x8_add(load_row8(p, g, j), f32x8_splat(-m)))
        store_row8(p, g, j, e)
        total = f32x8_add(total, e)
    s = f32x8_sum(total)
    for j in range(n8, n):
        e = np.exp(p[g, j] - m)
        p[g, j] = e
        s += e
    return s


@njit(inline="always")
def _weighted_values(p, g, values, v0, lo, hi, norm, outs, row, vtag):
    """outs[row] = norm * sum_j p[g, j - lo] * v_j: 64 columns (eight accumulators) per pass."""
    d_v = outs.shape[1]
    for c in range(0, d_v // 64 * 64, 64):
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = f32x8_zero()
        for j in range(lo, hi):
            w = f32x8_splat(p[g, j - lo])
            a0 = f32x8_fma(w, row8(vtag, values, j, v0 + c), a0)
            a1 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 8), a1)
            a2 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 16), a2)
            a3 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 24), a3)
            a4 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 32), a4)
            a5 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 40), a5)
            a6 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 48), a6)
            a7 = f32x8_fma(w, row8(vtag, values, j, v0 + c + 56), a7)
        store_row8(outs, row, c, f32x8_mul(a0, norm))
        store_row8(outs, row, c + 8, f32x8_mul(a1, norm))
        store_row8(outs, row, c + 16, f32x8_mul(a2, norm))
        store_row8(outs, row, c + 24, f32x8_mul(a3, norm))
        store_row8(outs, row, c + 32, f32x8_mul(a4, norm))
        store_row8(outs, row, c + 40, f32x8_mul(a5, norm))
        store_row8(outs, row, c + 48, f32x8_mul(a6, norm))
        store_row8(outs, row, c + 56, f32x8_mul(a7, norm))
    for c in range(d_v // 64 * 64, d_v, 8):
        a0 = f32x8_zero()
        for j in range(lo, hi):
            a0 = f32x8_fma(f32x8_splat(p[g, j - lo]), row8(vtag, values, j, v0 + c), a0)
        store_row8(outs, row, c, f32x8_mul(a0, norm))


@njit(inline="always")
def _scores4(qs, q0, q1, q2, q3, keys, k0, lo, hi, scale, p, values, v0, ktag, pf):
    """p[4 (j - lo) + g] = scale * (q_g . k_j) for query rows q0..q3 and keys lo..hi - 1, two keys
    by four heads per pass (eight accumulators, one transposing add tree). An odd last key is
    paired with itself and the twin's scores set to -inf. Prefetches the value rows of the keys
    in flight and the key rows 16 ahead (pf: the byte offsets and lengths of the key and value
    rows of this KV head)."""
    d_k = qs.shape[1]
    kb0, kbn, vb0, vbn = pf
    for j in range(lo, hi, 2):
        j1 = min(j + 1, hi - 1)
        for o in range(kb0, kb0 + kbn, 64):
            prefetch(keys, j + 16, o)
            prefetch(keys, j + 17, o)
        for o in range(vb0, vb0 + vbn, 64):
            prefetch(values, j, o)
            prefetch(values, j1, o)
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = f32x8_zero()
        for c in range(0, d_k, 8):
            k, kk = row8(ktag, keys, j, k0 + c), row8(ktag, keys, j1, k0 + c)
            x0, x1 = load_row8(qs, q0, c), load_row8(qs, q1, c)
            x2, x3 = load_row8(qs, q2, c), load_row8(qs, q3, c)
            a0, a1 = f32x8_fma(x0, k, a0), f32x8_fma(x1, k, a1)
            a2, a3 = f32x8_fma(x2, k, a2), f32x8_fma(x3, k, a3)
            a4, a5 = f32x8_fma(x0, kk, a4), f32x8_fma(x1, kk, a5)
            a6, a7 = f32x8_fma(x2, kk, a6), f32x8_fma(x3, kk, a7)
        store_f32(p, 4 * (j - lo), f32x8_mul(sums8(a0, a1, a2, a3, a4, a5, a6, a7), scale))
    if (hi - lo) % 2:
        for g in range(4):
            p[4 * (hi - lo) + g] = -np.inf


@njit(inline="always")
def _softmax4(p, n_pairs):
    """p <- exp(p - max) per head (lane g and g + 4 of each vector are head g); returns the sums
    (head g's in lanes g and g + 4)."""
    m = load_f32(p, 0)
    for i in range(1, n_pairs):
        m = f32x8_max(m, load_f32(p, 8 * i))
    minus_m = f32x8_mul(f32x8_max(m, swap_halves(m)), -1)
    total = f32x8_zero()
    for i in range(n_pairs):
        e = f32x8_exp(f32x8_add(load_f32(p, 8 * i), minus_m))
        store_f32(p, 8 * i, e)
        total = f32x8_add(total, e)
    return f32x8_add(total, swap_halves(total))


@njit(inline="always")
def _values4(p, values, v0, lo, hi, norm, outs, q0, q1, q2, q3, vtag):
    """outs[q_g] = norm[g] * sum_j p[4 (j - lo) + g] * v_j, 16 columns by four heads per pass."""
    for c in range(0, outs.shape[1], 16):
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = f32x8_zero()
        for j in range(lo, hi):
            va, vb = row8(vtag, values, j, v0 + c), row8(vtag, values, j, v0 + c + 8)
            i = 4 * (j - lo)
            w0, w1 = f32x8_splat(p[i]), f32x8_splat(p[i + 1])
            w2, w3 = f32x8_splat(p[i + 2]), f32x8_splat(p[i + 3])
            a0, a1 = f32x8_fma(w0, va, a0), f32x8_fma(w1, va, a1)
            a2, a3 = f32x8_fma(w2, va, a2), f32x8_fma(w3, va, a3)
            a4, a5 = f32x8_fma(w0, vb, a4), f32x8_fma(w1, vb, a5)
            a6, a7 = f32x8_fma(w2, vb, a6), f32x8_fma(w3, vb, a7)
        n0, n1, n2, n3 = lane(norm, 0), lane(norm, 1), lane(norm, 2), lane(norm, 3)
        store_row8(outs, q0, c, f32x8_mul(a0, n0))
        store_row8(outs, q0, c + 8, f32x8_mul(a4, n0))
        store_row8(outs, q1, c, f32x8_mul(a1, n1))
        store_row8(outs, q1, c + 8, f32x8_mul(a5, n1))
        store_row8(outs, q2, c, f32x8_mul(a2, n2))
        store_row8(outs, q2, c + 8, f32x8_mul(a6, n2))
        store_row8(outs, q3, c, f32x8_mul(a3, n3))
        store_row8(outs, q3, c + 8, f32x8_mul(a7, n3))


@njit(inline="always")
def _attend_group4(qs, first, group, keys, k0, values, v0, lo, hi, scale, outs, ktag, vtag,
                   pf):
    """Query rows first..first + group - 1 (group >= 3) four at a time; a last partial four
    repeats its last head (computed twice, stored twice)."""
    n, last = hi - lo, first + group - 1
    p = np.empty(4 * (n + 1), np.float32)  # [key, head] scores, then softmax numerators
    for h in range(0, group, 4):
        q0 = first + h
        q1, q2, q3 = min(q0 + 1, last), min(q0 + 2, last), min(q0 + 3, last)
        _scores4(qs, q0, q1, q2, q3, keys, k0, lo, hi, scale, p, values, v0, ktag, pf)
        total = _softmax4(p, (n + 1) // 2)
        _values4(p, values, v0, lo, hi, f32x8_recip(total), outs, q0, q1, q2, q3, vtag)


@njit(inline="always")
def _attend_each(qs, first, group, keys, k0, values, v0, lo, hi, scale, outs, ktag, vtag):
    """Query rows first..first + group - 1 one at a time."""
    p = np.empty((1, hi - lo), np.float32)  # scores, then softmax numerators
    for row in range(first, first + group):
        _scores(qs, row, keys, k0, lo, hi, scale, p, 0, ktag)
        total = _softmax_numerators(p, 0, hi - lo)
        _weighted_values(p, 0, values, v0, lo, hi, np.float32(1) / total, outs, row, vtag)


@njit(inline="always")
def _kv_rows(k_all, v_all):
    """Caches [n_seq, n_ctx, n_kv_head, units] as keys / values [n_seq * n_ctx, n_kv_head *
    units] (rows are positions; sequence s starts at row s * n_ctx), with n_ctx and n_kv_head."""
    n_seq, n_ctx, n_kv_head = k_all.shape[0], k_all.shape[1], k_all.shape[2]
    keys = k_all.reshape(n_seq * n_ctx, n_kv_head * k_all.shape[3])
    values = v_all.reshape(n_seq * n_ctx, n_kv_head * v_all.shape[3])
    return keys, values, n_ctx, n_kv_head


# Two kernels a cache type, one a path, so that a model compiles only the paths its shapes and
# thread count take (each prange is a parallel region of its own to compile).
@njit(inline="always")
def _attend_grouped(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag):
    """Query row i (sequence q_seq[i]) over its sequence's keys: a task per token and KV head,
    its query heads four at a time. Keys and values are read as the tags ktag / vtag say
    (kv_quant.TAGS; units: values, or bytes of ggml blocks)."""
    keys, values, n_ctx, n_kv_head = _kv_rows(k_all, v_all)
    n_tok, n_head, d_k = q.shape
    d_v = out.shape[2]
    group = n_head // n_kv_head
    kbn = keys.shape[1] * keys.itemsize // n_kv_head  # bytes of one head's key row
    vbn = values.shape[1] * values.itemsize // n_kv_head
    qs = q.reshape(n_tok * n_head, d_k)
    outs = out.reshape(n_tok * n_head, d_v)
    for t in prange(n_tok * n_kv_head):
        i, kvh = t // n_kv_head, t % n_kv_head
        row0 = np.int64(q_seq[i]) * n_ctx
        hi = q_pos[i] + 1
        lo = max(0, hi - n_swa) if n_swa > 0 else 0
        _attend_group4(qs, i * n_head + kvh * group, group, keys, kvh * d_k, values, kvh * d_v,
                       row0 + lo, row0 + hi, scale, outs, ktag, vtag,
                       (kvh * kbn, kbn, kvh * vbn, vbn))


@njit(inline="always")
def _attend_by_head(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag):
    """As _attend_grouped with a task per token and query head: more tasks than threads."""
    keys, values, n_ctx, n_kv_head = _kv_rows(k_all, v_all)
    n_tok, n_head, d_k = q.shape
    d_v = out.shape[2]
    group = n_head // n_kv_head
    qs = q.reshape(n_tok * n_head, d_k)
    outs = out.reshape(n_tok * n_head, d_v)
    for t in prange(n_tok * n_head):
        i, h = t // n_head, t % n_head
        kvh = h // group
        row0 = np.int64(q_seq[i]) * n_ctx
        hi = q_pos[i] + 1
        lo = max(0, hi - n_swa) if n_swa > 0 else 0
        _attend_each(qs, i * n_head + h, 1, keys, kvh * d_k, values, kvh * d_v, row0 + lo,
                     row0 + hi, scale, outs, ktag, vtag)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=ATTN_FASTMATH)
def attend_grouped(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out):
    _attend_grouped(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, FLOAT_TAG, FLOAT_TAG)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=ATTN_FASTMATH)
def attend_by_head(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out):
    _attend_by_head(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, FLOAT_TAG, FLOAT_TAG)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=ATTN_FASTMATH)
def attend_grouped_q(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag):
    _attend_grouped(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=ATTN_FASTMATH)
def attend_by_head_q(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag):
    _attend_by_head(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag)


def _grouped(q, n_kv_head, out, by_head) -> bool:
    """Whether the four-heads-a-task path takes these shapes (three or more query heads a KV
    head, values a multiple of 16) and by_head (fewer tasks than threads) is off."""
    return q.shape[1] // n_kv_head >= 3 and out.shape[2] % 16 == 0 and not by_head


def attend_cached_seqs(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, by_head=False):
    """attend_cached for rows of different sequences in one call (the server's decode step):
    caches [n_seq, n_ctx, n_kv_head, d], row i in sequence q_seq[i] at position q_pos[i]."""
    kernel = attend_grouped if _grouped(q, k_all.shape[2], out, by_head) else attend_by_head
    kernel(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out)


def attend_cached_seqs_q(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, by_head, ktag,
                         vtag):
    """attend_cached_seqs over caches of any KV type (see attend_cached_q)."""
    kernel = attend_grouped_q if _grouped(q, k_all.shape[2], out, by_head) else attend_by_head_q
    kernel(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, ktag, vtag)


def attend_cached(q, k_cache, v_cache, q_pos, n_swa, scale, out, by_head=False):
    """Decode-sized attention over one sequence's cache [n_ctx, n_kv_head, d] (head sizes
    multiples of 8): the multi-sequence kernels with one sequence, so one compile serves both.
    by_head: a task per query head (when tasks < threads)."""
    attend_cached_seqs(q, k_cache[None], v_cache[None], np.zeros(q.shape[0], np.int32), q_pos,
                       n_swa, scale, out, by_head)


def attend_cached_q(q, k_cache, v_cache, q_pos, n_swa, scale, out, by_head, ktag, vtag):
    """attend_cached over caches of any KV type [n_ctx, n_kv_head, units], read in place as the
    tags ktag / vtag say (kv_quant.TAGS: ggml blocks dequantized in registers)."""
    attend_cached_seqs_q(q, k_cache[None], v_cache[None], np.zeros(q.shape[0], np.int32), q_pos,
                         n_swa, scale, out, by_head, ktag, vtag)


def _key_mask(q_pos, n_swa, key_pos):
    """bool [n_tok, n_keys]: True where a query may not see the key (causal, sliding window)."""
    mask = key_pos[None, :] > q_pos[:, None]
    if n_swa > 0:
        mask |= key_pos[None, :] <= q_pos[:, None] - n_swa
    return mask


TILE_KEYS = 512  # keys dequantized at a time by attend_blas_tiled


def attend_blas_tiled(q, k_cache, v_cache, q_pos, n_swa, scale, out, types, tile=TILE_KEYS):
    """Prompt attention for caches of any KV type: TILE_KEYS positions at a time are dequantized
    and folded in with an online softmax (running max and sum per query head, as flash
    attention), so only a tile, never the whole visible cache, exists as float32. A prompt chunk
    that sees one tile or less is attend_prompt over that tile."""
    n_tok, n_head, _ = q.shape
    n_kv_head = k_cache.shape[1]
    group = n_head // n_kv_head
    lo = visible_range(int(q_pos.min()), n_swa)[0]
    hi = int(q_pos.max()) + 1
    if hi - lo <= tile:  # positions relative to the tile's first key: the same masks
        keys, values = dequantize_cells(k_cache[lo:hi], types[0]), \
            dequantize_cells(v_cache[lo:hi], types[1])
        attend_prompt(q, keys, values, q_pos - lo, n_swa, scale, out)
        return
    qg = q.reshape(n_tok, n_kv_head, group, -1).transpose(1, 0, 2, 3).reshape(
        n_kv_head, n_tok * group, -1)  # [kv head, token * group, d_k]
    best = np.full((n_kv_head, n_tok * group), -np.inf, np.float32)
    total = np.zeros((n_kv_head, n_tok * group), np.float32)
    acc = np.zeros((n_kv_head, n_tok * group, out.shape[2]), np.float32)
    for t0 in range(lo, hi, tile):
        t1 = min(hi, t0 + tile)
        keys = dequantize_cells(k_cache[t0:t1], types[0])  # [n, n_kv_head, d_k]
        values = dequantize_cells(v_cache[t0:t1], types[1])
        mask = np.broadcast_to(_key_mask(q_pos, n_swa, np.arange(t0, t1))[:, None, :],
                               (n_tok, group, t1 - t0))
        for kvh in range(n_kv_head):
            s = (qg[kvh] @ keys[:, kvh, :].T) * np.float32(scale)  # [token * group, n]
            s.reshape(n_tok, group, -1)[mask] = -np.inf
            new = np.maximum(best[kvh], s.max(axis=1))
            shift = np.where(np.isfinite(new), new, 0)[:, None]  # rows that see no key yet
            np.exp(s - shift, out=s)
            fade = np.exp(best[kvh] - shift[:, 0])
            total[kvh] = total[kvh] * fade + s.sum(axis=1)
            acc[kvh] = acc[kvh] * fade[:, None] + s @ values[:, kvh, :]
            best[kvh] = new
    res = acc / total[:, :, None]  # [kv head, token * group, d_v]
    out[:] = res.reshape(n_kv_head, n_tok, group, -1).transpose(1, 0, 2, 3).reshape(out.shape)


def _plain(types) -> bool:
    """f16 / f32 caches, which the kernels above read through their dtype alone."""
    return types is None or (types[0] in ("f16", "f32") and types[1] in ("f16", "f32"))


def attend(q, k_cache, v_cache, q_pos, n_swa, scale, out, types=None) -> np.ndarray:
    """Dispatch by batch size, head size and KV types ((type_k, type_v), kv_quant names; None:
    f16 or f32 as the arrays' dtypes say); returns out."""
    if q.shape[0] >= BLAS_MIN_TOKENS:
        _load_one_token_kernel(q, k_cache, v_cache, q_pos, n_swa, scale, out, types)
    if not _plain(types):
        return _attend_typed(q, k_cache, v_cache, q_pos, n_swa, scale, out, types)
    if q.shape[0] >= BLAS_MIN_TOKENS:
        attend_prompt(q, k_cache, v_cache, q_pos, n_swa, scale, out)
    elif q.shape[2] % 8 or v_cache.shape[2] % 8 or not out.flags.c_contiguous:
        attend_cached_scalar(q, k_cache, v_cache, q_pos, n_swa, np.float32(scale), out)
    else:
        by_head = q.shape[0] * k_cache.shape[1] < get_num_threads()
        attend_cached(np.ascontiguousarray(q), k_cache, v_cache, q_pos, n_swa, np.float32(scale),
                      out, by_head)
    return out


_one_token_loaded: set = set()


def _load_one_token_kernel(q, k_cache, v_cache, q_pos, n_swa, scale, out, types) -> None:
    """Before a process's first prompt through BLAS, attend its first row as a decode step would
    (the prompt then writes that row again). Loading a kernel maps ~10 MiB of LLVM for a moment
    (kernels/compiler_pages.py): here few weights are resident yet, where at the first decode
    after the prompt that would sit on top of all of them, the run's peak RSS."""
    key = (k_cache.dtype.str, v_cache.dtype.str, types, get_num_threads())
    if key not in _one_token_loaded:
        _one_token_loaded.add(key)
        attend(q[:1], k_cache, v_cache, q_pos[:1], n_swa, scale, out[:1], types)


def _attend_typed(q, k_cache, v_cache, q_pos, n_swa, scale, out, types) -> np.ndarray:
    """attend for bf16 or block-type caches: in place by the loaders, tiled BLAS for prompts."""
    if (q.shape[0] >= BLAS_MIN_TOKENS or q.shape[2] % 8 or out.shape[2] % 8
            or not out.flags.c_contiguous):
        attend_blas_tiled(q, k_cache, v_cache, q_pos, n_swa, scale, out, types)
    else:
        by_head = q.shape[0] * k_cache.shape[1] < get_num_threads()
        attend_cached_q(np.ascontiguousarray(q), k_cache, v_cache, q_pos, n_swa,
                        np.float32(scale), out, by_head, TAGS[types[0]], TAGS[types[1]])
    return out


def attend_seqs(q, k_all, v_all, q_seq, q_pos, n_swa, scale, out, types=None) -> bool:
    """One query row per sequence (q_seq, q_pos per row) over caches [n_seq, n_ctx, n_kv, units]
    in one kernel call; False (nothing done) where attend_cached could not take the shapes."""
    if q.shape[2] % 8 or out.shape[2] % 8 or not out.flags.c_contiguous:
        return False
    by_head = q.shape[0] * k_all.shape[2] < get_num_threads()
    if not _plain(types):
        attend_cached_seqs_q(np.ascontiguousarray(q), k_all, v_all, q_seq, q_pos, n_swa,
                             np.float32(scale), out, by_head, TAGS[types[0]], TAGS[types[1]])
        return True
    attend_cached_seqs(np.ascontiguousarray(q), k_all, v_all, q_seq, q_pos, n_swa,
                       np.float32(scale), out, by_head)
    return True


def attend_reference(q, k_cache, v_cache, q_pos, n_swa, scale, types=None) -> np.ndarray:
    """Plain numpy, one query and head at a time, in float64 (over the dequantized cache)."""
    n_tok, n_head, _ = q.shape
    group = n_head // k_cache.shape[1]
    k = to_f32(k_cache, types and types[0]).astype(np.float64)
    v = to_f32(v_cache, types and types[1]).astype(np.float64)
    out = np.zeros((n_tok, n_head, v.shape[2]))
    for i in range(n_tok):
        lo, hi = visible_range(int(q_pos[i]), n_swa)
        for h in range(n_head):
            s = k[lo:hi, h // group] @ q[i, h].astype(np.float64) * scale
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[lo:hi, h // group]
    return out
