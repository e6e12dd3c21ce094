"""Prompt-time kernels: Y[n_tokens, rows] = X[n_tokens, n] @ W[rows, n]^T, W read in place.

Large batches of the integer types on a CPU with AVX-512 VNNI go to kernels/vnni.py (int16
products with vpdpwssd: twice the multiply-adds per instruction of fp32). Other large batches
dequantize a tile of rows into a float32 scratch buffer (the numba decoders of
kernels/dequant.py, parallel over rows) and hand it to BLAS sgemm, tile by tile so the scratch
stays modest (llama.cpp's CPU backend instead converts X to the weight's vec_dot type; BLAS on
float32 is what numpy does best). Small batches (up to `SMALL_BATCH` tokens: the server's batched
decode, one token per sequence) read each weight row once for all tokens, in the `multi_*`
kernels; which path runs is chosen per shape by `SMALL_BATCH`, measured with
bench/bench_kernels.py.

Small-batch integer kernels (Q8_0, Q5_0, IQ4_NL, Q4_0, Q4_1, Q4_K, Q6_K) use the int16
activations of kernels/matvec.py: the X rows are quantized once per call and laid out in pairs of
tokens (`_pair_activations`); each weight row has its per-block float scales (and for Q4_1 / Q4_K
min terms) decoded once (`_block_scales`), then every 32-weight block is widened to int16 in
registers (`_block_quants`) and multiplied with two pairs of tokens at a time (`_pair_dot`: four
vpmaddwd, one conversion and one FMA per block and pair). The other types decode each row to
float32 once (`_float_rows`) and take plain float dot products. Scratch is allocated once per
chunk of rows, never per row.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ..format.constants import GGMLType
from .dequant import (FASTMATH, ROW_KERNELS, call_kernel, dq_bf16, dq_f16, dq_iq4_xs, dq_q2_k,
                      dq_q3_k, dq_q5_1, dq_q5_k, ld, ld2, output_array, row_length,
                      weight_view)
from .matvec import PREFETCH, QMAX, _block_sums, _k4_scales_mins, iq4_nl_bytes, matvec, q5_0_bytes
from .simd import (f16_pair, f32x8_abs, f32x8_add, f32x8_fma, f32x8_half_sums, f32x8_hmax,
                   f32x8_max, f32x8_mul, f32x8_splat, f32x8_sum, f32x8_zero, fma_vec, hi_lo,
                   i16_splats, i8_scale_pairs, load_f32, load_f32_bytes, load_f32_even,
                   load_f32_odd, load_i8_words, load_i16, load_nibble_words, load_w16, madd,
                   prefetch, store_f32, store_rounded_i16, vadd, vand, vmul, vsar, vshl, vshr,
                   vsub)
from .threading_layer import NOGIL
from .vnni import vnni_enabled, vnni_matmul, vnni_supports

MULTI_FASTMATH = {"contract", "reassoc"}  # reassoc lets LLVM vectorise the dot-product reductions
# float32 tile of dequantized rows handed to sgemm. Few, large tiles: with several threads each
# switch between numba's pool and OpenBLAS's (whose idle workers spin ~0.1 s) costs milliseconds.
SCRATCH_BYTES = 16 << 20
SMALL_BATCH = 8  # up to this many tokens the multi_* kernels beat dequantize + sgemm ...
# ... and for the integer kernels up to these (crossovers measured on Gemma 3 270M and
# Qwen2.5-Coder-0.5B layers, 1 thread: Q8_0 between 24 and 32 tokens, Q4_K about 20, Q6_K 12-16,
# Q6_K in bytes (repack.repack_q6_k_bytes) 24-32)
SMALL_BATCH_BY_TYPE = {GGMLType.Q8_0: 24, GGMLType.Q5_0: 16, GGMLType.IQ4_NL: 16,
                       GGMLType.Q4_K: 16, GGMLType.Q6_K: 12}
SMALL_BATCH_Q6_K_BYTES = 24
# With the VNNI prompt kernel the crossovers move (Zen 5, 1 thread, real and synthetic layers)
SMALL_BATCH_VNNI = {GGMLType.Q4_K: 20, GGMLType.Q6_K: 14, GGMLType.Q8_0: 20, GGMLType.Q5_0: 40,
                    GGMLType.IQ4_NL: 28, GGMLType.Q4_0: 28, GGMLType.Q4_1: 20}


# ------------------------------------------------------------- float rows: the other types


@njit(inline="always")
def _float_dots(buf, X, Y, r):
    """Y[t, r] = buf[0] . X[t] for every token t, four tokens per pass over buf."""
    n_tok, n = X.shape
    t = 0
    while t + 4 <= n_tok:
        s0 = s1 = s2 = s3 = np.float32(0)
        for i in range(n):
            v = ld2(buf, 0, i)
            s0 += v * ld2(X, t, i)
            s1 += v * ld2(X, t + 1, i)
            s2 += v * ld2(X, t + 2, i)
            s3 += v * ld2(X, t + 3, i)
        Y[t, r], Y[t + 1, r], Y[t + 2, r], Y[t + 3, r] = s0, s1, s2, s3
        t += 4
    while t < n_tok:
        s = np.float32(0)
        for i in range(n):
            s += ld2(buf, 0, i) * ld2(X, t, i)
        Y[t, r] = s
        t += 1


@njit(inline="always")
def _float_rows(w, X, Y, chunks, decode_row):
    """Y = X @ W^T for the types without integer kernels: each row decoded once into float32
    by `decode_row` (kernels/dequant.py), then dotted with every token."""
    rows = w.shape[0]
    for c in prange(chunks):
        buf = np.empty((1, X.shape[1]), np.float32)  # one decoded row, reused over the chunk
        for r in range(c * rows // chunks, (c + 1) * rows // chunks):
            decode_row(w, r, buf, 0)
            _float_dots(buf, X, Y, r)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_f16(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_f16)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_bf16(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_bf16)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_q5_1(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_q5_1)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_q2_k(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_q2_k)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_q3_k(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_q3_k)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_q5_k(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_q5_k)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_iq4_xs(w, X, Y, chunks):
    _float_rows(w, X, Y, chunks, dq_iq4_xs)


# --------------------------------------- integer rows: int16 activations, vpmaddwd (see top)

# constants once the kernels are inlined
KIND_Q8_0, KIND_Q4_1, KIND_Q4_K, KIND_Q6_K, KIND_Q5_0, KIND_IQ4_NL, KIND_Q4_0 = range(7)
KIND_Q6_K_BYTES = 7  # Q6_K as repack.repack_q6_k_bytes lays it out


@njit(inline="always")
def _block_chunks(x, o, natural):
    """Block x[o:o + 32] as four F32x8 chunks: in order with `natural`, else the 16 values at even
    positions, then the 16 at odd ones (quantize_i16's order)."""
    if natural:
        return load_f32(x, o), load_f32(x, o + 8), load_f32(x, o + 16), load_f32(x, o + 24)
    return load_f32_even(x, o), load_f32_even(x, o + 16), load_f32_odd(x, o), \
        load_f32_odd(x, o + 16)


@njit(inline="always")
def _quantize_block_half(xp, i, x, o, h, natural):
    """Token h's half of one block's four quarter-vectors (row i of xp [pairs * blocks, 64]):
    chunk k of the block goes to quarter (k - h) mod 4, so that over the four quarters the two
    halves meet all 32 weights. Quantized as quantize_i16 does; returns the block's scale."""
    c0, c1, c2, c3 = _block_chunks(x, o, natural)
    amax = f32x8_hmax(f32x8_max(f32x8_max(f32x8_abs(c0), f32x8_abs(c1)),
                                f32x8_max(f32x8_abs(c2), f32x8_abs(c3))))
    total = f32x8_sum(f32x8_add(f32x8_add(c0, c1), f32x8_add(c2, c3)))
    if total != total:  # a NaN (or inf - inf) is kept, as in quantize_i16
        amax = np.float32(np.nan)
    inv = QMAX / amax if amax > 0 else np.float32(0)
    for k, c in enumerate((c0, c1, c2, c3)):
        store_rounded_i16(xp, i, 16 * ((k + 4 - h) % 4) + 8 * h, f32x8_mul(c, inv))
    return amax / QMAX


@njit(inline="always")
def _pair_activations(X, natural, sums):
    """The rows of X [T, n] quantized as matvec.quantize_i16 does, laid out for `_pair_dot`:
    tokens in pairs (t, u) = (2p, 2p + 1), the last one twice for odd T. Per pair and block b,
    xp int16 [64] holds four quarter-vectors, t's words in the low half of each and u's in the
    high half, so that over the four each half meets all 32 weights of the block once:
    [E_t[0:8] E_u[8:16] | E_t[8:16] O_u[0:8] | O_t[0:8] O_u[8:16] | O_t[8:16] E_u[0:8]] (E, O: the
    activations at the block's even and odd positions, the order `_block_quants` widens most
    kinds' bytes in), or with `natural` (Q8_0's in-order bytes) [x_t[0:8] x_u[8:16] |
    x_t[8:16] x_u[16:24] | x_t[16:24] x_u[24:32] | x_t[24:32] x_u[0:8]]; xd2 float32 [8] the
    scales [x_t's] * 4 + [x_u's] * 4. With `sums`, also the block sums xs float32 [T * nbp] (nbp:
    blocks rounded up to a multiple of 8, zero padding) for the min terms."""
    T, n = X.shape
    nb = n // 32
    nbp = (nb + 7) // 8 * 8
    npairs = (T + 1) // 2
    xp = np.empty((npairs * nb, 64), np.int16)
    xd2 = np.empty(npairs * nb * 8, np.float32)
    xs = np.zeros(T * nbp if sums else 0, np.float32)
    for t in range(T):
        x = X[t]
        if sums:
            xs[nbp * t : nbp * t + nb] = _block_sums(x, 32)
        p, hi = t // 2, t % 2
        for k in range(2 - hi if t == T - 1 else 1):  # an odd T's last token fills both halves
            h = hi + k
            for b in range(nb):
                i, j = nb * p + b, 8 * (nb * p + b)
                d = _quantize_block_half(xp, i, x, 32 * b, h, natural)
                for e in range(4):
                    xd2[j + 4 * h + e] = d
    return xp.reshape(-1), xd2, xs, nbp


@njit(inline="always")
def _pair_dot(v, xp, i, s, acc):
    """acc + one block's dot products with a pair of tokens, (t's in lanes 0-3, u's in lanes 4-7)
    times the scales s; v: the block's four weight vectors from `_block_quants`, matching the
    four quarter-vectors of the pair's activations."""
    m0 = madd(v[0], load_i16(xp, i))
    m1 = madd(v[1], load_i16(xp, i + 16))
    m2 = madd(v[2], load_i16(xp, i + 32))
    m3 = madd(v[3], load_i16(xp, i + 48))
    return fma_vec(vadd(vadd(m0, m1), vadd(m2, m3)), s, acc)


@njit(inline="always")
def _block_quants(w, r, b, kind, gs):
    """Block b (32 weights) of row r as the four I16x16 that `_pair_dot` multiplies with a pair's
    four activation quarter-vectors. Q8_0 in byte order: bytes 0-15 and 16-31 sign-extended from
    memory (vpmovsxbw), then 8-23 and 24-31 + 0-7 as their halves swapped across (vperm2i128;
    20% faster at 4 tokens than shifting even and odd bytes apart, llvm-mca's FP1/FP2 pressure
    lower than with a third vpmovsxbw); the other kinds from `_even_odd`."""
    if kind == KIND_Q8_0:
        o = 34 * b + 2
        va, vc = load_i8_words(w, r, o), load_i8_words(w, r, o + 16)
        return va, hi_lo(va, vc), vc, hi_lo(vc, va)
    if kind == KIND_Q6_K_BYTES:  # the halves times their scales (|sc (q - 32)| <= 4096)
        va = vmul(load_i8_words(w, r, 32 * b), gs[0])
        vc = vmul(load_i8_words(w, r, 32 * b + 16), gs[1])
        return va, hi_lo(va, vc), vc, hi_lo(vc, va)
    v1, v3 = _even_odd(w, r, b, kind, gs)
    return v1, hi_lo(v1, v3), v3, hi_lo(v3, v1)


@njit(inline="always")
def _even_odd(w, r, b, kind, gs):
    """Block b (32 weights) of row r as int16 quants at its even and odd positions, the order of
    the activations: (I16x16, I16x16). Q6_K's 16-weight scales and -32 offset are folded in
    (|q - 32| <= 32, |scale| <= 128: the products fit int16, four of them times int16 activations
    an int32 madd lane)."""
    if kind == KIND_Q5_0:  # 256 (q - 16): see matvec._even_odd; _block_scales divides by 256
        v = q5_0_bytes(w, r, 22 * b)
        return vshl(v, 8), vand(v, -256)
    if kind == KIND_IQ4_NL:
        v = iq4_nl_bytes(w, r, 18 * b)  # int8 grid values
        return vsar(vshl(v, 8), 8), vsar(v, 8)
    if kind == KIND_Q4_1:
        v = load_nibble_words(w, r, 20 * b + 4)  # see matvec._row_words
        return vand(v, 15), vand(vshr(v, 8), 15)
    if kind == KIND_Q4_0:  # the nibbles as Q4_1's, less their offset of 8
        v = load_nibble_words(w, r, 18 * b + 2)
        return vsub(vand(v, 15), 8), vsub(vand(vshr(v, 8), 15), 8)
    if kind == KIND_Q4_K:
        # 32 bytes per pair of sub-blocks: low nibbles are sub-block 2j, high ones 2j + 1
        v = load_w16(w, r, 144 * (b >> 3) + 16 + 32 * ((b >> 1) & 3))
        sh = 4 * (b & 1)
        return vand(vshr(v, sh), 15), vand(vshr(v, sh + 8), 15)
    # Q6_K (dequantize_row_q6_K): in half h, block k takes the low (k < 2) or high nibbles of
    # ql[32 (k & 1):][:32] and bits 2k, 2k + 1 of qh[:32]; see also matvec._q6_k_half
    o, h, k = 210 * (b >> 3), (b >> 2) & 1, b & 3
    q = load_w16(w, r, o + 64 * h + 32 * (k & 1))
    hb = load_w16(w, r, o + 128 + 32 * h)
    sq, sh = 4 * (k >> 1), 2 * k
    even = vadd(vand(vshr(q, sq), 0x0F), vshl(vand(vshr(hb, sh), 3), 4))
    odd = vadd(vand(vshr(q, sq + 8), 0x0F), vshl(vand(vshr(hb, sh + 8), 3), 4))
    scale = gs[k]  # the scales of block b's two halves, from _group_scales
    return vmul(vsub(even, 32), scale), vmul(vsub(odd, 32), scale)


@njit(inline="always")
def _block_group(kind):
    """Blocks decoded together: a K-quant's neighbouring blocks share their loads (Q4_K: the low
    and high nibbles of 32 bytes; Q6_K: four blocks, one qh vector) and, with the block index
    known modulo the group, take constant shifts."""
    return 4 if kind == KIND_Q6_K else (2 if kind == KIND_Q4_K else 1)


@njit(inline="always")
def _group_scales(w, r, g, kind):
    """Q6_K: the int8 scales of group g's four blocks (the half g & 1 of super-block g >> 1), as
    `_block_quants` multiplies them in; the other kinds ignore it (a load LLVM drops)."""
    if kind == KIND_Q6_K_BYTES:  # block g's two int16 scales
        return i16_splats(w, r, 32 * (w.shape[1] // 40) + 4 * g)
    o = 210 * (g >> 1) + 192 + 8 * (g & 1) if kind == KIND_Q6_K else 0
    return i8_scale_pairs(w, r, o)


@njit(inline="always")
def _block_scales(w, r, ws, wm, kind):
    """Row r's float scale per 32-weight block into ws and, for Q4_1 / Q4_K, its min term per
    block into wm (y = sum_b ws_b * (q . x)_b + wm_b * sum(x_b)); prefetches the row stream."""
    if kind == KIND_Q8_0 or kind == KIND_Q5_0 or kind == KIND_IQ4_NL or kind == KIND_Q4_0:
        size = 34 if kind == KIND_Q8_0 else (22 if kind == KIND_Q5_0 else 18)
        for b in range(w.shape[1] // size):
            prefetch(w, r, size * b + PREFETCH)
            ws[b] = f16_pair(w, r, size * b)[0]  # a 32-bit load: d and the next two bytes
            if kind == KIND_Q5_0:
                ws[b] *= np.float32(1 / 256)
    elif kind == KIND_Q4_1:
        for b in range(w.shape[1] // 20):
            prefetch(w, r, 20 * b + PREFETCH)
            ws[b], wm[b] = f16_pair(w, r, 20 * b)
    elif kind == KIND_Q4_K:
        for sb in range(w.shape[1] // 144):
            o = 144 * sb
            for k in range(3):
                prefetch(w, r, o + PREFETCH + 64 * k)
            d, dmin = f16_pair(w, r, o)
            sc, m = _k4_scales_mins(w, r, o + 4)
            store_f32(ws, 8 * sb, f32x8_mul(sc, d))
            store_f32(wm, 8 * sb, f32x8_mul(m, -dmin))
    elif kind == KIND_Q6_K_BYTES:
        nb = w.shape[1] // 40
        for o in range(0, 40 * nb, 64):
            prefetch(w, r, o + PREFETCH)
        for k in range(nb // 8):
            store_f32(ws, 8 * k, load_f32_bytes(w, r, 36 * nb + 32 * k))
    else:
        for sb in range(w.shape[1] // 210):
            o = 210 * sb
            for k in range(4):
                prefetch(w, r, o + PREFETCH + 64 * k)
            store_f32(ws, 8 * sb, f32x8_splat(f16_pair(w, r, o + 206)[1]))


@njit(inline="always")
def _two_pairs(w, r, kind, nb, ws, xp, xd2, p0, p1):
    """The dot products of row r with pairs p0 and p1 (four tokens): two F32x8 (see _pair_dot)."""
    a0, a1 = f32x8_zero(), f32x8_zero()
    group = _block_group(kind)
    for g in range(nb // group):
        gs = _group_scales(w, r, g, kind)
        for k in range(group):  # unrolled: constant shifts, shared loads
            b = group * g + k
            v = _block_quants(w, r, b, kind, gs)
            s = f32x8_splat(ld(ws, b))
            j0, j1 = nb * p0 + b, nb * p1 + b
            a0 = _pair_dot(v, xp, 64 * j0, f32x8_mul(s, load_f32(xd2, 8 * j0)), a0)
            a1 = _pair_dot(v, xp, 64 * j1, f32x8_mul(s, load_f32(xd2, 8 * j1)), a1)
    return a0, a1


@njit(inline="always")
def _one_pair(w, r, kind, nb, ws, xp, xd2, p0):
    a0 = f32x8_zero()
    group = _block_group(kind)
    for g in range(nb // group):
        gs = _group_scales(w, r, g, kind)
        for k in range(group):
            b = group * g + k
            v = _block_quants(w, r, b, kind, gs)
            j0 = nb * p0 + b
            s = f32x8_mul(load_f32(xd2, 8 * j0), ld(ws, b))
            a0 = _pair_dot(v, xp, 64 * j0, s, a0)
    return a0


@njit(inline="always")
def _store_pair(Y, r, p, acc):
    """Y[2p, r], Y[2p + 1, r] = the lane sums of acc's halves (an odd T's last pair: one)."""
    y0, y1 = f32x8_half_sums(acc)
    Y[2 * p, r] = y0
    if 2 * p + 1 < Y.shape[0]:
        Y[2 * p + 1, r] = y1


@njit(inline="always")
def _int_rows(w, X, Y, chunks, kind):
    """Y = X @ W^T for an integer kind: rows in `chunks` parallel chunks, each row's scales
    decoded once, then its blocks once per two pairs of tokens."""
    has_mins = kind == KIND_Q4_1 or kind == KIND_Q4_K
    natural = kind == KIND_Q8_0 or kind == KIND_Q6_K_BYTES  # bytes in weight order
    xp, xd2, xs, nbp = _pair_activations(X, natural, has_mins)
    rows, T, nb = w.shape[0], X.shape[0], X.shape[1] // 32
    npairs = (T + 1) // 2
    for c in prange(chunks):
        ws = np.zeros(nbp, np.float32)  # per block: the scale, the min term (zero padding)
        wm = np.zeros(nbp, np.float32)
        for r in range(c * rows // chunks, (c + 1) * rows // chunks):
            _block_scales(w, r, ws, wm, kind)
            p = 0
            while p + 2 <= npairs:
                a0, a1 = _two_pairs(w, r, kind, nb, ws, xp, xd2, p, p + 1)
                _store_pair(Y, r, p, a0)
                _store_pair(Y, r, p + 1, a1)
                p += 2
            if p < npairs:
                _store_pair(Y, r, p, _one_pair(w, r, kind, nb, ws, xp, xd2, p))
            if has_mins:
                for t in range(T):
                    m = f32x8_zero()
                    for k in range(nbp // 8):
                        m = f32x8_fma(load_f32(wm, 8 * k), load_f32(xs, nbp * t + 8 * k), m)
                    Y[t, r] += f32x8_sum(m)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q8_0(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q8_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q5_0(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q5_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_iq4_nl(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_IQ4_NL)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_0(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q4_0)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_1(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q4_1)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_k(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q4_K)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q6_k(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q6_K)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q6_k_bytes(w, X, Y, chunks):
    """Q6_K repacked by repack.repack_q6_k_bytes (w: uint8 [rows, 40 * nb])."""
    _int_rows(w, X, Y, chunks, KIND_Q6_K_BYTES)


MULTI_KERNELS = {
    GGMLType.F16: multi_f16,
    GGMLType.BF16: multi_bf16,
    GGMLType.Q4_0: multi_q4_0,
    GGMLType.Q4_1: multi_q4_1,
    GGMLType.Q5_0: multi_q5_0,
    GGMLType.Q5_1: multi_q5_1,
    GGMLType.Q8_0: multi_q8_0,
    GGMLType.Q2_K: multi_q2_k,
    GGMLType.Q3_K: multi_q3_k,
    GGMLType.Q4_K: multi_q4_k,
    GGMLType.Q5_K: multi_q5_k,
    GGMLType.Q6_K: multi_q6_k,
    GGMLType.IQ4_NL: multi_iq4_nl,
    GGMLType.IQ4_XS: multi_iq4_xs,
}


def small_batch_limit(ggml_type: GGMLType) -> int:
    """Up to this many tokens a matrix of `ggml_type` takes its multi_* kernel."""
    if vnni_enabled() and ggml_type in SMALL_BATCH_VNNI:
        return SMALL_BATCH_VNNI[ggml_type]
    return SMALL_BATCH_BY_TYPE.get(ggml_type, SMALL_BATCH)


def row_chunks(rows: int) -> int:
    """Row chunks for a multi_* kernel's prange: one per thread (numba splits the range evenly),
    each with its own scratch. From Python: numba.get_num_threads() inside a kernel would stop
    numba caching it."""
    return max(1, min(rows, numba.get_num_threads()))


def matmul(w_blocks: np.ndarray, ggml_type: int, X: np.ndarray,
           out: np.ndarray | None = None) -> np.ndarray:
    """Y = X @ W^T, W uint8 [rows, row_bytes] blocks of `ggml_type`: float32 [n_tokens, rows]."""
    ggml_type = GGMLType(ggml_type)
    rows, n = w_blocks.shape[0], row_length(w_blocks.shape[1], ggml_type)
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != n:
        raise ValueError(f"X has shape {X.shape}, expected (n_tokens, {n}) for a "
                         f"{ggml_type.name} matrix of {rows} x {n}")
    out = output_array(out, (X.shape[0], rows))
    if X.shape[0] == 1:
        matvec(w_blocks, ggml_type, X[0], out[0])
    elif ggml_type == GGMLType.F32:
        np.matmul(X, w_blocks.view(np.float32).T, out=out)
    elif X.shape[0] <= small_batch_limit(ggml_type) and ggml_type in MULTI_KERNELS:
        call_kernel(MULTI_KERNELS[ggml_type], weight_view(w_blocks, ggml_type), X, out,
                    row_chunks(rows))
    elif vnni_enabled() and vnni_supports(ggml_type):
        vnni_matmul(w_blocks, ggml_type, X, out)
    else:
        _tiled(w_blocks, ggml_type, X, out)
    return out


def _tiled(w_blocks: np.ndarray, ggml_type: GGMLType, X: np.ndarray, out: np.ndarray) -> None:
    """Dequantize `tile` rows at a time into scratch and multiply with sgemm."""
    if ggml_type not in ROW_KERNELS:
        raise NotImplementedError(f"no CPU matmul kernel for tensor type {ggml_type.name}")
    rows, n = out.shape[1], X.shape[1]
    tile = min(rows, max(64, SCRATCH_BYTES // (4 * n) // 16 * 16))
    scratch = np.empty((tile, n), np.float32)  # [tile rows, n]
    ids = np.arange(rows, dtype=np.int64)
    w, kernel = weight_view(w_blocks, ggml_type), ROW_KERNELS[ggml_type]
    for r0 in range(0, rows, tile):
        r1 = min(rows, r0 + tile)
        part = scratch[: r1 - r0]
        call_kernel(kernel, w, ids[r0:r1], part)
        np.matmul(X, part.T, out=out[:, r0:r1])
