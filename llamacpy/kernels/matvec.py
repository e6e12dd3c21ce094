"""Decode-time kernels: y[rows] = W[rows, n] @ x[n] with W read in place from the mapped file.

W is the uint8 block view [rows, row_bytes] of a GGUF tensor (a uint16 view for F16/BF16), x and
y are float32. Results agree with `dequantize(W) @ x` to float32 rounding or, for the integer
kernels, to the int16 rounding of x; F32 weights go to BLAS sgemv. Parallel over rows (prange).

Integer kernels (Q8_0, Q5_0, IQ4_NL, Q4_0, Q4_1, Q4_K, Q6_K): x is
quantized once per call to int16 per block of 32 with a float scale (`quantize_i16`: steps of
max|x_block| / 32767, where llama.cpp's CPU kernels round activations to 8 bits), and each
block's quants are multiplied with it in 16-bit lanes summed in pairs into int32 (vpmaddwd): one
int-to-float conversion and one FMA per block instead of one per weight. The SIMD values are
kernels/simd.py's; rows are prefetched PREFETCH bytes ahead, which keeps one thread streaming
from DRAM at close to its bandwidth. Q5_0 and IQ4_NL blocks are decoded in registers to the int8
values of their exact Q8_0 repack (fifth bits spread with vpshufb / vpcmpeqb, grid values looked
up with vpshufb) and give bit for bit that repack's results; they cost ~14 vector ops per block
against Q8_0's ~9, so per thread they run ~1.3x (Q5_0) / ~1.1x (IQ4_NL) slower than the repack
while reading 35-47% fewer bytes. On AVX-512 the Q4_K and Q6_K kernels quantize x per 256 instead
(int16 split into two int8 halves, `quantize_byte_pairs`) and multiply the weights as bytes with
vpmaddubsw, with the sub-block scales applied in vpdpwssd: no unpacking of nibbles to words and
one conversion per super-block (Zen 4: 1.0-1.3x faster; decode KLD to exact 2.1e-7 -> 4.4e-7 on
Gemma 3, unchanged on Qwen2.5-Coder).

Float kernels (the other types) decode weights to float32 and multiply-add them into a 32-lane
float32 accumulator summed once per row; the constant parts of a block (Q4_1 / K-quant mins, the
-8 / -16 / -32 offsets) are hoisted out of the inner loop: y = sum_b d_b * sum(q x) + m_b *
sum(x_b), with the block sums of x computed once per call. See kernels/dequant.py for how those
loops are kept vectorisable.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..format.constants import GGMLType
from .dequant import (FASTMATH, IQ4_NL_GRID, bit_as, bits_to_f32, call_kernel, f16_at,
                      f16_bits_to_f32, hi4, iq4_xs_scale, k4_scale_min, ld, ld2, lo4, q3_k_scale,
                      output_array, q5_hi, row_length, weight_view)
from .simd import (bytes_f32, f16_pair, f16_pair_rows, f16_rows, f32x8_add, f32x8_fma, f32x8_mul,
                   f32x8_sum, f32x8_zero, fma_lane, fma_vec, lane, lane_pairs, load_f32, load_i16,
                   load_i32, load_nibble_words, load_u32, load_w16, madd, prefetch, sbytes_f32,
                   vadd, vand, vor, vsar, vshl, vshr, vsub, vxor, bit_bytes, load_nibbles,
                   shuffle_bytes, HAS_AVX512BW, f32x16_sum, f32x16_zero, fma_lane_pair,
                   load_i16x32, load_w32, concat, f32x16_halves, nibble_words_pair,
                   byte_words, dpwssd, f32x8_splat, i32x16_zero, i8_scale_quads, maddubs)
from .threading_layer import NOGIL

# bytes ahead of the current position in the row stream: one Zen 5 thread streams from DRAM at
# 33-36 GB/s with 8 KiB (Q8_0, 576-wide rows) against 25-27 GB/s with 4 KiB (2026-12-02)
PREFETCH = 8192
# the K-quant byte-pair kernels' own distance (bench/prefetch_distance.py, Zen 4, 2026-12-04):
# a 1.5B Q4_K_M model's matrices stream 4-18% faster at 3 KiB than at 8 KiB; Zen 5 not measured
PREFETCH_BYTE_PAIRS = 3072
QMAX = np.float32(32767)  # int16 activations: x / scale in [-32767, 32767]


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


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


# ------------------------------------------------------------------ 256-weight k-quant blocks


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
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


# ------------------------------------------------- integer kernels: int16 activations, vpmaddwd


@njit(inline="always")
def _block_amax(x, o, size):
    """max |x[o:o + size]|, NaN if the block holds one: branch-free, so that LLVM vectorises it
    (2x faster)."""
    amax, nan = np.float32(0), False
    for j in range(size):
        v = abs(ld(x, o + j))
        amax = max(amax, v)
        nan |= v != v
    return np.float32(np.nan) if nan else amax


@njit(inline="always")
def quantize_i16(x):
    """x float32 [n] (n a multiple of 32) as int16 blocks of 32: xq int16 [n] and the block scales
    xd float32 [n // 32], x ~ xq * xd with xd = max|x_block| / 32767. Within a block the 16 values
    at even positions come first, then the 16 at odd ones: `madd` multiplies word pairs, and the
    weight kernels split each byte pair the same way. A NaN in a block makes its scale NaN."""
    nb = x.shape[0] // 32
    xq = np.empty(x.shape[0], np.int16)
    xd = np.empty(nb, np.float32)
    for b in range(nb):
        o = 32 * b
        amax = _block_amax(x, o, 32)
        xd[b] = amax / QMAX
        inv = QMAX / amax if amax > 0 else np.float32(0)
        for j in range(16):
            xq[o + j] = np.int16(np.rint(ld(x, o + 2 * j) * inv))
        for j in range(16):
            xq[o + 16 + j] = np.int16(np.rint(ld(x, o + 2 * j + 1) * inv))
    return xq, xd


def quantize_i16_reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The numpy twin of `quantize_i16`."""
    blocks = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(blocks).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, QMAX / amax, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv[:, None]).astype(np.int16)
    q = np.concatenate([q[:, 0::2], q[:, 1::2]], axis=1)
    return q.reshape(-1), (amax / QMAX).astype(np.float32)


@njit(inline="always")
def _bias_corrections(xq, bias):
    """int32 [8 per block]: lane k holds `bias` times the four activations a block dot pairs in
    lane k (`_words_dot`), the term that biasing the weights by +bias adds."""
    xc = np.empty(xq.shape[0] // 4, np.int32)
    for b in range(xq.shape[0] // 32):
        for k in range(8):
            e, o = 32 * b + 2 * k, 32 * b + 16 + 2 * k
            xc[8 * b + k] = bias * (np.int32(ld(xq, e)) + np.int32(ld(xq, e + 1))
                                    + np.int32(ld(xq, o)) + np.int32(ld(xq, o + 1)))
    return xc


@njit(inline="always")
def q5_0_bytes(w, r, o):
    """I16x16 whose byte p is quant p - 16 (int8) of the Q5_0 block at byte o: the nibbles of qs
    (o + 6), with 0xF0 (-16) or'ed in where the fifth bit (qh at o + 2) is clear."""
    return vor(load_nibbles(w, r, o + 6), bit_bytes(w, r, o + 2, 0, 0xF0))


IQ4_NL_I8 = IQ4_NL_GRID.astype(np.int8)


@njit(inline="always")
def iq4_nl_bytes(w, r, o):
    """I16x16 whose byte p is IQ4_NL quant p of the block at byte o as int8 (the grid value):
    the nibbles looked up with one vpshufb."""
    return shuffle_bytes(IQ4_NL_I8, load_nibbles(w, r, o + 2))


# constants once the kernels are inlined
KIND_Q8_0, KIND_Q5_0, KIND_IQ4_NL, KIND_Q4_0, KIND_Q4_1 = 0, 1, 2, 3, 4
BLOCK_BYTES = (34, 22, 18, 18, 20)


@njit(inline="always")
def _row_words(w, r, o, kind):
    """I16x16: the 32 quants of the block at byte o of row r, two to a word, in the form
    `_even_odd` splits:
    - Q8_0: the int8 bytes biased to unsigned (xor 0x80 = +128; `_bias_corrections` takes the
      128 off), so that no sign extension is needed;
    - Q5_0: q - 16 as int8 (`q5_0_bytes`); IQ4_NL: the int8 grid values (`iq4_nl_bytes`);
    - Q4_0 / Q4_1: the nibbles, quant j low and j + 16 high in the bytes, shifted so that even
      bytes hold the quants at even positions in activation order, odd bytes the odd ones."""
    if kind == KIND_Q8_0:
        return vxor(load_w16(w, r, o + 2), 0x8080)
    if kind == KIND_Q5_0:
        return q5_0_bytes(w, r, o)
    if kind == KIND_Q4_0:
        return load_nibble_words(w, r, o + 2)
    if kind == KIND_Q4_1:
        return load_nibble_words(w, r, o + 4)
    return iq4_nl_bytes(w, r, o)


@njit(inline="always")
def _even_odd(v, kind):
    """The even and odd bytes of `_row_words` (an I16x16, or two rows' as an I16x32) as int16
    lanes for `madd`. Q5_0's signed bytes stay at the top of each word (256 times the quant:
    256 * |q - 16| <= 4096 keeps a lane's four products far from int32 overflow, exact in
    float32; its scales are divided by 256)."""
    if kind == KIND_Q8_0:
        return vand(v, 0xFF), vshr(v, 8)
    if kind == KIND_Q5_0:
        return vshl(v, 8), vand(v, -256)
    if kind == KIND_IQ4_NL:
        return vsar(vshl(v, 8), 8), vsar(v, 8)
    return vand(v, 15), vand(vshr(v, 8), 15)  # Q4_0, Q4_1


@njit(inline="always")
def _words_dot(v, xe, xo, xc, kind):
    """Lanes summing to the dot products of the words `v` with the activations at even (xe) and
    odd (xo) positions, less the bias corrections xc where the kind has them (Q8_0's +128, Q4_0's
    +8 offsets)."""
    even, odd = _even_odd(v, kind)
    p = vadd(madd(even, xe), madd(odd, xo))
    return vsub(p, xc) if kind == KIND_Q8_0 or kind == KIND_Q4_0 else p


@njit(inline="always")
def _block_activations(x, kind):
    """quantize_i16's (xq, xd) and the bias corrections the kind needs (zeros otherwise), with
    xd divided by 256 for Q5_0's words (exact: a power of two)."""
    xq, xd = quantize_i16(x)
    xc = _bias_corrections(xq, 128 if kind == KIND_Q8_0 else 8) \
        if kind == KIND_Q8_0 or kind == KIND_Q4_0 else np.zeros(xq.shape[0] // 4, np.int32)
    if kind == KIND_Q5_0:
        xd = xd * np.float32(1 / 256)
    return xq, xd, xc


@njit(inline="always")
def _four_rows(w, g, last, size, b, xd):
    """Rows r0..r3 of group g (the last ones repeated past the end), prefetched at block b, and
    their four scales times the block's activation scale (lanes 0-3)."""
    r0, r1, r2, r3 = _four_rows_prefetched(w, g, last, size, b)
    return r0, r1, r2, r3, f32x8_mul(f16_rows(w, r0, r1, r2, r3, size * b), ld(xd, b))


@njit(inline="always")
def _four_rows_prefetched(w, g, last, size, b):
    """Rows r0..r3 of group g (the last ones repeated past the end), prefetched at block b."""
    r0 = 4 * g
    o = size * b
    prefetch(w, r0, PREFETCH + 4 * o)  # the four rows are one contiguous stream
    prefetch(w, r0, PREFETCH + 4 * o + 64)
    return r0, min(r0 + 1, last), min(r0 + 2, last), min(r0 + 3, last)


@njit(inline="always")
def _store_four(y, g, last, s0, s1, s2, s3):
    """y[4g..4g + 3] = s0..s3, the rows that exist."""
    r0 = 4 * g
    y[r0] = s0
    if r0 + 1 <= last:
        y[r0 + 1] = s1
    if r0 + 2 <= last:
        y[r0 + 2] = s2
    if r0 + 3 <= last:
        y[r0 + 3] = s3


@njit(inline="always")
def _scaled_rows(w, x, y, kind):
    """y = W x for the types with one fp16 scale at the start of each 32-weight block (Q8_0,
    Q5_0, IQ4_NL, Q4_0; Q4_1 with its min as well): four rows per pass share the activation
    loads and convert their four scales at once. A row's lanes get the same integers for the
    same weights whatever the block type, so a Q5_0 / IQ4_NL matrix gives bit for bit the result
    of its Q8_0 repack. Q4_1: y = sum_b d_b * dx_b * (q . xq)_b + m_b * sum(x_b)."""
    size = BLOCK_BYTES[kind]
    rows, nb = w.shape[0], w.shape[1] // size
    xq, xd, xc = _block_activations(x, kind)
    xs = _block_sums(x, 32) if kind == KIND_Q4_1 else xd
    last = rows - 1
    for g in prange((rows + 3) // 4):
        a0, a1, a2, a3, mins = f32x8_zero(), f32x8_zero(), f32x8_zero(), f32x8_zero(), f32x8_zero()
        for b in range(nb):
            r0, r1, r2, r3, d = _four_rows(w, g, last, size, b, xd)
            o = size * b
            if kind == KIND_Q4_1:
                mins = f32x8_fma(f16_rows(w, r0, r1, r2, r3, o + 2), ld(xs, b), mins)
            xe, xo, c = load_i16(xq, 32 * b), load_i16(xq, 32 * b + 16), load_i32(xc, 8 * b)
            a0 = fma_lane(_words_dot(_row_words(w, r0, o, kind), xe, xo, c, kind), d, 0, a0)
            a1 = fma_lane(_words_dot(_row_words(w, r1, o, kind), xe, xo, c, kind), d, 1, a1)
            a2 = fma_lane(_words_dot(_row_words(w, r2, o, kind), xe, xo, c, kind), d, 2, a2)
            a3 = fma_lane(_words_dot(_row_words(w, r3, o, kind), xe, xo, c, kind), d, 3, a3)
        _store_four(y, g, last, f32x8_sum(a0) + lane(mins, 0), f32x8_sum(a1) + lane(mins, 1),
                    f32x8_sum(a2) + lane(mins, 2), f32x8_sum(a3) + lane(mins, 3))


@njit(inline="always")
def _scaled_rows_zmm(w, x, y, kind):
    """_scaled_rows with two rows per 512-bit vector (AVX-512BW): each row's words are built as
    before, then joined, so the madds, masks, shifts, conversions and FMAs run once per row
    pair. The same integer lanes, scales and sums: the same results bit for bit."""
    size = BLOCK_BYTES[kind]
    rows, nb = w.shape[0], w.shape[1] // size
    xq, xd, xc = _block_activations(x, kind)
    xs = _block_sums(x, 32) if kind == KIND_Q4_1 else xd
    last = rows - 1
    # Q4_1 converts each row's scale and min together: its scales sit in lanes 0, 2, 4, 6 and
    # its min sums in lanes 1, 3, 5, 7 (the other kinds: scales in lanes 0-3, no mins)
    k0, k1, k2, k3 = (0, 2, 4, 6) if kind == KIND_Q4_1 else (0, 1, 2, 3)
    for g in prange((rows + 3) // 4):
        a01, a23, mins = f32x16_zero(), f32x16_zero(), f32x8_zero()
        for b in range(nb):
            if kind == KIND_Q4_1:
                r0, r1, r2, r3 = _four_rows_prefetched(w, g, last, size, b)
                o = size * b
                dm = f16_pair_rows(w, r0, r1, r2, r3, o)
                mins = f32x8_fma(dm, ld(xs, b), mins)
                d = f32x8_mul(dm, ld(xd, b))
            else:
                r0, r1, r2, r3, d = _four_rows(w, g, last, size, b, xd)
                o = size * b
            e, od, c = load_i16(xq, 32 * b), load_i16(xq, 32 * b + 16), load_i32(xc, 8 * b)
            xe, xo, cc = concat(e, e), concat(od, od), concat(c, c)
            v01, v23 = _row_pair_words(w, r0, r1, o, kind), _row_pair_words(w, r2, r3, o, kind)
            a01 = fma_lane_pair(_words_dot(v01, xe, xo, cc, kind), d, k0, k1, a01)
            a23 = fma_lane_pair(_words_dot(v23, xe, xo, cc, kind), d, k2, k3, a23)
        h0, h1 = f32x16_halves(a01)
        h2, h3 = f32x16_halves(a23)
        m0, m1, m2, m3 = (k0 + 1, k1 + 1, k2 + 1, k3 + 1) if kind == KIND_Q4_1 else (0, 1, 2, 3)
        _store_four(y, g, last, f32x8_sum(h0) + lane(mins, m0), f32x8_sum(h1) + lane(mins, m1),
                    f32x8_sum(h2) + lane(mins, m2), f32x8_sum(h3) + lane(mins, m3))


@njit(inline="always")
def _row_pair_words(w, ra, rb, o, kind):
    """concat(_row_words(w, ra, o, kind), _row_words(w, rb, o, kind)); the nibble kinds shift
    both rows' bytes at once."""
    if kind == KIND_Q4_0:
        return nibble_words_pair(w, ra, rb, o + 2)
    if kind == KIND_Q4_1:
        return nibble_words_pair(w, ra, rb, o + 4)
    return concat(_row_words(w, ra, o, kind), _row_words(w, rb, o, kind))


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q8_0(w, x, y):
    _scaled_rows(w, x, y, KIND_Q8_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q5_0(w, x, y):
    _scaled_rows(w, x, y, KIND_Q5_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_iq4_nl(w, x, y):
    _scaled_rows(w, x, y, KIND_IQ4_NL)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q4_0(w, x, y):
    _scaled_rows(w, x, y, KIND_Q4_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q4_1(w, x, y):
    _scaled_rows(w, x, y, KIND_Q4_1)


# the same on 512-bit vectors (top-level functions: numba's cache does not find closures)
@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q8_0_zmm(w, x, y):
    _scaled_rows_zmm(w, x, y, KIND_Q8_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q5_0_zmm(w, x, y):
    _scaled_rows_zmm(w, x, y, KIND_Q5_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_iq4_nl_zmm(w, x, y):
    _scaled_rows_zmm(w, x, y, KIND_IQ4_NL)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q4_0_zmm(w, x, y):
    _scaled_rows_zmm(w, x, y, KIND_Q4_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q4_1_zmm(w, x, y):
    _scaled_rows_zmm(w, x, y, KIND_Q4_1)


K4_LOW6, K4_LOW4, K4_HIGH2 = np.uint32(0x3F3F3F3F), np.uint32(0x0F0F0F0F), np.uint32(0x03030303)


@njit(inline="always")
def _k4_packed_scales_mins(w, r, o):
    """The 8 six-bit scales and 8 mins packed in 12 bytes at `o` (Q4_K, Q5_K) as four uint32 of
    four bytes each (scales 0-3, 4-7, mins 0-3, 4-7): the 32-bit unpacking of
    ggml_vec_dot_q4_K_q8_K (get_scale_min_k4 for all eight at once)."""
    u0, u1, u2 = load_u32(w, r, o), load_u32(w, r, o + 4), load_u32(w, r, o + 8)
    four, six = np.uint32(4), np.uint32(6)
    scales_hi = (u2 & K4_LOW4) | (((u0 >> six) & K4_HIGH2) << four)
    mins_hi = ((u2 >> four) & K4_LOW4) | (((u1 >> six) & K4_HIGH2) << four)
    return u0 & K4_LOW6, scales_hi, u1 & K4_LOW6, mins_hi


@njit(inline="always")
def _k4_scales_mins(w, r, o):
    """The scales and mins of `_k4_packed_scales_mins` as two F32x8."""
    sc_lo, sc_hi, m_lo, m_hi = _k4_packed_scales_mins(w, r, o)
    return bytes_f32(sc_lo, sc_hi), bytes_f32(m_lo, m_hi)


@njit(inline="always")
def _low_nibbles_dot(v, xq, i):
    """I32x8 summing to the dot product of the low nibbles of 32 bytes (16 words `v`) with the
    int16 activation block at xq[i]: even bytes' nibble is v & 15, odd bytes' (v >> 8) & 15."""
    even = madd(vand(v, 15), load_i16(xq, i))
    return vadd(even, madd(vand(vshr(v, 8), 15), load_i16(xq, i + 16)))


@njit(inline="always")
def _high_nibbles_dot(v, xq, i):
    """The same for the high nibbles: (v >> 4) & 15 and v >> 12."""
    even = madd(vand(vshr(v, 4), 15), load_i16(xq, i))
    return vadd(even, madd(vshr(v, 12), load_i16(xq, i + 16)))


@njit(inline="always")
def _q4_k_block_head(w, r, o, b, xd, xs, mins):
    """Prefetch ahead, then block b's scale per sub-block (d * sc_s * dx_s) and the mins
    accumulator with its dmin * m_s * sum(x_s) added."""
    for k in range(3):
        prefetch(w, r, o + PREFETCH + 64 * k)
    d, dmin = f16_pair(w, r, o)
    sc, m = _k4_scales_mins(w, r, o + 4)
    scale = f32x8_mul(f32x8_mul(sc, load_f32(xd, 8 * b)), d)
    return scale, f32x8_fma(f32x8_mul(m, load_f32(xs, 8 * b)), dmin, mins)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q4_k(w, x, y):
    # y = sum over sub-blocks s of d * sc_s * dx_s * (q . xq)_s - dmin * sum_s m_s * sum(x_s)
    rows, nb = w.shape[0], w.shape[1] // 144
    xq, xd = quantize_i16(x)
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc_lo, acc_hi, mins = f32x8_zero(), f32x8_zero(), f32x8_zero()
        for b in range(nb):
            o = 144 * b
            scale, mins = _q4_k_block_head(w, r, o, b, xd, xs, mins)
            for j in range(4):  # 32 bytes: low nibbles are sub-block 2j, high ones 2j + 1
                v = load_w16(w, r, o + 16 + 32 * j)
                xo = 256 * b + 64 * j
                acc_lo = fma_lane(_low_nibbles_dot(v, xq, xo), scale, 2 * j, acc_lo)
                acc_hi = fma_lane(_high_nibbles_dot(v, xq, xo + 32), scale, 2 * j + 1, acc_hi)
        y[r] = f32x8_sum(f32x8_add(acc_lo, acc_hi)) - f32x8_sum(mins)


BYTE_QMAX = np.float32(127 * 256 + 127)  # the largest q whose high byte (q + 128) >> 8 fits int8


@njit(inline="always")
def quantize_byte_pairs(x, nibble_order):
    """x float32 [n] (n a multiple of 256) as int16 per block of 256, q = round(x / xd) with
    xd = max|x_block| / BYTE_QMAX, split into bytes q = 256 * high + low (both int8): (low, high)
    as int16 arrays of n / 2 word pairs and xd float32 [n // 256]. With `nibble_order` each
    block's bytes are in the order Q4_K's nibbles come: per half block of 128 weights, the weights
    of the low nibbles (0-31 and 64-95) then of the high nibbles (32-63 and 96-127)."""
    nb = x.shape[0] // 256
    low, high = np.empty(x.shape[0] // 2, np.int16), np.empty(x.shape[0] // 2, np.int16)
    lo8, hi8 = low.view(np.int8), high.view(np.int8)
    xd = np.empty(nb, np.float32)
    for b in range(nb):
        o = 256 * b
        amax = _block_amax(x, o, 256)
        xd[b] = amax / BYTE_QMAX
        inv = BYTE_QMAX / amax if amax > 0 else np.float32(0)
        for k in range(8):  # runs of 32: run k of the block comes from run src
            src = (k & 4) | ((k & 1) << 1) | ((k & 2) >> 1) if nibble_order else k
            for i in range(32):
                q = np.int32(np.rint(ld(x, o + 32 * src + i) * inv))
                h = (q + 128) >> 8
                hi8[o + 32 * k + i] = np.int8(h)
                lo8[o + 32 * k + i] = np.int8(q - 256 * h)
    return low, high, xd


def quantize_byte_pairs_reference(x: np.ndarray, nibble_order: bool):
    """The numpy twin of `quantize_byte_pairs`."""
    blocks = x.astype(np.float32).reshape(-1, 256)
    amax = np.abs(blocks).max(axis=1)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, BYTE_QMAX / amax, np.float32(0)).astype(np.float32)
    q = np.rint(blocks * inv[:, None]).astype(np.int32)
    if nibble_order:
        q = q.reshape(-1, 2, 2, 2, 32).transpose(0, 1, 3, 2, 4).reshape(-1, 256)
    high = (q + 128) >> 8
    low = q - 256 * high
    pairs = [v.astype(np.int8).reshape(-1).view(np.int16) for v in (low, high)]
    return pairs[0], pairs[1], (amax / BYTE_QMAX).astype(np.float32)


@njit(inline="always")
def _byte_pair_dots(q, low, high, xo, scale, t_lo, t_hi):
    """(t_lo, t_hi) plus the 64 weight bytes q times the activation bytes at word xo of both
    halves, each pair sum times its sub-block's scale word (vpmaddubsw, then vpdpwssd)."""
    t_lo = dpwssd(t_lo, maddubs(q, load_i16x32(low, xo)), scale)
    return t_lo, dpwssd(t_hi, maddubs(q, load_i16x32(high, xo)), scale)


@njit(inline="always")
def _byte_pair_fma(t_lo, t_hi, f, acc):
    """acc + f * (t_lo + 256 t_hi), converted once per super-block (f = d * xd of the block)."""
    acc = fma_vec(t_lo, concat(f32x8_splat(f), f32x8_splat(f)), acc)
    f256 = f * np.float32(256)
    return fma_vec(t_hi, concat(f32x8_splat(f256), f32x8_splat(f256)), acc)


@njit(inline="always")
def q4_k_byte_pair_head(w, r, o):
    """Prefetch ahead, then the Q4_K super-block at o's d, dmin, packed scales (two uint32) and
    mins (F32x8), for the byte-pair kernels."""
    for k in range(3):
        prefetch(w, r, o + PREFETCH_BYTE_PAIRS + 64 * k)
    d, dmin = f16_pair(w, r, o)
    sc_lo, sc_hi, m_lo, m_hi = _k4_packed_scales_mins(w, r, o + 4)
    return d, dmin, sc_lo, sc_hi, bytes_f32(m_lo, m_hi)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q4_k_zmm(w, x, y):
    """matvec_q4_k on 512-bit vectors with the nibbles multiplied as bytes: the activations are
    int16 per 256 split into two int8 halves (quantize_byte_pairs), so vpmaddubsw multiplies 64
    nibbles by 64 activation bytes with no unpacking to words, and vpdpwssd scales the pair sums
    by their sub-block's integer scale into int32: one conversion per block of 256."""
    rows, nb = w.shape[0], w.shape[1] // 144
    low, high, xd = quantize_byte_pairs(x, True)
    xs = _block_sums(x, 32)
    for r in prange(rows):
        acc, mins = f32x16_zero(), f32x8_zero()
        for b in range(nb):
            o = 144 * b
            d, dmin, sc_lo, sc_hi, mf = q4_k_byte_pair_head(w, r, o)
            mins = f32x8_fma(f32x8_mul(mf, load_f32(xs, 8 * b)), dmin, mins)
            t_lo, t_hi = i32x16_zero(), i32x16_zero()
            for jj in range(2):
                v = load_w32(w, r, o + 16 + 64 * jj)
                for g in range(2):
                    q = vand(v, 0x0F0F) if g == 0 else vand(vshr(v, 4), 0x0F0F)
                    s = byte_words(sc_lo, sc_hi, 4 * jj + g, 4 * jj + 2 + g)
                    t_lo, t_hi = _byte_pair_dots(q, low, high, 128 * b + 64 * jj + 32 * g, s,
                                                 t_lo, t_hi)
            acc = _byte_pair_fma(t_lo, t_hi, d * xd[b], acc)
        y[r] = f32x16_sum(acc) - f32x8_sum(mins)


@njit(inline="always")
def q6_k_byte_chunk(w, r, o, h, g):
    """Weights 64 g .. 64 g + 63 of half h of the Q6_K block at o as 64 bytes 0..63: ql's low
    (g = 0) or high nibbles with qh's bits 0-1 and 2-3 (or 4-5 and 6-7) above them (the loads
    shared by g = 0 and 1 once inlined)."""
    ql = load_w32(w, r, o + 64 * h)
    qh = load_w16(w, r, o + 128 + 32 * h)
    hb = concat(qh, vshr(qh, 2))
    if g == 0:
        return vor(vand(ql, 0x0F0F), vand(vshl(hb, 4), 0x3030))
    return vor(vand(vshr(ql, 4), 0x0F0F), vand(hb, 0x3030))


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q6_k_zmm(w, x, y):
    """matvec_q6_k on 512-bit vectors with the 6-bit weights multiplied as bytes, as
    matvec_q4_k_zmm does: per half block, ql's low nibbles with qh's bits 0-1 (for the first 32)
    and 2-3 are weights 0-63, the high nibbles with bits 4-5 and 6-7 weights 64-127, in natural
    order; the 16 int8 scales multiply the pair sums in vpdpwssd."""
    rows, nb = w.shape[0], w.shape[1] // 210
    low, high, xd = quantize_byte_pairs(x, False)
    xs = _block_sums(x, 16)
    for r in prange(rows):
        acc, offset = f32x16_zero(), f32x8_zero()
        for b in range(nb):
            o = 210 * b
            offset = _q6_k_block_head(w, r, o, b, xs, offset, PREFETCH_BYTE_PAIRS)[2]
            scales = i8_scale_quads(w, r, o + 192)
            t_lo, t_hi = i32x16_zero(), i32x16_zero()
            for h in range(2):
                for g in range(2):
                    q = q6_k_byte_chunk(w, r, o, h, g)
                    t_lo, t_hi = _byte_pair_dots(q, low, high, 128 * b + 64 * h + 32 * g,
                                                 scales[2 * h + g], t_lo, t_hi)
            acc = _byte_pair_fma(t_lo, t_hi, f16_pair(w, r, o + 206)[1] * xd[b], acc)
        y[r] = f32x16_sum(acc) - np.float32(32) * f32x8_sum(offset)


@njit(inline="always")
def _q6_k_half(w, r, o, h, xq, xd, s0, scale, acc):
    """acc += half h (128 weights) of the Q6_K block at byte o, times activation blocks s0..s0+3.
    Byte l of ql and qh feeds weights l, l + 32, l + 64, l + 96 (dequantize_row_q6_K); split by
    words, the even bytes' fields sit in the low half of each word and the odd bytes' in the high
    half. madd lanes 0-3 cover weights 0-15 of a block and lanes 4-7 weights 16-31, which are the
    two 16-weight sub-blocks, so `lane_pairs` gives each lane its sub-block's scale."""
    a = load_w16(w, r, o + 64 * h)
    c = load_w16(w, r, o + 64 * h + 32)
    hb = load_w16(w, r, o + 128 + 32 * h)
    xo = 32 * s0
    even = vadd(vand(a, 0x0F), vshl(vand(hb, 0x03), 4))
    odd = vadd(vand(vshr(a, 8), 0x0F), vand(vshr(hb, 4), 0x30))
    p = vadd(madd(even, load_i16(xq, xo)), madd(odd, load_i16(xq, xo + 16)))
    acc = fma_vec(p, f32x8_mul(lane_pairs(scale, 0), ld(xd, s0)), acc)
    even = vadd(vand(c, 0x0F), vshl(vand(hb, 0x0C), 2))
    odd = vadd(vand(vshr(c, 8), 0x0F), vand(vshr(hb, 6), 0x30))
    p = vadd(madd(even, load_i16(xq, xo + 32)), madd(odd, load_i16(xq, xo + 48)))
    acc = fma_vec(p, f32x8_mul(lane_pairs(scale, 1), ld(xd, s0 + 1)), acc)
    even = vadd(vand(vshr(a, 4), 0x0F), vand(hb, 0x30))
    odd = vadd(vshr(a, 12), vand(vshr(hb, 8), 0x30))
    p = vadd(madd(even, load_i16(xq, xo + 64)), madd(odd, load_i16(xq, xo + 80)))
    acc = fma_vec(p, f32x8_mul(lane_pairs(scale, 2), ld(xd, s0 + 2)), acc)
    even = vadd(vand(vshr(c, 4), 0x0F), vand(vshr(hb, 2), 0x30))
    odd = vadd(vshr(c, 12), vand(vshr(hb, 10), 0x30))
    p = vadd(madd(even, load_i16(xq, xo + 96)), madd(odd, load_i16(xq, xo + 112)))
    return fma_vec(p, f32x8_mul(lane_pairs(scale, 3), ld(xd, s0 + 3)), acc)


@njit(inline="always")
def q6_k_scales(w, r, o):
    """The Q6_K block at o's d and its 16 scales times d (two F32x8, one per half)."""
    d = f16_pair(w, r, o + 206)[1]  # the fp16 at 208, loaded with the last two scales
    s0 = f32x8_mul(sbytes_f32(load_u32(w, r, o + 192), load_u32(w, r, o + 196)), d)
    s1 = f32x8_mul(sbytes_f32(load_u32(w, r, o + 200), load_u32(w, r, o + 204)), d)
    return d, s0, s1


@njit(inline="always")
def q6_k_offset(s0, s1, xs, b, offset):
    """The offset accumulator plus block b's scales times its 16-weight sums of x."""
    return f32x8_fma(s1, load_f32(xs, 16 * b + 8), f32x8_fma(s0, load_f32(xs, 16 * b), offset))


@njit(inline="always")
def _q6_k_block_head(w, r, o, b, xs, offset, ahead):
    """Prefetch ahead, then block b's 16 scales times d (two F32x8, one per half) and the
    offset accumulator with their sum(x_s) terms added."""
    for k in range(4):
        prefetch(w, r, o + ahead + 64 * k)
    _, s0, s1 = q6_k_scales(w, r, o)
    return s0, s1, q6_k_offset(s0, s1, xs, b, offset)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def matvec_q6_k(w, x, y):
    # q = ql | qh << 4 in 0..63; the -32 offset comes out as 32 * sum_s d * sc_s * sum(x_s)
    rows, nb = w.shape[0], w.shape[1] // 210
    xq, xd = quantize_i16(x)
    xs = _block_sums(x, 16)
    for r in prange(rows):
        acc0, acc1, offset = f32x8_zero(), f32x8_zero(), f32x8_zero()
        for b in range(nb):
            o = 210 * b
            s0, s1, offset = _q6_k_block_head(w, r, o, b, xs, offset, PREFETCH)
            acc0 = _q6_k_half(w, r, o, 0, xq, xd, 8 * b, s0, acc0)
            acc1 = _q6_k_half(w, r, o, 1, xq, xd, 8 * b + 4, s1, acc1)
        y[r] = f32x8_sum(f32x8_add(acc0, acc1)) - np.float32(32) * f32x8_sum(offset)


MATVEC_KERNELS = {
    GGMLType.F16: matvec_f16,
    GGMLType.BF16: matvec_bf16,
    GGMLType.Q4_0: matvec_q4_0_zmm if HAS_AVX512BW else matvec_q4_0,
    GGMLType.Q4_1: matvec_q4_1_zmm if HAS_AVX512BW else matvec_q4_1,
    GGMLType.Q5_0: matvec_q5_0_zmm if HAS_AVX512BW else matvec_q5_0,
    GGMLType.Q5_1: matvec_q5_1,
    GGMLType.Q8_0: matvec_q8_0_zmm if HAS_AVX512BW else matvec_q8_0,
    GGMLType.Q2_K: matvec_q2_k,
    GGMLType.Q3_K: matvec_q3_k,
    GGMLType.Q4_K: matvec_q4_k_zmm if HAS_AVX512BW else matvec_q4_k,
    GGMLType.Q5_K: matvec_q5_k,
    GGMLType.Q6_K: matvec_q6_k_zmm if HAS_AVX512BW else matvec_q6_k,
    GGMLType.IQ4_NL: matvec_iq4_nl_zmm if HAS_AVX512BW else matvec_iq4_nl,
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
