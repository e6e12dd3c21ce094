"""Prompt-time kernels: Y[n_tokens, rows] = X[n_tokens, n] @ W[rows, n]^T, W read in place.

Large batches of the integer types on a CPU with AVX-512 VNNI go to kernels/vnni.py (int16
products with vpdpwssd: twice the multiply-adds per instruction of fp32); on AVX2 from the token
counts of its `AVX2_FROM_TOKENS` (vpmaddwd, ~1.4x the FMA rate). Other large batches
dequantize a tile of rows into a float32 scratch buffer (the numba decoders of
kernels/dequant.py, parallel over rows) and hand it to BLAS sgemm, tile by tile so the scratch
stays modest (llama.cpp's CPU backend instead converts X to the weight's vec_dot type; BLAS on
float32 is what numpy does best). Small batches (up to `SMALL_BATCH` tokens: the server's batched
decode, one token per sequence) read each weight row once for all tokens, in the `multi_*`
kernels; which path runs is chosen per shape by `SMALL_BATCH`, measured with
bench/bench_kernels.py.

Small-batch integer kernels (Q8_0, Q5_0, IQ4_NL, Q4_0, Q4_1, Q4_K, Q6_K) use the int16
activations of kernels/matvec.py: the X rows are quantized once per call and laid out in groups
of tokens (`_grouped_activations`); each weight row has its per-block float scales (and for Q4_1
/ Q4_K min terms) decoded once (`_block_scales`), then every 32-weight block is widened to int16
in registers (`_block_halves`) and multiplied with two pairs of tokens at a time (`_pair_dot`: a
vpmaddwd and three vpdpwssd, one conversion and one FMA per block and pair). Where the CPU has
AVX-512BW, from a few tokens on (`ZMM_KERNELS`), the `*_zmm` twins put four tokens in a 512-bit
vector and take two rows and two quads of tokens a pass (`_row_quads`): half the multiplies and
half the activation loads, the same sums bit for bit. The other types decode each row to float32
once (`_float_rows`) and take plain float dot products. Scratch is allocated once per chunk of
rows, never per row. Where the CPU has AVX-512BW, Q4_K and Q6_K take kernels/kquant_tokens.py
instead (below the zmm twins' start on full-width CPUs): the one-token byte-pair kernels over up
to four tokens a pass, each token's results bit for bit its one-token decode's.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import njit, prange

from ..format.constants import GGMLType
from .dequant import (FASTMATH, ROW_KERNELS, call_kernel, dq_bf16, dq_f16, dq_iq4_xs, dq_q2_k,
                      dq_q3_k, dq_q5_1, dq_q5_k, ld, ld2, output_array, row_length,
                      weight_view)
from .elementwise import gated_1d
from .float_tiles import float_tiles, tiles_fit
from .kquant_tokens import tokens_q4_k, tokens_q6_k
from .matvec import (BYTE_QMAX, QMAX, _block_amax, _block_sums, _k4_scales_mins, iq4_nl_bytes,
                     matvec, q5_0_bytes)
from .simd import (HALF_WIDTH_512, HAS_AVX512BW, HAS_VNNI, concat, dpwssd, f16_pair, f32x8_abs,
                   f32x8_add, f32x8_fma, f32x8_half_sums, f32x8_hmax, f32x8_max, f32x8_mul,
                   f32x8_splat, f32x8_sum, f32x8_zero, f32x16_halves, f32x16_scaled, f32x16_zero,
                   fma_vec, hi_lo, i16_splats, i8_scale_pairs, lane_rotations, load_f32,
                   load_f32_bytes, load_f32_even, load_f32_odd, load_i8_words, load_i16,
                   load_i16x32, load_nibble_words, load_w16, madd, prefetch, store_f32,
                   store_rounded_i16, vadd, vand, vmul, vsar, vshl, vshr, vsub)
from .threading_layer import NOGIL
from .vnni import vnni_enabled, vnni_matmul, vnni_supports

# bytes ahead in each row's stream, the value of matvec.PREFETCH; a constant of this file because
# numba's cache of these kernels is keyed on this file only and would keep an imported old value
PREFETCH = 8192
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
# With the VNNI prompt kernel and the zmm multi_* kernels (every VNNI CPU has AVX-512BW) the
# crossovers move (Zen 5, 1 thread, Gemma 3 / SmolLM2 / Qwen2.5-Coder / Qwen2.5-1.5B layers: Q8_0
# and Q5_0 about 56 tokens, Q4_K 32-40, Q4_1 about 32, Q6_K 20-24)
SMALL_BATCH_VNNI = {GGMLType.Q4_K: 32, GGMLType.Q6_K: 20, GGMLType.Q8_0: 56, GGMLType.Q5_0: 56,
                    GGMLType.IQ4_NL: 48, GGMLType.Q4_0: 48, GGMLType.Q4_1: 28,
                    GGMLType.F16: 40, GGMLType.BF16: 40}
# (F16 / BF16: float_tiles' kernel, every VNNI CPU having AVX-512BW: on Zen 4 an F16
# Qwen2.5-Coder decode of 12 to 32 rows took 126-330 ms there against the integer GEMM's 262-390,
# equal near 48)
# Zen 4 (512-bit instructions in two halves, so the zmm twins below are off and the VNNI GEMM
# gains sooner): the crossovers measured there on the same models' layers, 1 thread, with
# kernels/kquant_tokens.py for the K-quants (docs/PERFORMANCE.md, 2026-12-07 (night))
SMALL_BATCH_VNNI_HALF_WIDTH = {GGMLType.Q4_K: 12, GGMLType.Q6_K: 16, GGMLType.Q8_0: 24,
                               GGMLType.Q5_0: 14, GGMLType.IQ4_NL: 14, GGMLType.Q4_0: 14,
                               GGMLType.Q4_1: 12, GGMLType.F16: 40, GGMLType.BF16: 40}


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
def multi_f16(w, X, Y, chunks):  # float_tiles' row x token tiles where rows are whole vectors
    if tiles_fit(w, X, Y):
        float_tiles(w, X, Y, chunks, False)
    else:
        _float_rows(w, X, Y, chunks, dq_f16)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=MULTI_FASTMATH)
def multi_bf16(w, X, Y, chunks):
    if tiles_fit(w, X, Y):
        float_tiles(w, X, Y, chunks, True)
    else:
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
def _quantize_block_into(xp, i, x, o, natural, width, slot, super_amax):
    """One block x[o:o + 32] quantized as quantize_i16 does into row i of xp, chunk k (of
    `_block_chunks`) at word width * ((k - slot) mod 4) + 8 * slot: the token in `slot` of a
    pair (width 16) or a quad (width 32), so that over the four vectors every slot meets all 32
    weights. With `super_amax` not negative (NaN included), the block takes its super-block's
    scale as matvec.quantize_byte_pairs does: max |x| of the 256 over BYTE_QMAX. Returns the
    block's scale."""
    c0, c1, c2, c3 = _block_chunks(x, o, natural)
    qmax, amax = BYTE_QMAX, super_amax
    if super_amax < 0:
        qmax = QMAX
        amax = f32x8_hmax(f32x8_max(f32x8_max(f32x8_abs(c0), f32x8_abs(c1)),
                                    f32x8_max(f32x8_abs(c2), f32x8_abs(c3))))
        total = f32x8_sum(f32x8_add(f32x8_add(c0, c1), f32x8_add(c2, c3)))
        if total != total:  # a NaN (or inf - inf) is kept, as in quantize_i16
            amax = np.float32(np.nan)
    inv = qmax / amax if amax > 0 else np.float32(0)
    for k, c in enumerate((c0, c1, c2, c3)):
        store_rounded_i16(xp, i, width * ((k + 4 - slot) % 4) + 8 * slot, f32x8_mul(c, inv))
    return amax / qmax


# A plain function, not inlined: one compiled copy serves every multi_* kernel (inlined, each
# kernel's parfor passes also went over it, ~0.5-1 s of compiling per kernel).
@njit(nogil=NOGIL, fastmath=FASTMATH)
def _grouped_activations(X, natural, sums, size, per_256):
    """The rows of X [T, n] quantized as matvec.quantize_i16 does (with `per_256`, one scale per
    256 as matvec.quantize_byte_pairs does), in groups of `size` tokens (2:
    the pairs of `_pair_dot`, 4: the quads of `_quad_dot`; missing tokens zero). Per group g and
    block b, row nb g + b of xg int16 holds four vectors of 8 * size words; slot j (8 words) of
    vector k is token size g + j's chunk (k + j) mod 4 of the block, so that over the four
    vectors every slot meets all 32 weights once. The chunks are the block's activations in
    `_block_chunks`' order: at even positions (E), then odd ones (O), the order `_even_odd`
    widens most kinds' bytes in, or with `natural` (Q8_0's in-order bytes) in order. A pair's
    four vectors: [E_t[0:8] E_u[8:16] | E_t[8:16] O_u[0:8] | O_t[0:8] O_u[8:16] | O_t[8:16]
    E_u[0:8]]. xd float32 [4 size] per group and block: token j's scale in lanes 4j .. 4j + 3.
    With `sums`, also the block sums xs float32 [T * nbp] (nbp: blocks rounded up to a multiple
    of 8, zero padding) for the min terms."""
    T, n = X.shape
    nb = n // 32
    nbp = (nb + 7) // 8 * 8
    groups = (T + size - 1) // size
    xg = np.zeros((groups * nb, 32 * size), np.int16)
    xd = np.zeros(groups * nb * 4 * size, np.float32)
    xs = np.zeros(T * nbp if sums else 0, np.float32)
    for t in range(T):
        x = X[t]
        if sums:
            xs[nbp * t : nbp * t + nb] = _block_sums(x, 32)
        g, j = t // size, t % size
        super_amax = np.float32(-1)
        for b in range(nb):
            i = nb * g + b
            if per_256 and b % 8 == 0:
                super_amax = _block_amax(x, 32 * b, 256)
            d = _quantize_block_into(xg, i, x, 32 * b, natural, 8 * size, j, super_amax)
            for e in range(4):
                xd[4 * size * i + 4 * j + e] = d
    return xg.reshape(-1), xd, xs, nbp


@njit(inline="always")
def _pair_dot(v, xp, i, s, acc):
    """acc + one block's dot products with a pair of tokens, (t's in lanes 0-3, u's in lanes 4-7)
    times the scales s; v: the block's four weight vectors from `_block_quants`, matching the
    four quarter-vectors of the pair's activations."""
    m = madd(v[0], load_i16(xp, i))
    m = dpwssd(m, v[1], load_i16(xp, i + 16))
    m = dpwssd(m, v[2], load_i16(xp, i + 32))
    m = dpwssd(m, v[3], load_i16(xp, i + 48))
    return fma_vec(m, s, acc)


@njit(inline="always")
def _block_halves(w, r, b, kind, gs):
    """Block b (32 weights) of row r as two I16x16 in the order of its activations: Q8_0 and the
    Q6_K bytes repack in byte order (bytes 0-15, 16-31, sign-extended from memory: vpmovsxbw),
    the other kinds at even and odd positions (`_even_odd`)."""
    if kind == KIND_Q8_0:
        o = 34 * b + 2
        return load_i8_words(w, r, o), load_i8_words(w, r, o + 16)
    if kind == KIND_Q6_K_BYTES:  # the halves times their scales (|sc (q - 32)| <= 4096)
        return (vmul(load_i8_words(w, r, 32 * b), gs[0]),
                vmul(load_i8_words(w, r, 32 * b + 16), gs[1]))
    return _even_odd(w, r, b, kind, gs)


@njit(inline="always")
def _block_quants(w, r, b, kind, gs):
    """Block b as the four I16x16 that `_pair_dot` multiplies with a pair's four activation
    quarter-vectors: the halves, and each with the other's half swapped across (vperm2i128; for
    Q8_0 20% faster at 4 tokens than shifting even and odd bytes apart)."""
    v1, v3 = _block_halves(w, r, b, kind, gs)
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


# Each parallel kernel below is a prange over row chunks whose body is one call of a plain
# (serial) njit function of its kind (`_q8_0_rows` ...): numba then types and lowers the long
# inlined body once, outside its parfor passes (which copy, fuse and retype a prange's whole
# body), and a kernel compiles in ~60% of the time. One module-level function per kind, never a
# closure from a factory: numba names compiled functions by qualified name, and cached kernels
# from different processes holding same-named callees of different kinds would be merged as one
# when both are loaded.
@njit(inline="always")
def _int_row_range(w, xp, xd2, xs, nbp, Y, lo, hi, nb, npairs, kind):
    """Rows lo..hi of `_int_rows` (one parallel chunk's work)."""
    has_mins = kind == KIND_Q4_1 or kind == KIND_Q4_K
    ws = np.zeros(nbp, np.float32)  # per block: the scale, the min term (zero padding)
    wm = np.zeros(nbp, np.float32)
    for r in range(lo, hi):
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
            _add_mins(Y, r, wm, xs, nbp)


@njit(inline="always")
def _per_256(kind):
    """Whether the K-quants' activations take one scale per 256: where one-token decode runs the
    byte-pair kernels (AVX-512BW), so that a step of several rows quantizes as a one-row step
    does (with q8_0 KV caches the difference reached 1.6% of a logit)."""
    return HAS_AVX512BW and (kind == KIND_Q4_K or kind == KIND_Q6_K or kind == KIND_Q6_K_BYTES)


@njit(inline="always")
def _int_rows(w, X, Y, chunks, kind, rows_of_kind):
    """Y = X @ W^T for an integer kind: rows in `chunks` parallel chunks, each row's scales
    decoded once, then its blocks once per two pairs of tokens."""
    has_mins = kind == KIND_Q4_1 or kind == KIND_Q4_K
    natural = kind == KIND_Q8_0 or kind == KIND_Q6_K_BYTES  # bytes in weight order
    xp, xd2, xs, nbp = _grouped_activations(X, natural, has_mins, 2, _per_256(kind))
    rows, nb, npairs = w.shape[0], X.shape[1] // 32, (X.shape[0] + 1) // 2
    for c in prange(chunks):
        rows_of_kind(w, xp, xd2, xs, nbp, Y, c * rows // chunks, (c + 1) * rows // chunks, nb,
                     npairs)


@njit(inline="always")
def _add_mins(Y, r, wm, xs, nbp):
    """Y[t, r] += the min terms of row r (Q4_1 / Q4_K): its per-block mins . token t's block sums."""
    for t in range(Y.shape[0]):
        m = f32x8_zero()
        for k in range(nbp // 8):
            m = f32x8_fma(load_f32(wm, 8 * k), load_f32(xs, nbp * t + 8 * k), m)
        Y[t, r] += f32x8_sum(m)


# ---------------------------------------------- 512-bit: four tokens a vector (AVX-512BW)
# At four tokens and more the ymm kernel above is bound by the two multiply pipes (per block and
# pair of tokens four vpmaddwd, a multiply and an FMA). In zmm one vpdpwssd takes a block's
# 8-weight chunks for four tokens at once, so a block costs four dot products per four tokens
# (and one multiply and one FMA), half the multiplies.


@njit(inline="always")
def _quad_dot(vr, x, s, acc):
    """acc + one block's dot products with a quad of tokens (token j in lanes 4j .. 4j + 3) times
    the scales s: vr the block's weights in its four lane rotations, x the quad's four activation
    vectors (two chains of two, so the sums wait on fewer latencies)."""
    m0 = dpwssd(madd(vr[0], x[0]), vr[1], x[1])
    m1 = dpwssd(madd(vr[2], x[2]), vr[3], x[3])
    return fma_vec(vadd(m0, m1), s, acc)


@njit(inline="always")
def _quad_x(xq, i):
    return (load_i16x32(xq, i), load_i16x32(xq, i + 32), load_i16x32(xq, i + 64),
            load_i16x32(xq, i + 96))


@njit(inline="always")
def _block_rotations(w, r, b, kind, gs):
    h0, h1 = _block_halves(w, r, b, kind, gs)
    return lane_rotations(concat(h0, h1))


@njit(inline="always")
def _row_quads(w, r, kind, nb, ws0, ws1, xq, xd4, q, two_rows, two_quads):
    """Rows r, r + 1 (with `two_rows`) times quads q, q + 1 (with `two_quads`): four F32x16,
    [row][quad], those not asked for zero. Two rows a pass load each activation vector once for
    both; two quads decode each weight block once for both."""
    a00, a01, a10, a11 = f32x16_zero(), f32x16_zero(), f32x16_zero(), f32x16_zero()
    group = _block_group(kind)
    r1 = r + 1 if two_rows else r
    for g in range(nb // group):
        gs0, gs1 = _group_scales(w, r, g, kind), _group_scales(w, r1, g, kind)
        for k in range(group):  # unrolled: constant shifts, shared loads
            b = group * g + k
            v0 = _block_rotations(w, r, b, kind, gs0)
            j = nb * q + b
            x = _quad_x(xq, 128 * j)
            a00 = _quad_dot(v0, x, f32x16_scaled(xd4, 16 * j, ld(ws0, b)), a00)
            if two_rows:
                v1 = _block_rotations(w, r1, b, kind, gs1)
                a10 = _quad_dot(v1, x, f32x16_scaled(xd4, 16 * j, ld(ws1, b)), a10)
            if two_quads:
                j += nb
                x = _quad_x(xq, 128 * j)
                a01 = _quad_dot(v0, x, f32x16_scaled(xd4, 16 * j, ld(ws0, b)), a01)
                if two_rows:
                    a11 = _quad_dot(v1, x, f32x16_scaled(xd4, 16 * j, ld(ws1, b)), a11)
    return a00, a01, a10, a11


@njit(inline="always")
def _store_quad(Y, r, q, acc):
    """Y[4q + j, r] = the sum of acc's lanes 4j .. 4j + 3, for the quad's tokens that exist."""
    lo, hi = f32x16_halves(acc)
    y0, y1 = f32x8_half_sums(lo)
    y2, y3 = f32x8_half_sums(hi)
    t, T = 4 * q, Y.shape[0]
    Y[t, r] = y0
    if t + 1 < T:
        Y[t + 1, r] = y1
    if t + 2 < T:
        Y[t + 2, r] = y2
    if t + 3 < T:
        Y[t + 3, r] = y3


@njit(inline="always")
def _int_row_range_zmm(w, xq, xd4, xs, nbp, Y, lo, end, nb, nq, kind):
    """Rows lo..end of `_int_rows_zmm` (one parallel chunk's work)."""
    has_mins = kind == KIND_Q4_1 or kind == KIND_Q4_K
    ws0, ws1 = np.zeros(nbp, np.float32), np.zeros(nbp, np.float32)
    wm0, wm1 = np.zeros(nbp, np.float32), np.zeros(nbp, np.float32)
    for r in range(lo, end, 2):
        two_rows = r + 1 < end
        _block_scales(w, r, ws0, wm0, kind)
        if two_rows:
            _block_scales(w, r + 1, ws1, wm1, kind)
        for q in range(0, nq, 2):
            two_quads = q + 1 < nq
            a00, a01, a10, a11 = _row_quads(w, r, kind, nb, ws0, ws1, xq, xd4, q,
                                            two_rows, two_quads)
            _store_quad(Y, r, q, a00)
            if two_quads:
                _store_quad(Y, r, q + 1, a01)
            if two_rows:
                _store_quad(Y, r + 1, q, a10)
                if two_quads:
                    _store_quad(Y, r + 1, q + 1, a11)
        if has_mins:
            _add_mins(Y, r, wm0, xs, nbp)
            if two_rows:
                _add_mins(Y, r + 1, wm1, xs, nbp)


@njit(inline="always")
def _int_rows_zmm(w, X, Y, chunks, kind, rows_of_kind):
    """`_int_rows` with four tokens a vector, two rows and two quads a pass."""
    has_mins = kind == KIND_Q4_1 or kind == KIND_Q4_K
    natural = kind == KIND_Q8_0 or kind == KIND_Q6_K_BYTES
    xq, xd4, xs, nbp = _grouped_activations(X, natural, has_mins, 4, _per_256(kind))
    rows, nb, nq = w.shape[0], X.shape[1] // 32, (X.shape[0] + 3) // 4
    for c in prange(chunks):
        rows_of_kind(w, xq, xd4, xs, nbp, Y, c * rows // chunks, (c + 1) * rows // chunks, nb,
                     nq)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q8_0_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q8_0)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q5_0_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q5_0)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _iq4_nl_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_IQ4_NL)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_0_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q4_0)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_1_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q4_1)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_k_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q4_K)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q6_k_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q6_K)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q6_k_bytes_rows(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs):
    _int_row_range(w, xp, xd, xs, nbp, Y, lo, hi, nb, npairs, KIND_Q6_K_BYTES)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q8_0_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_Q8_0)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q5_0_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_Q5_0)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _iq4_nl_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_IQ4_NL)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_0_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_Q4_0)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_1_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_Q4_1)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q4_k_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_Q4_K)


@njit(nogil=NOGIL, fastmath=FASTMATH)
def _q6_k_rows_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq):
    _int_row_range_zmm(w, xq, xd, xs, nbp, Y, lo, hi, nb, nq, KIND_Q6_K)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q8_0(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q8_0, _q8_0_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q5_0(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q5_0, _q5_0_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_iq4_nl(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_IQ4_NL, _iq4_nl_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_0(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q4_0, _q4_0_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_1(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q4_1, _q4_1_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_k(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q4_K, _q4_k_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q6_k(w, X, Y, chunks):
    _int_rows(w, X, Y, chunks, KIND_Q6_K, _q6_k_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q6_k_bytes(w, X, Y, chunks):
    """Q6_K repacked by repack.repack_q6_k_bytes (w: uint8 [rows, 40 * nb])."""
    _int_rows(w, X, Y, chunks, KIND_Q6_K_BYTES, _q6_k_bytes_rows)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q8_0_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_Q8_0, _q8_0_rows_zmm)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q5_0_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_Q5_0, _q5_0_rows_zmm)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_iq4_nl_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_IQ4_NL, _iq4_nl_rows_zmm)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_0_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_Q4_0, _q4_0_rows_zmm)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_1_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_Q4_1, _q4_1_rows_zmm)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q4_k_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_Q4_K, _q4_k_rows_zmm)


@njit(parallel=True, cache=True, nogil=NOGIL, fastmath=FASTMATH)
def multi_q6_k_zmm(w, X, Y, chunks):
    _int_rows_zmm(w, X, Y, chunks, KIND_Q6_K, _q6_k_rows_zmm)


# Where the CPU has AVX-512BW the integer kinds take four tokens a vector from this many tokens
# on (Zen 5, 1 thread, bench/few_token_kernels.py): with fewer, the ymm kernel's pairs waste
# less of a part-filled quad, and Q4_K / Q6_K decode their blocks more cheaply at ymm width.
# Zen 4 runs each 512-bit instruction as two 256-bit halves, and there the ymm kernels are
# faster at 2-8 tokens for every type (1.2-2.3x) and at every count up to the GEMM for Q4_K;
# only Q8_0's twin wins, 1.3x from 16 tokens (docs/PERFORMANCE.md, 2026-12-07). Fewer kernels
# also means less to compile on a fresh machine.
NO_ZMM = (None, 1 << 30)
ZMM_TWINS = {
    GGMLType.Q8_0: multi_q8_0_zmm,
    GGMLType.Q5_0: multi_q5_0_zmm,
    GGMLType.Q4_0: multi_q4_0_zmm,
    GGMLType.Q4_1: multi_q4_1_zmm,
    GGMLType.IQ4_NL: multi_iq4_nl_zmm,
    GGMLType.Q4_K: multi_q4_k_zmm,
    GGMLType.Q6_K: multi_q6_k_zmm,
}
ZMM_FROM_FULL_WIDTH = {GGMLType.Q8_0: 3, GGMLType.Q5_0: 5, GGMLType.Q4_0: 5, GGMLType.Q4_1: 5,
                       GGMLType.IQ4_NL: 5, GGMLType.Q4_K: 8, GGMLType.Q6_K: 8}
ZMM_FROM_HALF_WIDTH = {GGMLType.Q8_0: 16}
ZMM_KERNELS = {t: (ZMM_TWINS[t], start) for t, start in
               (ZMM_FROM_HALF_WIDTH if HALF_WIDTH_512 else ZMM_FROM_FULL_WIDTH).items()} \
    if HAS_AVX512BW else {}

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
if HAS_AVX512BW:
    # the one-token kernels' byte pairs, up to four tokens a pass over a row: each token's result
    # is its one-token decode's, bit for bit, and on Zen 4 1.3-2.5x faster at 2-8 tokens than the
    # int16 kernels (Q4_K rows of 1536: 0.9x at 3-8 tokens)
    MULTI_KERNELS[GGMLType.Q4_K] = tokens_q4_k
    MULTI_KERNELS[GGMLType.Q6_K] = tokens_q6_k


def multi_kernel(ggml_type: GGMLType, n_tokens: int):
    """The small-batch kernel for `n_tokens` rows of X against a `ggml_type` matrix."""
    zmm, zmm_from = ZMM_KERNELS.get(ggml_type, NO_ZMM)
    return zmm if n_tokens >= zmm_from else MULTI_KERNELS[ggml_type]


def small_batch_limit(ggml_type: GGMLType) -> int:
    """Up to this many tokens a matrix of `ggml_type` takes its multi_* kernel."""
    if HAS_VNNI and vnni_enabled() and ggml_type in SMALL_BATCH_VNNI:
        table = SMALL_BATCH_VNNI_HALF_WIDTH if HALF_WIDTH_512 else SMALL_BATCH_VNNI
        return table[ggml_type]
    return SMALL_BATCH_BY_TYPE.get(ggml_type, SMALL_BATCH)


def row_chunks(rows: int) -> int:
    """Row chunks for a multi_* kernel's prange: one per thread (numba splits the range evenly),
    each with its own scratch. From Python: numba.get_num_threads() inside a kernel would stop
    numba caching it."""
    return max(1, min(rows, numba.get_num_threads()))


def matmul(w_blocks: np.ndarray, ggml_type: int, X: np.ndarray,
           out: np.ndarray | None = None, gated: int = -1) -> np.ndarray:
    """Y = X @ W^T, W uint8 [rows, row_bytes] blocks of `ggml_type`: float32 [n_tokens, rows].
    With `gated` (0 SiLU, 1 tanh-GELU), `out` holds a gated FFN's gate projection and gets
    act(gate) * Y: in the integer GEMM's stores, elsewhere after a Y of its own."""
    ggml_type = GGMLType(ggml_type)
    rows, n = w_blocks.shape[0], row_length(w_blocks.shape[1], ggml_type)
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != n:
        raise ValueError(f"X has shape {X.shape}, expected (n_tokens, {n}) for a "
                         f"{ggml_type.name} matrix of {rows} x {n}")
    if gated >= 0 and out is None:
        raise ValueError("a gated matmul takes the gate projection as out")
    out = output_array(out, (X.shape[0], rows))
    if _integer_gemm(ggml_type, X.shape[0], n):
        vnni_matmul(w_blocks, ggml_type, X, out, gated)
    elif gated >= 0:
        gated_1d(out.reshape(-1), matmul(w_blocks, ggml_type, X).reshape(-1), gated)
    elif X.shape[0] == 1:
        matvec(w_blocks, ggml_type, X[0], out[0])
    elif ggml_type == GGMLType.F32:
        np.matmul(X, w_blocks.view(np.float32).T, out=out)
    elif X.shape[0] <= small_batch_limit(ggml_type) and ggml_type in MULTI_KERNELS:
        call_kernel(multi_kernel(ggml_type, X.shape[0]), weight_view(w_blocks, ggml_type), X,
                    out, row_chunks(rows))
    else:
        _tiled(w_blocks, ggml_type, X, out)
    return out


def _integer_gemm(ggml_type: GGMLType, n_tokens: int, n: int) -> bool:
    """Whether `n_tokens` rows against a `ggml_type` matrix take kernels/vnni.py's GEMM: past the
    one-token and few-token kernels, where it is on and has the type."""
    if n_tokens == 1 or ggml_type == GGMLType.F32:
        return False
    if n_tokens <= small_batch_limit(ggml_type) and ggml_type in MULTI_KERNELS:
        return False
    return vnni_enabled() and vnni_supports(ggml_type, n_tokens, n)


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
