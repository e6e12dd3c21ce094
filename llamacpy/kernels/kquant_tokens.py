"""Few-token K-quant kernels on AVX-512BW: Y[T, rows] = X[T, n] @ W^T for Q4_K and Q6_K, from 2
tokens to the VNNI GEMM's crossover, or on full-width AVX-512 CPUs to the zmm twins' start
(matmul.ZMM_KERNELS): the server's batched decode, speculative verification.

They are matvec_q4_k_zmm / matvec_q6_k_zmm (kernels/matvec.py) with up to four tokens per pass
over a row: the weights are multiplied as bytes (vpmaddubsw) with each token's activations split
into two int8 halves (quantize_byte_pairs), the sub-block scales applied in vpdpwssd. A row's
64-byte chunks are masked out of their nibbles once and multiplied with every token of the pass.
Per token the operations and their order are matvec's, so each token's results are those of its
one-token decode, bit for bit: a speculative verification or a batched step computes what
single steps compute. Zen 4, 1 thread, a Qwen2.5-1.5B Q4_K_M's layers against the int16
`multi_*` kernels of kernels/matmul.py: Q6_K 1.3-2.5x faster at 2-24 tokens, Q4_K rows of 8960
1.2-1.7x, rows of 1536 1.25x at 2 tokens and 0.9x at 3-8 (there the int16 kernels' fewer
multiplies per token outweigh their unpacking).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .dequant import FASTMATH
from .matvec import (PREFETCH_BYTE_PAIRS, _block_sums, _byte_pair_dots, _byte_pair_fma,
                     q4_k_byte_pair_head, q6_k_byte_chunk, q6_k_offset, q6_k_scales,
                     quantize_byte_pairs)
from .simd import (byte_words, f32x8_fma, f32x8_mul, f32x8_sum, f32x16_sum, f32x16_zero,
                   f32x8_zero, i8_scale_quads, i32x16_zero, load_f32, load_w32, prefetch, vand,
                   vshr)
from .threading_layer import NOGIL


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _byte_pair_activations(X, nibble_order, sum_size):
    """Every row of X [T, n] as quantize_byte_pairs gives it: low, high int16 [T * n / 2] (token t
    at word t * n / 2), xd float32 [T * n / 256], and the block sums of `sum_size` xs float32
    [T * n / sum_size]. A plain function: one compiled copy for both kernels."""
    T, n = X.shape
    half, nb, ns = n // 2, n // 256, n // sum_size
    low, high = np.empty(T * half, np.int16), np.empty(T * half, np.int16)
    xd, xs = np.empty(T * nb, np.float32), np.empty(T * ns, np.float32)
    for t in range(T):
        lo, hi, d = quantize_byte_pairs(X[t], nibble_order)
        low[t * half:(t + 1) * half] = lo
        high[t * half:(t + 1) * half] = hi
        xd[t * nb:(t + 1) * nb] = d
        xs[t * ns:(t + 1) * ns] = _block_sums(X[t], sum_size)
    return low, high, xd, xs


@njit(inline="always")
def _store(Y, r, t, y):
    """Y[t, r] = y where t is a token (a part-filled group's padding repeats the last one)."""
    if t < Y.shape[0]:
        Y[t, r] = y


@njit(inline="always")
def _four_dots(q, s, low, high, h, xo, a, c):
    """`_byte_pair_dots` of one weight chunk for the four tokens whose activations start at
    words h: the accumulator tuples a, c updated."""
    a0, c0 = _byte_pair_dots(q, low, high, h[0] + xo, s, a[0], c[0])
    a1, c1 = _byte_pair_dots(q, low, high, h[1] + xo, s, a[1], c[1])
    a2, c2 = _byte_pair_dots(q, low, high, h[2] + xo, s, a[2], c[2])
    a3, c3 = _byte_pair_dots(q, low, high, h[3] + xo, s, a[3], c[3])
    return (a0, a1, a2, a3), (c0, c1, c2, c3)


@njit(inline="always")
def _four_fmas(a, c, d, xd, nb, t, b, acc):
    """`_byte_pair_fma` of a super-block b's sums for the four tokens t."""
    return (_byte_pair_fma(a[0], c[0], d * xd[nb * t[0] + b], acc[0]),
            _byte_pair_fma(a[1], c[1], d * xd[nb * t[1] + b], acc[1]),
            _byte_pair_fma(a[2], c[2], d * xd[nb * t[2] + b], acc[2]),
            _byte_pair_fma(a[3], c[3], d * xd[nb * t[3] + b], acc[3]))


@njit(inline="always")
def _zeros4():
    return i32x16_zero(), i32x16_zero(), i32x16_zero(), i32x16_zero()


@njit(inline="always")
def _q4_k_quad(w, r, low, high, xd, xs, t0, t1, t2, t3):
    """Row r of a Q4_K matrix times four tokens: matvec_q4_k_zmm's sums for each."""
    nb = w.shape[1] // 144
    t, h = (t0, t1, t2, t3), (128 * nb * t0, 128 * nb * t1, 128 * nb * t2, 128 * nb * t3)
    acc = (f32x16_zero(), f32x16_zero(), f32x16_zero(), f32x16_zero())
    m0, m1, m2, m3 = f32x8_zero(), f32x8_zero(), f32x8_zero(), f32x8_zero()
    for b in range(nb):
        o = 144 * b
        d, dmin, sc_lo, sc_hi, mf = q4_k_byte_pair_head(w, r, o)
        m0 = f32x8_fma(f32x8_mul(mf, load_f32(xs, 8 * (nb * t0 + b))), dmin, m0)
        m1 = f32x8_fma(f32x8_mul(mf, load_f32(xs, 8 * (nb * t1 + b))), dmin, m1)
        m2 = f32x8_fma(f32x8_mul(mf, load_f32(xs, 8 * (nb * t2 + b))), dmin, m2)
        m3 = f32x8_fma(f32x8_mul(mf, load_f32(xs, 8 * (nb * t3 + b))), dmin, m3)
        a, c = _zeros4(), _zeros4()
        for jj in range(2):
            v = load_w32(w, r, o + 16 + 64 * jj)
            for g in range(2):
                q = vand(v, 0x0F0F) if g == 0 else vand(vshr(v, 4), 0x0F0F)
                s = byte_words(sc_lo, sc_hi, 4 * jj + g, 4 * jj + 2 + g)
                a, c = _four_dots(q, s, low, high, h, 128 * b + 64 * jj + 32 * g, a, c)
        acc = _four_fmas(a, c, d, xd, nb, t, b, acc)
    return (f32x16_sum(acc[0]) - f32x8_sum(m0), f32x16_sum(acc[1]) - f32x8_sum(m1),
            f32x16_sum(acc[2]) - f32x8_sum(m2), f32x16_sum(acc[3]) - f32x8_sum(m3))


@njit(inline="always")
def _q6_k_quad(w, r, low, high, xd, xs, t0, t1, t2, t3):
    """Row r of a Q6_K matrix times four tokens: matvec_q6_k_zmm's sums for each (its -32
    offset through the 16-weight block sums xs)."""
    nb = w.shape[1] // 210
    t, h = (t0, t1, t2, t3), (128 * nb * t0, 128 * nb * t1, 128 * nb * t2, 128 * nb * t3)
    acc = (f32x16_zero(), f32x16_zero(), f32x16_zero(), f32x16_zero())
    f0, f1, f2, f3 = f32x8_zero(), f32x8_zero(), f32x8_zero(), f32x8_zero()
    for b in range(nb):
        o = 210 * b
        for k in range(4):
            prefetch(w, r, o + PREFETCH_BYTE_PAIRS + 64 * k)
        d, s0, s1 = q6_k_scales(w, r, o)
        f0 = q6_k_offset(s0, s1, xs, nb * t0 + b, f0)
        f1 = q6_k_offset(s0, s1, xs, nb * t1 + b, f1)
        f2 = q6_k_offset(s0, s1, xs, nb * t2 + b, f2)
        f3 = q6_k_offset(s0, s1, xs, nb * t3 + b, f3)
        scales = i8_scale_quads(w, r, o + 192)
        a, c = _zeros4(), _zeros4()
        for hh in range(2):
            for g in range(2):
                a, c = _four_dots(q6_k_byte_chunk(w, r, o, hh, g), scales[2 * hh + g], low,
                                  high, h, 128 * b + 64 * hh + 32 * g, a, c)
        acc = _four_fmas(a, c, d, xd, nb, t, b, acc)
    k32 = np.float32(32)
    return (f32x16_sum(acc[0]) - k32 * f32x8_sum(f0), f32x16_sum(acc[1]) - k32 * f32x8_sum(f1),
            f32x16_sum(acc[2]) - k32 * f32x8_sum(f2), f32x16_sum(acc[3]) - k32 * f32x8_sum(f3))


@njit(inline="always")
def _row_range(w, low, high, xd, xs, Y, lo, hi, quad):
    """Rows lo..hi (one parallel chunk), each row's groups of tokens while it is in L1: quads
    while three or more tokens are left (a third token padded out to a quad costs less than a
    pair and a single), then a pair. A group's padding repeats a token whose results are never
    used, and LLVM drops their computation: a pair costs what two tokens cost."""
    T = Y.shape[0]
    last = T - 1
    for r in range(lo, hi):
        t = 0
        while t + 3 <= T:
            y0, y1, y2, y3 = quad(w, r, low, high, xd, xs, t, t + 1, t + 2, min(t + 3, last))
            Y[t, r], Y[t + 1, r], Y[t + 2, r] = y0, y1, y2
            _store(Y, r, t + 3, y3)
            t += 4
        if t < T:
            y0, y1, _, _ = quad(w, r, low, high, xd, xs, t, min(t + 1, last), t, t)
            Y[t, r] = y0
            _store(Y, r, t + 1, y1)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_k_row_range(w, low, high, xd, xs, Y, lo, hi):
    _row_range(w, low, high, xd, xs, Y, lo, hi, _q4_k_quad)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q6_k_row_range(w, low, high, xd, xs, Y, lo, hi):
    _row_range(w, low, high, xd, xs, Y, lo, hi, _q6_k_quad)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def tokens_q4_k(w, X, Y, chunks):
    """Y [T, rows] = X [T, n] @ W^T for Q4_K blocks w uint8 [rows, 144 * n / 256]."""
    low, high, xd, xs = _byte_pair_activations(X, True, 32)
    rows = w.shape[0]
    for c in prange(chunks):
        _q4_k_row_range(w, low, high, xd, xs, Y, c * rows // chunks, (c + 1) * rows // chunks)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def tokens_q6_k(w, X, Y, chunks):
    """Y [T, rows] = X [T, n] @ W^T for Q6_K blocks w uint8 [rows, 210 * n / 256]."""
    low, high, xd, xs = _byte_pair_activations(X, False, 16)
    rows = w.shape[0]
    for c in prange(chunks):
        _q6_k_row_range(w, low, high, xd, xs, Y, c * rows // chunks, (c + 1) * rows // chunks)
