"""Prompt-time matmul on integer SIMD: int16 weights x int16 activations, with vpdpwssd on
AVX-512 VNNI, or vpmaddwd + vpaddd on AVX2.

Y[t, r] = sum over blocks b of  ws[r, b] * xs[t, b] * (q[r, b] . xq[t, b])  -  sum of wm * xsum

where each weight block is small integers q with a float scale ws (and for Q4_K / Q4_1 mins
wm, one per `sub` values), and the activations are quantized per block to int16 with a bound
`qmax` that keeps each block's int32 sum from overflowing (`Unpacker.qmax`). The 32-weight types
keep the GGUF's blocks (qmax 32767, relative step ~1.5e-5 of the block's largest value). The
K-quants fold their integer sub-block scales into q, so their blocks are 256 (Q4_K, qmax 8876)
and 64 (Q6_K, qmax 8191) long: the int32 sums are converted 8x / 4x less often. F16 and BF16
matrices (vision towers, whisper, F16 conversions) have their weights quantized here per block
of 32 as the activations are (`_ints_of_floats`; on AVX-512 VNNI only): a mean KLD of 6e-7 to
the float32 sgemm on an F16 Qwen2.5-Coder-0.5B.
One vpdpwssd multiplies 32 int16 pairs (16 rows x 2 k) and adds them to int32 lanes, twice
the multiply-adds of an fp32 FMA, and the products are exact: on a Zen 5 core whole layers run
1.3-1.7x faster than OpenBLAS's AVX-512 sgemm on the dequantized rows (the path everywhere
else, kernels/matmul.py).

Layout (BLIS-like): a panel of rows is unpacked once into int16 pairs, two strips of 16 rows
interleaved per strip pair, [strip pair][k pair][2][16 lanes] (`pack_*`); the activations into
[token group of 6][k pair][6] (`_quantize_activations`). The micro-kernel (`_micro_kernel_factory`,
LLVM IR written here) holds 2 strips x 6 tokens of int32 accumulators and their float sums in 24
zmm registers; per block it converts the int sums and applies both scales, then the min terms.
K is walked in chunks of `KC` so that a strip pair's chunk stays in L1 and the activations'
chunk in L2 while every token group passes over it.

On AVX2 (no VNNI) the tile is 2 x 8 rows by 3 tokens in ymm, and a multiply takes 16 products,
as an fp32 FMA's 8 multiply-adds take two: on a Zen 3 core vpmaddwd + vpaddd peak at ~1.4x the
FMA rate, and whole layers run 1.05-1.2x faster than OpenBLAS's sgemm on the dequantized rows
from the token counts of `AVX2_FROM_TOKENS`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..format.constants import GGMLType
from .dequant import IQ4_NL_GRID, bits_to_f32, f16_at, k4_scale_min, ld2, st2
from .elementwise import logistic_times1, logistic_times8, logistic_times_ir
from .matvec import QMAX
from .simd import (HAS_AVX2, HAS_VNNI, f32x8_abs, f32x8_add, f32x8_hmax, f32x8_max, f32x8_mul,
                   f32x8_rint, f32x8_splat, f32x8_sum, f32x8_zero, load_row8,
                   store_rounded_i16, store_row8)
from .threading_layer import NOGIL

# LLAMACPY_VNNI=0 turns the path off (to compare it with dequantize + sgemm)
AVAILABLE = HAS_VNNI or HAS_AVX2
ENABLED = AVAILABLE and os.environ.get("LLAMACPY_VNNI", "1") != "0"

# micro-kernel tile: 2 x 16 rows by 6 tokens in zmm (32 registers: 12 int32 and 12 float sums);
# on AVX2, 2 x 8 rows by 3 tokens in ymm (16 registers: 6 + 6, two weight vectors, a broadcast
# and vpmaddwd's product)
STRIPS, TOKENS, LANES = (2, 6, 16) if HAS_VNNI else (2, 3, 8)
KC = 512  # k per chunk: 2 strips x 512 x 2 bytes = 32 KiB of weights in L1
DIRECT_STORES = os.environ.get("LLAMACPY_VNNI_DIRECT", "1") != "0"  # 0: through Y (to compare)
# int16 weights unpacked per panel of rows, per thread: at 1 thread 1 MiB runs as fast as 4
# (2026-12-07, Zen 4; 512 KiB was 3% slower on Gemma 3) and its panel and output scratch take
# 4-14 MiB less of a prompt's peak; at 2 threads 2 MiB was as fast as 4 and 1 MiB 1-5% slower
PANEL_BYTES = 1 << 20

I32, F32 = ir.IntType(32), ir.FloatType()
V32, VF = ir.VectorType(I32, LANES), ir.VectorType(F32, LANES)


# -------------------------------------------------------------------------- the micro-kernel


def _splat(builder, value, vt):
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(I32, 0))
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, vt.count), [0] * vt.count))


def _phis(builder, pred, initial):
    """One phi per initial value, entered from block `pred` with it."""
    out = []
    for v in initial:
        p = builder.phi(v.type)
        p.add_incoming(v, pred)
        out.append(p)
    return out


def _dot_ir(builder):
    """dot(acc, w, x): acc + the int16 pair products of w and x summed into int32 lanes, one
    vpdpwssd on zmm, or vpmaddwd + vpaddd on ymm (AVX2): the same sums, both wrapping."""
    if HAS_VNNI:
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(V32, [V32] * 3),
                                            "llvm.x86.avx512.vpdpwssd.512")
        return lambda acc, w, x: builder.call(fn, [acc, w, x])
    v16 = ir.VectorType(ir.IntType(16), 2 * LANES)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(V32, [v16] * 2),
                                        "llvm.x86.avx2.pmadd.wd")
    return lambda acc, w, x: builder.add(acc, builder.call(
        fn, [builder.bitcast(w, v16), builder.bitcast(x, v16)]))


def _micro_kernel_factory(nsub: int):
    """The intrinsic micro(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp,
    OUT, r0, n_real, mode): Y[sp, TOKENS tg + t, LANES g + lane] (Y [strip pair][rp tokens]
    [STRIPS LANES], flat) gets the sum over blocks b0 .. b0 + nblk of strip pair sp with token
    group tg: stored for the first K chunk (b0 = 0), added for the others. With `mode` >= -1
    the last K chunk writes the whole sum to OUT[token, r0 + row] instead (tokens < n_real;
    mode -1 as it is, 0 / 1 as act(OUT) * sum, the gated FFN's SiLU / tanh-GELU): no pass over
    Y afterwards, and the values go out while they are in registers. The k loop walks one
    pointer into the strip pair's weights and one into the token group's activations. `nsub` is
    the number of min terms per block (0: none; 1: Q4_1's, one per block; 8: the folded Q4_K's,
    one per 32 of its blocks of 256)."""

    def typer(typingctx, Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp,
              OUT, r0, n_real, mode):
        sig = types.void(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp,
                         OUT, r0, n_real, mode)

        def codegen(context, builder, sig, args):
            wp, ws, wm, xq, xs, xsum, y = [context.make_array(aty)(context, builder, a).data
                                           for aty, a in zip(sig.args[:7], args[:7])]
            i64 = ir.IntType(64)
            sp, tg, b0, nblk, spb, half, nb, rp = [
                context.cast(builder, v, t, types.int64)
                for v, t in zip(args[7:15], sig.args[7:15])]
            out_ary = context.make_array(sig.args[15])(context, builder, args[15])
            r0, n_real, mode = [context.cast(builder, v, t, types.int64)
                                for v, t in zip(args[16:], sig.args[16:])]
            c = lambda v: ir.Constant(i64, v)  # noqa: E731
            dot = _dot_ir(builder)
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF] * 3),
                                                 f"llvm.fma.v{LANES}f32")
            # Wp [sp][k pair][2 strips][16 lanes], Xq [tg][k pair][6 tokens] (int32 pairs),
            # WS [sp][block][2][16], XS [tg][block][6], WM [sp][block][nsub][2][16],
            # XSUM [tg][block][nsub][6]
            p0 = builder.mul(b0, spb)
            w_ptr = builder.gep(wp, [builder.mul(builder.add(builder.mul(sp, half), p0),
                                                 c(STRIPS * LANES))])
            x_ptr = builder.gep(xq, [builder.mul(builder.add(builder.mul(tg, half), p0),
                                                 c(TOKENS))])
            s_ptr = builder.mul(builder.add(builder.mul(sp, nb), b0), c(STRIPS * LANES))
            xs_ptr = builder.mul(builder.add(builder.mul(tg, nb), b0), c(TOKENS))
            n_acc = STRIPS * TOKENS
            entry = builder.basic_block
            blk_head = builder.append_basic_block("blk_head")
            step = builder.append_basic_block("step")
            blk_end = builder.append_basic_block("blk_end")
            done = builder.append_basic_block("done")
            builder.branch(blk_head)

            # loop over blocks: (block, weight pointer, activation pointer, float sums)
            builder.position_at_end(blk_head)
            bi, wq_b, xq_b, *facc = _phis(builder, entry, [c(0), w_ptr, x_ptr] + [
                ir.Constant(VF, [0.0] * LANES)] * n_acc)
            builder.branch(step)

            # loop over a block's k pairs: the same, with int32 sums starting from zero
            builder.position_at_end(step)
            si, wq, xqp, *iacc = _phis(builder, blk_head, [c(0), wq_b, xq_b] + [
                ir.Constant(V32, [0] * LANES)] * n_acc)
            wv = [builder.load(builder.bitcast(builder.gep(wq, [c(LANES * g)]), V32.as_pointer()),
                               align=4) for g in range(STRIPS)]
            xv = [_splat(builder, builder.load(builder.gep(xqp, [c(t)]), align=4), V32)
                  for t in range(TOKENS)]
            new = [dot(iacc[g * TOKENS + t], wv[g], xv[t])
                   for g in range(STRIPS) for t in range(TOKENS)]
            for a, v in zip(iacc, new):
                a.add_incoming(v, step)
            wq_next = builder.gep(wq, [c(STRIPS * LANES)])
            xq_next = builder.gep(xqp, [c(TOKENS)])
            wq.add_incoming(wq_next, step)
            xqp.add_incoming(xq_next, step)
            s_next = builder.add(si, c(1))
            si.add_incoming(s_next, step)
            builder.cbranch(builder.icmp_signed("<", s_next, spb), step, blk_end)

            builder.position_at_end(blk_end)
            block = builder.add(b0, bi)  # this block's index in the row

            def vload(base, at):  # 16 floats of WS / WM at flat index `at`
                ptr = builder.gep(base, [at])
                return builder.load(builder.bitcast(ptr, VF.as_pointer()), align=4)

            def strip_at(row_blocks, j, g):  # WS / WM [sp][row_blocks][2][16], entry j, strip g
                at = builder.add(builder.mul(sp, row_blocks), j)
                return builder.add(builder.mul(at, c(STRIPS * LANES)), c(LANES * g))

            def token_at(row_blocks, j, t):  # XS / XSUM [tg][row_blocks][6], entry j, token t
                at = builder.add(builder.mul(tg, row_blocks), j)
                return builder.add(builder.mul(at, c(TOKENS)), c(t))

            so = builder.add(s_ptr, builder.mul(bi, c(STRIPS * LANES)))
            xo = builder.add(xs_ptr, builder.mul(bi, c(TOKENS)))
            wsg = [vload(ws, builder.add(so, c(LANES * g))) for g in range(STRIPS)]
            xst = [_splat(builder, builder.load(builder.gep(xs, [builder.add(xo, c(t))])), VF)
                   for t in range(TOKENS)]
            out = []
            for g in range(STRIPS):
                for t in range(TOKENS):
                    k = g * TOKENS + t
                    scale = builder.fmul(wsg[g], xst[t])
                    out.append(builder.call(fma, [builder.sitofp(new[k], VF), scale, facc[k]]))
            nm = builder.mul(nb, c(nsub))  # min terms per row
            for j in range(nsub):  # Y -= wm * xsum for each of the block's min terms
                mj = builder.add(builder.mul(block, c(nsub)), c(j))
                wmg = [vload(wm, strip_at(nm, mj, g)) for g in range(STRIPS)]
                nsum = [_splat(builder, builder.fneg(builder.load(
                    builder.gep(xsum, [token_at(nm, mj, t)]))), VF) for t in range(TOKENS)]
                out = [builder.call(fma, [wmg[g], nsum[t], out[g * TOKENS + t]])
                       for g in range(STRIPS) for t in range(TOKENS)]
            for f, v in zip(facc, out):
                f.add_incoming(v, blk_end)
            wq_b.add_incoming(wq_next, blk_end)
            xq_b.add_incoming(xq_next, blk_end)
            b_next = builder.add(bi, c(1))
            bi.add_incoming(b_next, blk_end)
            builder.cbranch(builder.icmp_signed("<", b_next, nblk), blk_head, done)

            builder.position_at_end(done)
            first = builder.icmp_signed("==", b0, c(0))
            direct = builder.and_(builder.icmp_signed(">=", mode, c(-1)),
                                  builder.icmp_signed("==", builder.add(b0, nblk), nb))
            to_y = builder.append_basic_block("to_y")
            to_out = builder.append_basic_block("to_out")
            end = builder.append_basic_block("end")
            builder.cbranch(direct, to_out, to_y)

            def y_ptr(g, t):
                # Y [strip pair][token][2][16] (rp: the padded token count): one micro-kernel's
                # 12 vectors are consecutive, so the pass over the tokens streams
                token = builder.add(builder.mul(tg, c(TOKENS)), c(t))
                row = builder.add(builder.mul(sp, rp), token)
                at = builder.mul(builder.add(builder.mul(row, c(STRIPS)), c(g)), c(LANES))
                return builder.bitcast(builder.gep(y, [at]), VF.as_pointer())

            def total(g, t):  # the first K chunk's sum as it is, the others' added to Y's
                acc = out[g * TOKENS + t]
                return builder.select(first, acc, builder.fadd(builder.load(y_ptr(g, t), align=4),
                                                               acc))

            builder.position_at_end(to_y)
            for g in range(STRIPS):
                for t in range(TOKENS):
                    builder.store(total(g, t), y_ptr(g, t), align=4)
            builder.branch(end)

            builder.position_at_end(to_out)
            (row_stride, _) = cgutils.unpack_tuple(builder, out_ary.strides, 2)
            row_stride = builder.sdiv(row_stride, c(4))  # float32 items
            gated = builder.icmp_signed(">=", mode, c(0))
            gelu = builder.icmp_signed("==", mode, c(1))
            for t in range(TOKENS):
                token = builder.add(builder.mul(tg, c(TOKENS)), c(t))
                with builder.if_then(builder.icmp_signed("<", token, n_real)):
                    for g in range(STRIPS):
                        col = builder.add(r0, builder.add(builder.mul(sp, c(STRIPS * LANES)),
                                                          c(LANES * g)))
                        at = builder.add(builder.mul(token, row_stride), col)
                        ptr = builder.bitcast(builder.gep(out_ary.data, [at]), VF.as_pointer())
                        value = total(g, t)
                        with builder.if_else(gated) as (then, otherwise):
                            with then:
                                act = logistic_times_ir(builder, builder.load(ptr, align=4),
                                                        gelu)
                                builder.store(builder.fmul(act, value), ptr, align=4)
                            with otherwise:
                                builder.store(value, ptr, align=4)
            builder.branch(end)
            builder.position_at_end(end)
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(typer)


_micro = _micro_kernel_factory(0)
_micro_mins = _micro_kernel_factory(1)
_micro_mins8 = _micro_kernel_factory(8)


@njit(inline="always")
def _gemm(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb, parts, nsub,
          out, r0, n_real, mode):
    """Y [strip pair][n_tok][32] (flat) = the panel's strips x the activations (written to out
    by the last K chunk where mode >= -1, see the micro-kernel). One parallel region: each of
    `parts` threads takes a run of strip pairs and walks K in chunks over it, every token group
    passing over a chunk while it is in L1."""
    pairs = n_strips // STRIPS
    for part in prange(parts):
        lo, hi = pairs * part // parts, pairs * (part + 1) // parts
        for b0 in range(0, nb, kc_blocks):
            nblk = min(kc_blocks, nb - b0)
            for sp in range(lo, hi):
                for tg in range(n_tok // TOKENS):
                    if nsub == 0:
                        _micro(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb,
                               n_tok, out, r0, n_real, mode)
                    elif nsub == 1:
                        _micro_mins(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half,
                                    nb, n_tok, out, r0, n_real, mode)
                    else:
                        _micro_mins8(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half,
                                     nb, n_tok, out, r0, n_real, mode)


# Top-level functions, not closures made by a factory: numba's cache finds these in a new
# process (a closure compiled again each time: ~2 s and ~30 MB of LLVM memory per kernel).
@njit(parallel=True, cache=True, nogil=NOGIL)
def _gemm_panel(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb, parts,
                out, r0, n_real, mode):
    _gemm(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb, parts, 0,
          out, r0, n_real, mode)


@njit(parallel=True, cache=True, nogil=NOGIL)
def _gemm_panel_mins(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb,
                     parts, out, r0, n_real, mode):
    _gemm(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb, parts, 1,
          out, r0, n_real, mode)


@njit(parallel=True, cache=True, nogil=NOGIL)
def _gemm_panel_mins8(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb,
                      parts, out, r0, n_real, mode):
    _gemm(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb, parts, 8,
          out, r0, n_real, mode)


GEMM_PANELS = {0: _gemm_panel, 1: _gemm_panel_mins, 8: _gemm_panel_mins8}  # by min terms / block


# ----------------------------------------------------------------------------- activations


@njit(parallel=True, cache=True, nogil=NOGIL)
def _quantize_activations(X, block, qmax, sub, Xq, XS, XSUM):
    """Xq = rint(X / xs), xs = max |X| / qmax per block of `block`, so |Xq| <= qmax; XSUM =
    xs * sum(Xq) per `sub` values (the min terms then see the same quantized activations as the
    products; sub = block for Q4_1, 32 for the folded Q4_K). Eight values at a time (a block is
    a multiple of 32): the rounded floats' sums are exact integers (|sum| < 2^24).
    Layouts by groups of 6 tokens: Xq [tg][k pair][6] (int32: one int16 pair each),
    XS [tg][block][6], XSUM [tg][sub][6]; the last group's padding tokens are all zero."""
    n_tok, n = X.shape
    nb, ns, half, per = n // block, n // sub, n // 2, block // sub
    qmax = np.float32(qmax)
    for tg in prange((n_tok + TOKENS - 1) // TOKENS):
        rows = np.zeros((TOKENS, block), np.int16)  # one block's quants in order (in L1)
        pairs = rows.view(np.int32)  # [token, k pair of the block]
        real = min(TOKENS, n_tok - TOKENS * tg)
        for tl in range(real, TOKENS):
            for b in range(nb):
                XS[(tg * nb + b) * TOKENS + tl] = 0
            for b in range(ns):
                XSUM[(tg * ns + b) * TOKENS + tl] = 0
        for b in range(nb):
            o = block * b
            for tl in range(real):
                t = TOKENS * tg + tl
                big = f32x8_abs(load_row8(X, t, o))
                for i in range(o + 8, o + block, 8):
                    big = f32x8_max(big, f32x8_abs(load_row8(X, t, i)))
                top = f32x8_hmax(big)
                inv = f32x8_splat(qmax / top if top > 0 else np.float32(0))
                xs = top / qmax
                XS[(tg * nb + b) * TOKENS + tl] = xs
                for u in range(per):
                    total = f32x8_zero()
                    for i in range(sub * u, sub * u + sub, 8):
                        q = f32x8_rint(f32x8_mul(load_row8(X, t, o + i), inv))
                        store_rounded_i16(rows, tl, i, q)
                        total = f32x8_add(total, q)
                    XSUM[(tg * ns + per * b + u) * TOKENS + tl] = f32x8_sum(total) * xs
            at = (tg * half + block // 2 * b) * TOKENS
            for p in range(block // 2):
                for tl in range(TOKENS):
                    Xq[at + p * TOKENS + tl] = ld2(pairs, tl, p)


# -------------------------------------------------------------------------- weight unpacking
# Each decoder writes one row's integers q[lane, :] (int16, in order, so the loops vectorise),
# its block scales sc[lane, :] and mins mn[lane, :] (w = sc q - mn); `_pack` then interleaves
# the 16 rows of a strip into the micro-kernel's layout.


# The K-quants fold their integer sub-block scales into the weights, so the int32 sums need
# converting once per block of 256 (Q4_K) or 64 (Q6_K) instead of per sub-block of 32 / 16:
# Q4_K q sc in [0, 945] (w = d q sc - dmin m, the mins then one term per 32), Q6_K
# (q - 32) sc in [-4064, 4096]. `Unpacker.qmax` bounds the activations so that no sum overflows.


@njit(inline="always")
def _ints_q4_k(w, r, q, sc, mn, lane):
    for sb in range(w.shape[1] // 144):
        o, y = 144 * sb, 256 * sb
        d, dmin = f16_at(w, r, o), f16_at(w, r, o + 2)
        sc[lane, sb] = d
        for j in range(4):  # 32 bytes: low nibbles are sub-block 2j, high nibbles 2j + 1
            s0, m0 = k4_scale_min(w, r, o + 4, 2 * j)
            s1, m1 = k4_scale_min(w, r, o + 4, 2 * j + 1)
            mn[lane, 8 * sb + 2 * j], mn[lane, 8 * sb + 2 * j + 1] = dmin * m0, dmin * m1
            i0, i1 = np.int16(s0), np.int16(s1)
            for l in range(32):
                v = np.int16(ld2(w, r, o + 16 + 32 * j + l))
                q[lane, y + 64 * j + l] = (v & 15) * i0
                q[lane, y + 64 * j + 32 + l] = (v >> 4) * i1


@njit(inline="always")
def _ints_q6_k(w, r, q, sc, mn, lane):
    # dequantize_row_q6_K: per half, byte l of ql/qh feeds elements l, l+32, l+64, l+96, whose
    # scales are those of sub-blocks 8h + l // 16 + 0, 2, 4, 6
    per = sc.shape[1] // (w.shape[1] // 210)  # scales per super-block (4: blocks of 64)
    for sb in range(w.shape[1] // 210):
        o, y = 210 * sb, 256 * sb
        d = f16_at(w, r, o + 208)
        for i in range(per):
            sc[lane, per * sb + i] = d
        for h in range(2):
            for lh in range(2):
                k = o + 192 + 8 * h + lh  # sub-blocks k, k + 2, k + 4, k + 6
                s0, s1 = np.int16(np.int8(ld2(w, r, k))), np.int16(np.int8(ld2(w, r, k + 2)))
                s2, s3 = np.int16(np.int8(ld2(w, r, k + 4))), np.int16(np.int8(ld2(w, r, k + 6)))
                for l in range(16 * lh, 16 * lh + 16):
                    a, c = ld2(w, r, o + 64 * h + l), ld2(w, r, o + 64 * h + 32 + l)
                    hb = ld2(w, r, o + 128 + 32 * h + l)
                    at = y + 128 * h + l
                    q[lane, at] = (np.int16((a & 15) | ((hb & 3) << 4)) - 32) * s0
                    q[lane, at + 32] = (np.int16((c & 15) | ((hb & 12) << 2)) - 32) * s1
                    q[lane, at + 64] = (np.int16((a >> 4) | (hb & 48)) - 32) * s2
                    q[lane, at + 96] = (np.int16((c >> 4) | ((hb & 192) >> 2)) - 32) * s3


def _block_ints_factory(kind: str):
    """The intrinsic ints(w, r, o, q, lane, at): q[lane, at:at + 32] = the int16 weights of the
    32-weight block of `kind` at byte o of row r of w (past its fp16 scale, and Q4_1's min),
    in order, as 32-byte vector operations: numba's own integer arithmetic runs in 64-bit lanes
    (every int promotes to intp), four times the work of these 8- and 16-bit ones."""
    i8, i16 = ir.IntType(8), ir.IntType(16)
    v16b, v32b = ir.VectorType(i8, 16), ir.VectorType(i8, 32)
    v16w, v32w = ir.VectorType(i16, 16), ir.VectorType(i16, 32)

    def typer(typingctx, w, r, o, q, lane, at):
        sig = types.void(w, r, o, q, lane, at)

        def codegen(context, builder, sig, args):
            src = cgutils.get_item_pointer(
                context, builder, sig.args[0], context.make_array(sig.args[0])(
                    context, builder, args[0]),
                [context.cast(builder, args[i], sig.args[i], types.intp) for i in (1, 2)],
                wraparound=False)
            dst = cgutils.get_item_pointer(
                context, builder, sig.args[3], context.make_array(sig.args[3])(
                    context, builder, args[3]),
                [context.cast(builder, args[i], sig.args[i], types.intp) for i in (4, 5)],
                wraparound=False)

            def load(offset, vt):
                ptr = builder.gep(src, [ir.Constant(ir.IntType(64), offset)])
                return builder.load(builder.bitcast(ptr, vt.as_pointer()), align=1)

            def splat16(value):
                return ir.Constant(v16w, [value] * 16)

            if kind == "q8_0":
                ints = builder.sext(load(0, v32b), v32w)
            else:
                nib = builder.zext(load({"q4_1": 2, "q5_0": 4}.get(kind, 0), v16b), v16w)
                lo = builder.and_(nib, splat16(15))
                hi = builder.lshr(nib, splat16(4))
                if kind == "q5_0":  # bit l of qh is the fifth bit of weight l
                    v16d = ir.VectorType(I32, 16)
                    qh = builder.load(builder.bitcast(src, I32.as_pointer()), align=1)
                    qhv = _splat(builder, qh, v16d)

                    def fifth(first):
                        bits = builder.lshr(qhv, ir.Constant(v16d, list(range(first, first + 16))))
                        bits = builder.trunc(builder.and_(bits, ir.Constant(v16d, [1] * 16)), v16w)
                        return builder.shl(bits, splat16(4))

                    lo, hi = builder.or_(lo, fifth(0)), builder.or_(hi, fifth(16))
                ints = builder.shuffle_vector(lo, hi, ir.Constant(ir.VectorType(I32, 32),
                                                                  list(range(32))))
                offset = {"q4_0": 8, "q5_0": 16, "q4_1": 0}[kind]
                if offset:
                    ints = builder.sub(ints, ir.Constant(v32w, [offset] * 32))
            builder.store(ints, builder.bitcast(dst, v32w.as_pointer()), align=2)
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(typer)


_block_q8_0 = _block_ints_factory("q8_0")
_block_q5_0 = _block_ints_factory("q5_0")
_block_q4_0 = _block_ints_factory("q4_0")
_block_q4_1 = _block_ints_factory("q4_1")


@njit(inline="always")
def _ints_q8_0(w, r, q, sc, mn, lane):
    for b in range(w.shape[1] // 34):
        sc[lane, b] = f16_at(w, r, 34 * b)
        _block_q8_0(w, r, 34 * b + 2, q, lane, 32 * b)


@njit(inline="always")
def _ints_q5_0(w, r, q, sc, mn, lane):
    for b in range(w.shape[1] // 22):  # fp16 d, 4 bytes of fifth bits, 16 of nibbles
        sc[lane, b] = f16_at(w, r, 22 * b)
        _block_q5_0(w, r, 22 * b + 2, q, lane, 32 * b)


@njit(inline="always")
def _ints_q4_0(w, r, q, sc, mn, lane):
    for b in range(w.shape[1] // 18):
        sc[lane, b] = f16_at(w, r, 18 * b)
        _block_q4_0(w, r, 18 * b + 2, q, lane, 32 * b)


@njit(inline="always")
def _ints_q4_1(w, r, q, sc, mn, lane):
    for b in range(w.shape[1] // 20):  # w = d q + m
        sc[lane, b], mn[lane, b] = f16_at(w, r, 20 * b), -f16_at(w, r, 20 * b + 2)
        _block_q4_1(w, r, 20 * b + 2, q, lane, 32 * b)


@njit(inline="always")
def _ints_iq4_nl(w, r, q, sc, mn, lane):
    grid = IQ4_NL_GRID
    for b in range(w.shape[1] // 18):
        o = 18 * b
        sc[lane, b] = f16_at(w, r, o)
        for l in range(16):
            v = ld2(w, r, o + 2 + l)
            q[lane, 32 * b + l] = np.int16(grid[v & 15])
            q[lane, 32 * b + 16 + l] = np.int16(grid[v >> 4])


# The float types have no integers of their own: each block of 32 of a row becomes int16 on a
# scale of its largest |w| / FLOAT_WMAX, a step of 1/8191 of that largest value (fp16's own step
# near it is 1/1024 to 1/2048 of it). wmax 8191 and the activations' qmax 8192 balance the two
# roundings and keep a block's sum within int32.
FLOAT_WMAX = 8191


@njit(inline="always")
def _ints_of_floats(w, r, q, sc, lane):
    """q[lane] and sc[lane] for row r of w (float32, or uint16 of fp16 bits: load_row8 converts
    them), per block of 32 (sc [LANES, n / 32]), eight lanes at a time."""
    inv_top = np.float32(FLOAT_WMAX)
    for b in range(sc.shape[1]):
        o = 32 * b
        v0, v1 = load_row8(w, r, o), load_row8(w, r, o + 8)
        v2, v3 = load_row8(w, r, o + 16), load_row8(w, r, o + 24)
        top = f32x8_hmax(f32x8_max(f32x8_max(f32x8_abs(v0), f32x8_abs(v1)),
                                   f32x8_max(f32x8_abs(v2), f32x8_abs(v3))))
        inv = f32x8_splat(inv_top / top if top > 0 else np.float32(0))
        sc[lane, b] = top / inv_top
        store_rounded_i16(q, lane, o, f32x8_mul(v0, inv))
        store_rounded_i16(q, lane, o + 8, f32x8_mul(v1, inv))
        store_rounded_i16(q, lane, o + 16, f32x8_mul(v2, inv))
        store_rounded_i16(q, lane, o + 24, f32x8_mul(v3, inv))


@njit(inline="always")
def _ints_f16(w, r, q, sc, mn, lane):  # w: uint16 [rows, n] of fp16 bits
    _ints_of_floats(w, r, q, sc, lane)


@njit(inline="always")
def _ints_bf16(w, r, q, sc, mn, lane):  # w: uint16 [rows, n] of bf16 bits
    f = np.empty((1, w.shape[1]), np.float32)
    for i in range(w.shape[1]):  # a shift and a bitcast: vectorises
        f[0, i] = bits_to_f32(np.uint32(ld2(w, r, i)) << np.uint32(16))
    _ints_of_floats(f, 0, q, sc, lane)


@intrinsic
def _transpose_tile(typingctx, src, s0, stride, dst, d0, dstep):
    """dst[d0 + dstep c + r] = src[s0 + stride r + c] for r, c < LANES (int32 1-D arrays): one
    LANES x LANES tile transposed in registers, log2(LANES) stages of two-source shuffles that
    each swap one bit of the row index with one of the column index."""
    sig = types.void(src, s0, stride, dst, d0, dstep)

    def codegen(context, builder, sig, args):
        sp, dp = [context.make_array(t)(context, builder, a).data
                  for t, a in ((sig.args[0], args[0]), (sig.args[3], args[3]))]
        s0, stride, d0, dstep = [context.cast(builder, args[i], sig.args[i], types.int64)
                                 for i in (1, 2, 4, 5)]
        i64 = ir.IntType(64)
        vp = V32.as_pointer()
        rows = []
        for r in range(LANES):
            at = builder.add(s0, builder.mul(stride, ir.Constant(i64, r)))
            rows.append(builder.load(builder.bitcast(builder.gep(sp, [at]), vp), align=4))
        for k in (1, 2, 4, 8)[:LANES.bit_length() - 1]:
            lo = [c if not c & k else LANES + (c ^ k) for c in range(LANES)]
            hi = [c | k if not c & k else LANES + c for c in range(LANES)]
            for i in range(LANES):
                if i & k:
                    continue
                a, b = rows[i], rows[i | k]
                rows[i] = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, LANES), lo))
                rows[i | k] = builder.shuffle_vector(a, b,
                                                     ir.Constant(ir.VectorType(I32, LANES), hi))
        for c in range(LANES):
            at = builder.add(d0, builder.mul(dstep, ir.Constant(i64, c)))
            builder.store(rows[c], builder.bitcast(builder.gep(dp, [at]), vp), align=4)
        return context.get_dummy_value()

    return sig, codegen


@njit(inline="always")
def _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, decode):
    """Rows r0 .. r0 + rows of w into the strips of Wp [strip pair][k pair][2][16],
    WS [strip pair][block][2][16] and WM [strip pair][min term][2][16] (nm per row), every
    strip of the pairs they fill; lanes past `rows` are zero."""
    for s in prange(-(-rows // (STRIPS * LANES)) * STRIPS):
        flat = np.empty(LANES * 2 * half, np.int16)
        q = flat.reshape(LANES, 2 * half)
        sc = np.empty((LANES, nb), np.float32)
        mn = np.empty((LANES, max(nm, 1)), np.float32)
        used = max(0, min(LANES, rows - LANES * s))
        for lane in range(used):
            decode(w, r0 + LANES * s + lane, q, sc, mn, lane)
        q[used:], sc[used:], mn[used:] = 0, 0, 0
        pairs = flat.view(np.int32)  # [lane][k pair], flat
        g, sp = s % STRIPS, s // STRIPS
        at = (sp * half * STRIPS + g) * LANES
        for p0 in range(0, half, LANES):  # half is a multiple of 16: rows are whole blocks of 32
            _transpose_tile(pairs, p0, half, Wp, at + p0 * STRIPS * LANES, STRIPS * LANES)
        for b in range(nb):
            at = ((sp * nb + b) * STRIPS + g) * LANES
            for lane in range(LANES):
                WS[at + lane] = sc[lane, b]
        for b in range(nm):
            at = ((sp * nm + b) * STRIPS + g) * LANES
            for lane in range(LANES):
                WM[at + lane] = mn[lane, b]


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_q4_k(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_q4_k)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_q6_k(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_q6_k)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_q8_0(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_q8_0)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_q5_0(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_q5_0)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_q4_0(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_q4_0)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_q4_1(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_q4_1)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_f16(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_f16)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_bf16(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_bf16)


@njit(parallel=True, cache=True, nogil=NOGIL)
def pack_iq4_nl(w, r0, rows, Wp, WS, WM, half, nb, nm):
    _pack(w, r0, rows, Wp, WS, WM, half, nb, nm, _ints_iq4_nl)


class Unpacker(NamedTuple):
    """How a type's rows become int16 weights: `block` k values share one float scale (the int32
    sums are converted once per block), `nsub` min terms per block (w = scale q - min), |q| <=
    `wmax`, and the packer."""

    block: int
    nsub: int
    wmax: int
    pack: object

    @property
    def qmax(self) -> int:
        """The activations' int16 bound: a block's sum of `block` products |q x| <= wmax qmax
        stays within int32 (vpdpwssd wraps, so only the block's sum has to fit)."""
        return min(int(QMAX), INT32_MAX // (self.block * self.wmax))


INT32_MAX = 2**31 - 1
UNPACKERS = {
    GGMLType.Q4_K: Unpacker(256, 8, 15 * 63, pack_q4_k),  # qmax 8876
    GGMLType.Q6_K: Unpacker(64, 0, 32 * 128, pack_q6_k),  # qmax 8191
    GGMLType.Q8_0: Unpacker(32, 0, 128, pack_q8_0),
    GGMLType.Q5_0: Unpacker(32, 0, 16, pack_q5_0),
    GGMLType.Q4_0: Unpacker(32, 0, 8, pack_q4_0),
    GGMLType.Q4_1: Unpacker(32, 1, 15, pack_q4_1),
    GGMLType.IQ4_NL: Unpacker(32, 0, 127, pack_iq4_nl),
    GGMLType.F16: Unpacker(32, 0, FLOAT_WMAX, pack_f16),  # qmax 8192
    GGMLType.BF16: Unpacker(32, 0, FLOAT_WMAX, pack_bf16),
}
FLOAT_TYPES = (GGMLType.F16, GGMLType.BF16)  # their rows reach the packers as uint16


# ------------------------------------------------------------------------------- the driver


def vnni_enabled() -> bool:
    return ENABLED


# On AVX2, the token counts from which this kernel beats dequantize + sgemm (Zen 3, 1 thread,
# Qwen2.5-Coder / Gemma 3 layer shapes, bench/int_gemm_crossover.py): Q8_0 and Q4_K at any count
# (1.1-1.4x), Q6_K from ~64; the others' per-weight unpacking costs what the products save up to
# ~128 tokens, and they gain 1.05-1.15x at 512
AVX2_FROM_TOKENS = {GGMLType.Q8_0: 1, GGMLType.Q4_K: 1, GGMLType.Q6_K: 64, GGMLType.Q5_0: 256,
                    GGMLType.Q4_0: 256, GGMLType.Q4_1: 256, GGMLType.IQ4_NL: 256}


def vnni_supports(ggml_type: GGMLType, n_tokens: int, n: int) -> bool:
    """Whether `n_tokens` rows against a `ggml_type` matrix with rows of `n` go through this
    kernel (the quantized types' rows are whole blocks of 32 or 256; a float row must be)."""
    if ggml_type in FLOAT_TYPES:  # timed on AVX-512 only: on AVX2 they keep sgemm
        return HAS_VNNI and n % 32 == 0
    return ggml_type in UNPACKERS and (HAS_VNNI or n_tokens >= AVX2_FROM_TOKENS[ggml_type])


def vnni_matmul(w: np.ndarray, ggml_type: GGMLType, X: np.ndarray, out: np.ndarray,
                gated: int = -1) -> None:
    """out [T, rows] = X [T, n] @ W^T for a type in UNPACKERS, W uint8 [rows, row_bytes]. With
    `gated` (0 SiLU, 1 tanh-GELU) out holds a gated FFN's gate projection and gets
    act(gate) * (X @ W^T), applied as each panel is stored: no second [T, rows] array."""
    u = UNPACKERS[ggml_type]
    block, nsub = u.block, u.nsub
    n_tok, n = X.shape
    rows = w.shape[0]
    half, nb = n // 2, n // block
    nm = nb * nsub  # min terms per row
    t_pad = -(-n_tok // TOKENS) * TOKENS
    Xq32 = _scratch("Xq", t_pad * half, np.int32)
    XS = _scratch("XS", t_pad * nb, np.float32)
    XSUM = _scratch("XSUM", t_pad * max(nm, nb), np.float32)
    X = np.ascontiguousarray(X)
    _timed("quantize", _quantize_activations, X, block, u.qmax, block // max(nsub, 1), Xq32, XS,
           XSUM)
    if ggml_type in FLOAT_TYPES:
        w = w.view(np.uint16)
    strip_rows = STRIPS * LANES
    panel = min(-(-rows // strip_rows) * strip_rows,
                max(strip_rows, PANEL_BYTES * max(1, numba.get_num_threads()) // (2 * n)
                    // strip_rows * strip_rows))
    n_strips = panel // LANES
    Wp = _scratch("Wp", n_strips * half * LANES, np.int32)
    WS = _scratch("WS", n_strips * nb * LANES, np.float32)
    WM = _scratch("WM", n_strips * max(nm, 1) * LANES, np.float32)
    Y = _scratch("Y", panel * t_pad, np.float32).reshape(panel // strip_rows, t_pad, strip_rows)
    gemm = GEMM_PANELS[nsub]
    # whole strips write straight to out from the micro-kernel (every row count of the catalogue's
    # models is a multiple of 32); a partial strip's rows go through Y and a store pass
    whole = rows % strip_rows == 0 and out.strides[1] == 4
    mode = (gated if gated >= 0 else -1) if whole and DIRECT_STORES else -2
    kc_blocks = max(1, KC // block)
    for r0 in range(0, rows, panel):
        r1 = min(rows, r0 + panel)
        strips = -(-(r1 - r0) // strip_rows) * STRIPS
        _timed("unpack", u.pack, w, r0, r1 - r0, Wp, WS, WM, half, nb, nm)
        _timed("gemm", gemm, Wp, WS, WM, Xq32, XS, XSUM, Y.reshape(-1), strips, t_pad, kc_blocks,
               block // 2, half, nb, max(1, min(strips // STRIPS, numba.get_num_threads())),
               out, r0, n_tok, mode)
        if mode >= -1:
            continue  # the last K chunk wrote out
        if gated < 0:
            _timed("store", _store_panel, Y, out, r0, r1 - r0, n_tok)
        else:
            _timed("store", _store_panel_gated, Y, out, r0, r1 - r0, n_tok, gated)


PROFILE: dict[str, float] | None = None  # part -> CPU seconds, summed while a bench sets it to {}


def _timed(part: str, kernel, *args) -> None:
    if PROFILE is None:
        kernel(*args)
        return
    t0 = time.process_time()  # CPU time: the benches share the machine
    kernel(*args)
    PROFILE[part] = PROFILE.get(part, 0.0) + time.process_time() - t0


_SCRATCH = threading.local()  # per thread: engines in several threads each get their own


def _scratch(name: str, size: int, dtype) -> np.ndarray:
    """A reused 1-D buffer of at least `size` (not zeroed): fresh 20 MB arrays per matmul cost
    their page faults every time."""
    buf = getattr(_SCRATCH, name, None)
    if buf is None or buf.size < size:
        buf = np.empty(size, dtype)
        setattr(_SCRATCH, name, buf)
    return buf[:size]


@njit(parallel=True, cache=True, nogil=NOGIL)
def _store_panel(Y, out, r0, rows, n_tok):
    """out[t, r0 + r] = the panel's Y [strip pair][token][32] for its real rows and tokens."""
    width = STRIPS * LANES
    for sp in prange((rows + width - 1) // width):
        base, m = r0 + width * sp, min(width, rows - width * sp)
        for t in range(n_tok):
            for j in range(m):
                st2(out, t, base + j, ld2(Y[sp], t, j))


@njit(parallel=True, cache=True, nogil=NOGIL)
def _store_panel_gated(Y, out, r0, rows, n_tok, k):
    """out[t, r0 + r] = act_k(out[t, r0 + r]) * Y's value: `_store_panel` for the up projection
    of a gated FFN, with elementwise.gated_1d's operations (8 lanes at a time where it has them:
    the strips start at multiples of 8)."""
    width = STRIPS * LANES
    for sp in prange((rows + width - 1) // width):
        base, m = r0 + width * sp, min(width, rows - width * sp)
        ys = Y[sp]
        for t in range(n_tok):
            for j in range(0, m // 8 * 8, 8):
                g = logistic_times8(load_row8(out, t, base + j), k)
                store_row8(out, t, base + j, f32x8_mul(g, load_row8(ys, t, j)))
            for j in range(m // 8 * 8, m):
                out[t, base + j] = logistic_times1(out[t, base + j], k) * ys[t, j]
