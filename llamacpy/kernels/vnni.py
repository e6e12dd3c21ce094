"""Prompt-time matmul on AVX-512 VNNI: int16 weights x int16 activations with vpdpwssd.

Y[t, r] = sum over blocks b of  ws[r, b] * xs[t, b] * (q[r, b] . xq[t, b])  -  wm[r, b] * xsum[t, b]

where each weight block is small integers q with a float scale ws (and for Q4_K / Q4_1 a min
wm), exactly as the GGUF stores it, and the activations are quantized per block to int16
(`QMAX`, as the decode kernels do: relative error ~1.5e-5 of the block's largest value). One
vpdpwssd multiplies 32 int16 pairs (16 rows x 2 k) and adds them to int32 lanes, twice the
multiply-adds of an fp32 FMA, and the products are exact: on a Zen 5 core this runs at ~2x
OpenBLAS's AVX-512 sgemm on the dequantized rows (the path everywhere else, kernels/matmul.py).

Layout (BLIS-like): a panel of rows is unpacked once into int16 pairs, 16 rows per strip,
[strip][k pair][16 lanes] (`_pack_*`); the activations into int16 [token][k]. The micro-kernel
(`_micro_kernel`, LLVM IR written here) holds 2 strips x 6 tokens of int32 accumulators and their
float sums in 24 zmm registers; per block it converts the int sums and applies both scales. K is
walked in chunks of `KC` so that a strip pair's chunk stays in L1 and the activations' chunk in L2
while every token passes over it.
"""

from __future__ import annotations

import os

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ..format.constants import GGMLType
from .dequant import IQ4_NL_GRID, f16_at, k4_scale_min, ld2
from .matvec import QMAX
from .threading_layer import NOGIL

_FEATURES = llvm.get_host_cpu_features()
# numba compiles for the host unless told otherwise (NUMBA_CPU_NAME: the portable build)
HAS_VNNI = bool(_FEATURES.get("avx512vnni") and _FEATURES.get("avx512bw")) and \
    not numba.config.CPU_NAME

# LLAMACPY_VNNI=0 turns the path off (to compare it with dequantize + sgemm)
ENABLED = HAS_VNNI and os.environ.get("LLAMACPY_VNNI", "1") != "0"

STRIPS, TOKENS, LANES = 2, 6, 16  # micro-kernel tile: 2 x 16 rows by 6 tokens
KC = 512  # k per chunk: 2 strips x 512 x 2 bytes = 32 KiB of weights in L1
PANEL_BYTES = 8 << 20  # int16 weights unpacked per panel of rows

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


def _micro_kernel_factory(with_mins: bool):
    """The intrinsic micro(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp):
    Y[6 tg + t, 32 sp + lane] += the sum over blocks b0 .. b0 + nblk of strip pair sp with token
    group tg (1-D arrays in the layouts of `vnni_matmul`). The k loop walks one pointer into the
    strip pair's weights and one into the token group's activations."""

    def typer(typingctx, Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp):
        sig = types.void(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp)

        def codegen(context, builder, sig, args):
            wp, ws, wm, xq, xs, xsum, y = [context.make_array(aty)(context, builder, a).data
                                           for aty, a in zip(sig.args[:7], args[:7])]
            i64 = ir.IntType(64)
            sp, tg, b0, nblk, spb, half, nb, rp = [
                context.cast(builder, v, t, types.int64) for v, t in zip(args[7:], sig.args[7:])]
            c = lambda v: ir.Constant(i64, v)  # noqa: E731
            dot = cgutils.get_or_insert_function(builder.module, ir.FunctionType(V32, [V32] * 3),
                                                 "llvm.x86.avx512.vpdpwssd.512")
            fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF] * 3),
                                                 "llvm.fma.v16f32")
            # Wp [sp][k pair][2 strips][16 lanes], Xq [tg][k pair][6 tokens] (int32 pairs),
            # WS / WM [sp][block][2][16], XS / XSUM [tg][block][6]
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
            new = [builder.call(dot, [iacc[g * TOKENS + t], wv[g], xv[t]])
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
            so = builder.add(s_ptr, builder.mul(bi, c(STRIPS * LANES)))
            xo = builder.add(xs_ptr, builder.mul(bi, c(TOKENS)))
            vload = lambda base, off: builder.load(builder.bitcast(  # noqa: E731
                builder.gep(base, [builder.add(so, c(off))]), VF.as_pointer()), align=4)
            sload = lambda base, t: builder.load(builder.gep(base, [builder.add(xo, c(t))]))  # noqa: E731,E501
            wsg = [vload(ws, LANES * g) for g in range(STRIPS)]
            xst = [_splat(builder, sload(xs, t), VF) for t in range(TOKENS)]
            if with_mins:
                wmg = [vload(wm, LANES * g) for g in range(STRIPS)]
                nsum = [_splat(builder, builder.fneg(sload(xsum, t)), VF) for t in range(TOKENS)]
            out = []
            for g in range(STRIPS):
                for t in range(TOKENS):
                    k = g * TOKENS + t
                    scale = builder.fmul(wsg[g], xst[t])
                    f = builder.call(fma, [builder.sitofp(new[k], VF), scale, facc[k]])
                    if with_mins:
                        f = builder.call(fma, [wmg[g], nsum[t], f])
                    out.append(f)
            for f, v in zip(facc, out):
                f.add_incoming(v, blk_end)
            wq_b.add_incoming(wq_next, blk_end)
            xq_b.add_incoming(xq_next, blk_end)
            b_next = builder.add(bi, c(1))
            bi.add_incoming(b_next, blk_end)
            builder.cbranch(builder.icmp_signed("<", b_next, nblk), blk_head, done)

            builder.position_at_end(done)
            for g in range(STRIPS):
                for t in range(TOKENS):
                    # Y [token][row]: rp floats per token, 16 per strip
                    at = builder.add(builder.mul(builder.add(builder.mul(tg, c(TOKENS)), c(t)),
                                                 rp),
                                     builder.mul(builder.add(builder.mul(sp, c(STRIPS)), c(g)),
                                                 c(LANES)))
                    ptr = builder.bitcast(builder.gep(y, [at]), VF.as_pointer())
                    old = builder.load(ptr, align=4)
                    builder.store(builder.fadd(old, out[g * TOKENS + t]), ptr, align=4)
            return context.get_dummy_value()

        return sig, codegen

    return intrinsic(typer)


def _panel_driver(micro):
    @njit(parallel=True, cache=True, nogil=NOGIL)
    def gemm_panel(Wp, WS, WM, Xq, XS, XSUM, Y, n_strips, n_tok, kc_blocks, spb, half, nb, rp):
        """Y [n_tok, rp] (flat, zeroed) += the panel's strips x the activations, K in chunks:
        threads take strip pairs, each passing every token group over its chunk in L1."""
        for b0 in range(0, nb, kc_blocks):
            nblk = min(kc_blocks, nb - b0)
            for sp in prange(n_strips // STRIPS):
                for tg in range(n_tok // TOKENS):
                    micro(Wp, WS, WM, Xq, XS, XSUM, Y, sp, tg, b0, nblk, spb, half, nb, rp)
    return gemm_panel


_gemm_panel = _panel_driver(_micro_kernel_factory(False))
_gemm_panel_mins = _panel_driver(_micro_kernel_factory(True))


# ----------------------------------------------------------------------------- activations


@njit(parallel=True, cache=True, nogil=NOGIL)
def _quantize_activations(X, block, Xq, XS, XSUM):
    """Xq = round(X / xs), xs = max |X| / QMAX per block of `block`; XSUM the exact float sum of
    each block (for the min terms). Layouts by groups of 6 tokens: Xq int16 [tg][k pair][6][2],
    XS / XSUM [tg][block][6]; tokens beyond X's stay zero."""
    n_tok, n = X.shape
    nb, half = n // block, n // 2
    for t in prange(n_tok):
        tg, tl = t // TOKENS, t % TOKENS
        for b in range(nb):
            amax = np.float32(0)
            total = np.float32(0)
            for i in range(block * b, block * b + block):
                amax = max(amax, abs(X[t, i]))
                total += X[t, i]
            inv = QMAX / amax if amax > 0 else np.float32(0)
            XS[(tg * nb + b) * TOKENS + tl] = amax / QMAX
            XSUM[(tg * nb + b) * TOKENS + tl] = total
            for i in range(block * b, block * b + block, 2):
                at = ((tg * half + i // 2) * TOKENS + tl) * 2
                Xq[at] = np.int16(np.rint(X[t, i] * inv))
                Xq[at + 1] = np.int16(np.rint(X[t, i + 1] * inv))


# -------------------------------------------------------------------------- weight unpacking


@njit(inline="always")
def _put(Wp, half, s, p, lane, q0, q1):
    """Weights q0, q1 (k = 2p, 2p + 1) of lane `lane` of strip s, as one int32 pair."""
    at = ((s // STRIPS * half + p) * STRIPS + s % STRIPS) * LANES + lane
    Wp[at] = np.int32((np.int32(q0) & 0xFFFF) | (np.int32(q1) << 16))


@njit(inline="always")
def _put_scale(A, nb, s, b, lane, v):
    A[((s // STRIPS * nb + b) * STRIPS + s % STRIPS) * LANES + lane] = v


@njit(inline="always")
def _unpack_q4_k(w, r, Wp, WS, WM, s, lane, half, nb):
    for sb in range(w.shape[1] // 144):
        o = 144 * sb
        d, dmin = f16_at(w, r, o), f16_at(w, r, o + 2)
        for j in range(4):  # 32 bytes: low nibbles are sub-block 2j, high nibbles 2j + 1
            for h in range(2):
                sc, m = k4_scale_min(w, r, o + 4, 2 * j + h)
                b = 8 * sb + 2 * j + h
                _put_scale(WS, nb, s, b, lane, d * sc)
                _put_scale(WM, nb, s, b, lane, dmin * m)
                for l in range(16):
                    v0, v1 = ld2(w, r, o + 16 + 32 * j + 2 * l), ld2(w, r, o + 17 + 32 * j + 2 * l)
                    sh = 4 * h
                    _put(Wp, half, s, 16 * b + l, lane, (v0 >> sh) & 15, (v1 >> sh) & 15)


@njit(inline="always")
def _q6(w, r, o, h, quarter, l):
    """Element 32 quarter + l of half h of the Q6_K block at o, minus 32."""
    lo = (ld2(w, r, o + 64 * h + 32 * (quarter & 1) + l) >> (4 * (quarter >> 1))) & 15
    hb = (ld2(w, r, o + 128 + 32 * h + l) >> (2 * quarter)) & 3
    return np.int32(lo | (hb << 4)) - 32


@njit(inline="always")
def _nibble(w, r, o, e):
    """Quant e of a 32-quant block whose 16 bytes start at o: low nibbles, then high ones."""
    return np.int32((ld2(w, r, o + (e & 15)) >> (4 * (e >> 4))) & 15)


@njit(inline="always")
def _unpack_q6_k(w, r, Wp, WS, WM, s, lane, half, nb):
    # blocks of 16: byte l of ql / qh feeds elements l, l+32, l+64, l+96 of each 128-half
    for sb in range(w.shape[1] // 210):
        o = 210 * sb
        d = f16_at(w, r, o + 208)
        for h in range(2):
            for quarter in range(4):
                for k in range(2):
                    b = 16 * sb + 8 * h + 2 * quarter + k
                    sc = np.float32(np.int8(ld2(w, r, o + 192 + 8 * h + 2 * quarter + k)))
                    _put_scale(WS, nb, s, b, lane, d * sc)
                    _put_scale(WM, nb, s, b, lane, np.float32(0))
                    for e in range(8):
                        l = 16 * k + 2 * e
                        _put(Wp, half, s, 8 * b + e, lane, _q6(w, r, o, h, quarter, l),
                             _q6(w, r, o, h, quarter, l + 1))


@njit(inline="always")
def _unpack_q8_0(w, r, Wp, WS, WM, s, lane, half, nb):
    for b in range(w.shape[1] // 34):
        o = 34 * b
        _put_scale(WS, nb, s, b, lane, f16_at(w, r, o))
        _put_scale(WM, nb, s, b, lane, np.float32(0))
        for l in range(16):
            q0, q1 = np.int8(ld2(w, r, o + 2 + 2 * l)), np.int8(ld2(w, r, o + 3 + 2 * l))
            _put(Wp, half, s, 16 * b + l, lane, q0, q1)


@njit(inline="always")
def _unpack_q5_0(w, r, Wp, WS, WM, s, lane, half, nb):
    for b in range(w.shape[1] // 22):
        o = 22 * b
        _put_scale(WS, nb, s, b, lane, f16_at(w, r, o))
        _put_scale(WM, nb, s, b, lane, np.float32(0))
        qh = np.uint32(ld2(w, r, o + 2)) | (np.uint32(ld2(w, r, o + 3)) << 8) | \
            (np.uint32(ld2(w, r, o + 4)) << 16) | (np.uint32(ld2(w, r, o + 5)) << 24)
        for l in range(16):
            e = 2 * l
            q0 = (_nibble(w, r, o + 6, e) | np.int32(((qh >> e) & 1) << 4)) - 16
            q1 = (_nibble(w, r, o + 6, e + 1) | np.int32(((qh >> (e + 1)) & 1) << 4)) - 16
            _put(Wp, half, s, 16 * b + l, lane, q0, q1)


@njit(inline="always")
def _unpack_q4_0(w, r, Wp, WS, WM, s, lane, half, nb):
    for b in range(w.shape[1] // 18):
        o = 18 * b
        _put_scale(WS, nb, s, b, lane, f16_at(w, r, o))
        _put_scale(WM, nb, s, b, lane, np.float32(0))
        for l in range(16):
            _put(Wp, half, s, 16 * b + l, lane, _nibble(w, r, o + 2, 2 * l) - 8,
                 _nibble(w, r, o + 2, 2 * l + 1) - 8)


@njit(inline="always")
def _unpack_q4_1(w, r, Wp, WS, WM, s, lane, half, nb):
    for b in range(w.shape[1] // 20):
        o = 20 * b
        _put_scale(WS, nb, s, b, lane, f16_at(w, r, o))
        _put_scale(WM, nb, s, b, lane, -f16_at(w, r, o + 2))  # w = d q + m
        for l in range(16):
            _put(Wp, half, s, 16 * b + l, lane, _nibble(w, r, o + 4, 2 * l),
                 _nibble(w, r, o + 4, 2 * l + 1))


@njit(inline="always")
def _unpack_iq4_nl(w, r, Wp, WS, WM, s, lane, half, nb):
    grid = IQ4_NL_GRID
    for b in range(w.shape[1] // 18):
        o = 18 * b
        _put_scale(WS, nb, s, b, lane, f16_at(w, r, o))
        _put_scale(WM, nb, s, b, lane, np.float32(0))
        for l in range(16):
            _put(Wp, half, s, 16 * b + l, lane, np.int32(grid[_nibble(w, r, o + 2, 2 * l)]),
                 np.int32(grid[_nibble(w, r, o + 2, 2 * l + 1)]))


def _packer(unpack):
    @njit(parallel=True, cache=True, nogil=NOGIL)
    def pack(w, r0, rows, Wp, WS, WM, half, nb):
        """Rows r0 .. r0 + rows of w into the strips of Wp / WS / WM; padding rows stay zero."""
        for s in prange((rows + LANES - 1) // LANES):
            for lane in range(LANES):
                i = LANES * s + lane
                if i < rows:
                    unpack(w, r0 + i, Wp, WS, WM, s, lane, half, nb)
    return pack


# block length of the integer weights, whether they carry mins, and their unpacking
UNPACKERS = {
    GGMLType.Q4_K: (32, True, _packer(_unpack_q4_k)),
    GGMLType.Q6_K: (16, False, _packer(_unpack_q6_k)),
    GGMLType.Q8_0: (32, False, _packer(_unpack_q8_0)),
    GGMLType.Q5_0: (32, False, _packer(_unpack_q5_0)),
    GGMLType.Q4_0: (32, False, _packer(_unpack_q4_0)),
    GGMLType.Q4_1: (32, True, _packer(_unpack_q4_1)),
    GGMLType.IQ4_NL: (32, False, _packer(_unpack_iq4_nl)),
}


# ------------------------------------------------------------------------------- the driver


def vnni_enabled() -> bool:
    return ENABLED


def vnni_supports(ggml_type: GGMLType, n: int) -> bool:
    """Whether rows of `n` weights of `ggml_type` go through the VNNI kernel."""
    entry = UNPACKERS.get(ggml_type)
    return entry is not None and n % 32 == 0


def vnni_matmul(w: np.ndarray, ggml_type: GGMLType, X: np.ndarray, out: np.ndarray) -> None:
    """out [T, rows] = X [T, n] @ W^T for a type in UNPACKERS, W uint8 [rows, row_bytes]."""
    block, with_mins, pack = UNPACKERS[ggml_type]
    n_tok, n = X.shape
    rows = w.shape[0]
    half, nb = n // 2, n // block
    t_pad = -(-n_tok // TOKENS) * TOKENS
    Xq = np.zeros(t_pad * n, np.int16)
    XS = np.zeros(t_pad * nb, np.float32)
    XSUM = np.zeros(t_pad * nb, np.float32)
    _quantize_activations(X, block, Xq, XS, XSUM)
    Xq32 = Xq.view(np.int32)
    strip_rows = STRIPS * LANES
    panel = min(-(-rows // strip_rows) * strip_rows,
                max(strip_rows, PANEL_BYTES // (2 * n) // strip_rows * strip_rows))
    n_strips = panel // LANES
    Wp = np.empty(n_strips * half * LANES, np.int32)
    WS = np.empty(n_strips * nb * LANES, np.float32)
    WM = np.empty(n_strips * nb * LANES, np.float32)
    Y = np.empty((t_pad, panel), np.float32)
    gemm = _gemm_panel_mins if with_mins else _gemm_panel
    kc_blocks = max(1, KC // block)
    for r0 in range(0, rows, panel):
        r1 = min(rows, r0 + panel)
        strips = -(-(r1 - r0) // strip_rows) * STRIPS
        if r1 - r0 < panel:  # the last, partial panel: its padding rows must be zero
            Wp[:] = 0
            WS[:] = 0
            WM[:] = 0
        pack(w, r0, r1 - r0, Wp, WS, WM, half, nb)
        Y[:] = 0
        gemm(Wp, WS, WM, Xq32, XS, XSUM, Y.reshape(-1), strips, t_pad, kc_blocks, block // 2,
             half, nb, panel)
        out[:, r0:r1] = Y[:n_tok, : r1 - r0]
