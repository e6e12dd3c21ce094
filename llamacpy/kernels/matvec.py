"""Decode-time kernels: y[rows] = W[rows, n] @ x[n] with W read in place from the mapped file.

W is the uint8 block view [rows, row_bytes] of a GGUF tensor (a uint16 view for F16/BF16), x and
y are float32. Every kernel decodes weights to float32 and multiply-adds them into a 32-lane
float32 accumulator that stays in SIMD registers across blocks and is summed once per row. The
constant parts of a block (Q4_1 / K-quant mins, the -8 / -16 / -32 offsets) are hoisted out of the
inner loop: y = sum_b d_b * sum(q x) + m_b * sum(x_b), with the block sums of x computed once per
call. In numba this beats llama.cpp's int8-activation dot products (ggml_vec_dot_*_q8_*), whose
integer arithmetic numba widens to 64 bits. Results agree with `dequantize(W) @ x` to float32
rounding, not bit for bit (the summation order differs). F32 weights go to BLAS sgemv.

Parallel over rows (prange); see kernels/dequant.py for how the loops are kept vectorisable.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..format.constants import GGMLType
from .dequant import (FASTMATH, IQ4_NL_GRID, bit_as, bits_to_f32, call_kernel, f16_at,
                      f16_bits_to_f32, hi4, iq4_xs_scale, k4_scale_min, ld, ld2, lo4, q3_k_scale,
                      output_array, q5_hi, row_length, weight_view)


@njit(inline="always")
def _sum32(acc):
    """Sum of the 32 lanes as a tree (in place): 5 dependent adds instead of 31 per row."""
    for half in (16, 8, 4, 2, 1):
        for lane in range(half):
            acc[lane] += acc[lane + half]
    return acc[0]


@njit(inline="always")
def _block_sums(x, size):
    """float32 [n // size]: sums of consecutive blocks of x."""
    out = np.empty(x.shape[0] // size, np.float32)
    for b in range(out.shape[0]):
        s = np.float32(0)
        for j in range(size):
            s += ld(x, size * b + j)
        out[b] = s
    return out


# ---------------------------------------------------------------------------------- plain floats


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_f16(w, x, y):  # w: uint16 [rows, n] (fp16 bits)
    rows, n = w.shape
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        for b in range(n // 32):
            for lane in range(32):
                acc[lane] += f16_bits_to_f32(ld2(w, r, 32 * b + lane)) * ld(x, 32 * b + lane)
        s = _sum32(acc)
        for i in range(n // 32 * 32, n):
            s += f16_bits_to_f32(ld2(w, r, i)) * ld(x, i)
        y[r] = s


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_bf16(w, x, y):  # w: uint16 [rows, n] (bf16 bits: the top half of a float32)
    rows, n = w.shape
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        for b in range(n // 32):
            for lane in range(32):
                v = bits_to_f32(np.uint32(ld2(w, r, 32 * b + lane)) << np.uint32(16))
                acc[lane] += v * ld(x, 32 * b + lane)
        s = _sum32(acc)
        for i in range(n // 32 * 32, n):
            s += bits_to_f32(np.uint32(ld2(w, r, i)) << np.uint32(16)) * ld(x, i)
        y[r] = s


# ------------------------------------------------------------------------ 32-weight block types


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q4_0(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 18
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # sum_b d_b * sum(x_b): the -8 offset
        for b in range(nb):
            o, xo = 18 * b, 32 * b
            d = f16_at(w, r, o)
            corr += d * ld(xs, b)
            for j in range(16):
                v = ld2(w, r, o + 2 + j)
                acc[j] += d * lo4(v) * ld(x, xo + j)
                acc[16 + j] += d * hi4(v) * ld(x, xo + 16 + j)
        y[r] = _sum32(acc) - np.float32(8) * corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q4_1(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 20
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # sum_b m_b * sum(x_b)
        for b in range(nb):
            o, xo = 20 * b, 32 * b
            d = f16_at(w, r, o)
            corr += f16_at(w, r, o + 2) * ld(xs, b)
            for j in range(16):
                v = ld2(w, r, o + 4 + j)
                acc[j] += d * lo4(v) * ld(x, xo + j)
                acc[16 + j] += d * hi4(v) * ld(x, xo + 16 + j)
        y[r] = _sum32(acc) + corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q5_0(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 22
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # the -16 offset
        for b in range(nb):
            o, xo = 22 * b, 32 * b
            d = f16_at(w, r, o)
            corr += d * ld(xs, b)
            for j in range(16):
                v = ld2(w, r, o + 6 + j)
                q0 = lo4(v) + q5_hi(w, r, o + 2, j)
                q1 = hi4(v) + q5_hi(w, r, o + 2, j + 16)
                acc[j] += d * q0 * ld(x, xo + j)
                acc[16 + j] += d * q1 * ld(x, xo + 16 + j)
        y[r] = _sum32(acc) - np.float32(16) * corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q5_1(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 24
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)
        for b in range(nb):
            o, xo = 24 * b, 32 * b
            d = f16_at(w, r, o)
            corr += f16_at(w, r, o + 2) * ld(xs, b)
            for j in range(16):
                v = ld2(w, r, o + 8 + j)
                q0 = lo4(v) + q5_hi(w, r, o + 4, j)
                q1 = hi4(v) + q5_hi(w, r, o + 4, j + 16)
                acc[j] += d * q0 * ld(x, xo + j)
                acc[16 + j] += d * q1 * ld(x, xo + 16 + j)
        y[r] = _sum32(acc) + corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q8_0(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 34
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        for b in range(nb):
            o, xo = 34 * b, 32 * b
            d = f16_at(w, r, o)
            for j in range(32):
                acc[j] += d * np.float32(np.int8(ld2(w, r, o + 2 + j))) * ld(x, xo + j)
        y[r] = _sum32(acc)


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_iq4_nl(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 18
    grid = IQ4_NL_GRID
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        for b in range(nb):
            o, xo = 18 * b, 32 * b
            d = f16_at(w, r, o)
            for j in range(16):
                v = ld2(w, r, o + 2 + j)
                acc[j] += d * ld(grid, v & 15) * ld(x, xo + j)
                acc[16 + j] += d * ld(grid, v >> 4) * ld(x, xo + 16 + j)
        y[r] = _sum32(acc)


# ------------------------------------------------------------------ 256-weight k-quant blocks


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q2_k(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 84
    xs = _block_sums(x, 16)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # sum over sub-blocks of dmin * min * sum(x_s)
        for b in range(nb):
            o, xo = 84 * b, 256 * b
            d, dmin = f16_at(w, r, o + 80), f16_at(w, r, o + 82)
            for s in range(16):
                corr += dmin * np.float32(ld2(w, r, o + s) >> 4) * ld(xs, 16 * b + s)
            for h in range(2):
                for j in range(4):  # sub-blocks 8h+2j, 8h+2j+1 fill the 32 lanes
                    d0 = d * np.float32(ld2(w, r, o + 8 * h + 2 * j) & 15)
                    d1 = d * np.float32(ld2(w, r, o + 8 * h + 2 * j + 1) & 15)
                    qo, xj = o + 16 + 32 * h, xo + 128 * h + 32 * j
                    for lane in range(16):
                        q0 = np.float32(np.uint8((ld2(w, r, qo + lane) >> (2 * j)) & 3))
                        q1 = np.float32(np.uint8((ld2(w, r, qo + 16 + lane) >> (2 * j)) & 3))
                        acc[lane] += d0 * q0 * ld(x, xj + lane)
                        acc[16 + lane] += d1 * q1 * ld(x, xj + 16 + lane)
        y[r] = _sum32(acc) - corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q3_k(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 110
    xs = _block_sums(x, 16)
    for r in prange(rows):
        dl = np.empty(16, np.float32)
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # q = crumb + 4 * hbit - 4: the -4 comes out here
        for b in range(nb):
            o, xo = 110 * b, 256 * b
            d = f16_at(w, r, o + 108)
            for s in range(16):
                dl[s] = d * q3_k_scale(w, r, o + 96, s)
                corr += dl[s] * ld(xs, 16 * b + s)
            for h in range(2):
                for j in range(4):
                    d0, d1 = dl[8 * h + 2 * j], dl[8 * h + 2 * j + 1]
                    qo, xj, hm = o + 32 + 32 * h, xo + 128 * h + 32 * j, 1 << (4 * h + j)
                    for lane in range(16):
                        c0 = np.float32(np.uint8((ld2(w, r, qo + lane) >> (2 * j)) & 3))
                        c1 = np.float32(np.uint8((ld2(w, r, qo + 16 + lane) >> (2 * j)) & 3))
                        h0 = bit_as(ld2(w, r, o + lane), hm, np.float32(4))
                        h1 = bit_as(ld2(w, r, o + 16 + lane), hm, np.float32(4))
                        acc[lane] += d0 * (c0 + h0) * ld(x, xj + lane)
                        acc[16 + lane] += d1 * (c1 + h1) * ld(x, xj + 16 + lane)
        y[r] = _sum32(acc) - np.float32(4) * corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q4_k(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 144
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # sum over sub-blocks of dmin * min * sum(x_s)
        for b in range(nb):
            o, xo = 144 * b, 256 * b
            d, dmin = f16_at(w, r, o), f16_at(w, r, o + 2)
            for j in range(4):  # byte l of 32: low nibble -> sub-block 2j, high -> 2j + 1
                sc0, m0 = k4_scale_min(w, r, o + 4, 2 * j)
                sc1, m1 = k4_scale_min(w, r, o + 4, 2 * j + 1)
                d0, d1 = d * sc0, d * sc1
                corr += dmin * (m0 * ld(xs, 8 * b + 2 * j) + m1 * ld(xs, 8 * b + 2 * j + 1))
                qo, xj = o + 16 + 32 * j, xo + 64 * j
                for lane in range(32):
                    v = ld2(w, r, qo + lane)
                    acc[lane] += (d0 * lo4(v) * ld(x, xj + lane)
                                  + d1 * hi4(v) * ld(x, xj + 32 + lane))
        y[r] = _sum32(acc) - corr


@njit(inline="always")
def _q5_k_pair(w, r, o, xo, j, d, x, acc):
    """acc += the products of sub-blocks 2j, 2j + 1 of the Q5_K block at byte `o` (no mins)."""
    sc0, _ = k4_scale_min(w, r, o + 4, 2 * j)
    sc1, _ = k4_scale_min(w, r, o + 4, 2 * j + 1)
    d0, d1 = d * sc0, d * sc1
    qo, xj = o + 48 + 32 * j, xo + 64 * j
    for lane in range(32):
        v, hb = ld2(w, r, qo + lane), ld2(w, r, o + 16 + lane)
        q0 = lo4(v) + bit_as(hb, 1 << (2 * j), np.float32(16))
        q1 = hi4(v) + bit_as(hb, 2 << (2 * j), np.float32(16))
        acc[lane] += d0 * q0 * ld(x, xj + lane) + d1 * q1 * ld(x, xj + 32 + lane)


@njit(inline="always")
def _k4_min_dot(w, r, o, xs, s0):
    """sum over the 8 sub-blocks of min * sum(x_s), mins packed at byte `o` (get_scale_min_k4)."""
    m = np.float32(0)
    for j in range(8):
        m += k4_scale_min(w, r, o, j)[1] * ld(xs, s0 + j)
    return m


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q5_k(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 176
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # sum over sub-blocks of dmin * min * sum(x_s)
        for b in range(nb):
            o, xo = 176 * b, 256 * b
            d = f16_at(w, r, o)
            corr += f16_at(w, r, o + 2) * _k4_min_dot(w, r, o + 4, xs, 8 * b)
            for j in range(4):
                _q5_k_pair(w, r, o, xo, j, d, x, acc)
        y[r] = _sum32(acc) - corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_q6_k(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 210
    xs = _block_sums(x, 16)
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        corr = np.float32(0)  # the -32 offset: sum over sub-blocks of d * sc * sum(x_s)
        for b in range(nb):
            o, xo = 210 * b, 256 * b
            d = f16_at(w, r, o + 208)
            for s in range(16):
                corr += d * np.float32(np.int8(ld2(w, r, o + 192 + s))) * ld(xs, 16 * b + s)
            for h in range(2):
                for k in range(2):  # lanes 16k..16k+15 share four scales
                    so = o + 192 + 8 * h + k
                    d1 = d * np.float32(np.int8(ld2(w, r, so)))
                    d2 = d * np.float32(np.int8(ld2(w, r, so + 2)))
                    d3 = d * np.float32(np.int8(ld2(w, r, so + 4)))
                    d4 = d * np.float32(np.int8(ld2(w, r, so + 6)))
                    lo, ho, xh = o + 64 * h + 16 * k, o + 128 + 32 * h + 16 * k, xo + 128 * h
                    for i in range(16):
                        a, c, hb = ld2(w, r, lo + i), ld2(w, r, lo + 32 + i), ld2(w, r, ho + i)
                        q1 = np.float32(np.uint8((a & 15) | ((hb & 3) << 4)))
                        q2 = np.float32(np.uint8((c & 15) | ((hb & 12) << 2)))
                        q3 = np.float32(np.uint8((a >> 4) | (hb & 48)))
                        q4 = np.float32(np.uint8((c >> 4) | ((hb & 192) >> 2)))
                        xi = xh + 16 * k + i
                        acc[16 * k + i] += (d1 * q1 * ld(x, xi) + d2 * q2 * ld(x, xi + 32)
                                            + d3 * q3 * ld(x, xi + 64) + d4 * q4 * ld(x, xi + 96))
        y[r] = _sum32(acc) - np.float32(32) * corr


@njit(parallel=True, cache=True, fastmath=FASTMATH)
def matvec_iq4_xs(w, x, y):
    rows, nb = w.shape[0], w.shape[1] // 136
    grid = IQ4_NL_GRID
    for r in prange(rows):
        acc = np.zeros(32, np.float32)
        for b in range(nb):
            o, xo = 136 * b, 256 * b
            d = f16_at(w, r, o)
            for ib in range(8):
                dl = d * iq4_xs_scale(w, r, o, ib)
                qo, xj = o + 8 + 16 * ib, xo + 32 * ib
                for j in range(16):
                    v = ld2(w, r, qo + j)
                    acc[j] += dl * ld(grid, v & 15) * ld(x, xj + j)
                    acc[16 + j] += dl * ld(grid, v >> 4) * ld(x, xj + 16 + j)
        y[r] = _sum32(acc)


MATVEC_KERNELS = {
    GGMLType.F16: matvec_f16,
    GGMLType.BF16: matvec_bf16,
    GGMLType.Q4_0: matvec_q4_0,
    GGMLType.Q4_1: matvec_q4_1,
    GGMLType.Q5_0: matvec_q5_0,
    GGMLType.Q5_1: matvec_q5_1,
    GGMLType.Q8_0: matvec_q8_0,
    GGMLType.Q2_K: matvec_q2_k,
    GGMLType.Q3_K: matvec_q3_k,
    GGMLType.Q4_K: matvec_q4_k,
    GGMLType.Q5_K: matvec_q5_k,
    GGMLType.Q6_K: matvec_q6_k,
    GGMLType.IQ4_NL: matvec_iq4_nl,
    GGMLType.IQ4_XS: matvec_iq4_xs,
}


def matvec(w_blocks: np.ndarray, ggml_type: int, x: np.ndarray,
           out: np.ndarray | None = None) -> np.ndarray:
    """y = W @ x for W given as uint8 [rows, row_bytes] blocks of `ggml_type`; float32 [rows]."""
    ggml_type = GGMLType(ggml_type)
    kernel = MATVEC_KERNELS.get(ggml_type)
    if kernel is None and ggml_type != GGMLType.F32:
        raise NotImplementedError(f"no CPU matvec kernel for tensor type {ggml_type.name}")
    n = row_length(w_blocks.shape[1], ggml_type)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape != (n,):
        raise ValueError(f"x has shape {x.shape}, expected ({n},) for a {ggml_type.name} "
                         f"matrix of {w_blocks.shape[0]} x {n}")
    out = output_array(out, (w_blocks.shape[0],))
    if kernel is None:  # F32: BLAS sgemv (numba does not vectorise a plain float32 dot this way)
        np.matmul(w_blocks.view(np.float32), x, out=out)
    else:
        call_kernel(kernel, weight_view(w_blocks, ggml_type), x, out)
    return out
