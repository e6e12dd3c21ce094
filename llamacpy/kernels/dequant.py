"""Numba dequantizers reading quantized rows in place: uint8 [rows, row_bytes] from the mmap.

Each type has an inlined row decoder `dq_<type>(w, r, out, i)` that writes row `r` into out[i]
with exactly the values of the numpy twin in llamacpy/quants (ggml-quants.c `dequantize_row_*`);
`dequantize_rows` runs one of them in parallel over a list of rows: the scratch tiles of
kernels/matmul.py and the embedding lookups (ggml get_rows) both use it.

Vectorisation notes, for every kernel module here:
- Array accesses go through `ld`/`ld2`/`st2`, which skip numba's negative-index wraparound (a
  select per access that stops LLVM from using vector loads and stores).
- Kernels are compiled by `call_kernel`, which switches on LLVM's SLP vectoriser for the duration
  of the compile (numba leaves it off by default since LLVM 11-era miscompilations; the tests
  check every kernel against the numpy twins). Without it the small fully unrolled 16/32-lane
  loops of the decoders stay scalar; the loop vectoriser only catches loops it does not unroll.
- numba's cache does not see edits to inlined helpers in another file: after changing this
  module, delete llamacpy/kernels/__pycache__ so matvec/matmul kernels recompile.
"""

from __future__ import annotations

import numpy as np
import numba
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import load_item, store_item

from ..format.constants import GGML_QUANT_SIZES, GGMLType
from .threading_layer import NOGIL

FASTMATH = {"contract"}  # lets LLVM fuse multiply-adds (FMA); no reassociation

# kvalues_iq4nl (ggml-common.h): the 16 levels of the non-linear 4-bit grid
IQ4_NL_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                       dtype=np.float32)


def _as_int_width(builder, v, width):
    if v.type.width > width:
        return builder.trunc(v, ir.IntType(width))
    if v.type.width < width:
        return builder.zext(v, ir.IntType(width))
    return v


@intrinsic
def f16_bits_to_f32(typingctx, bits):
    """float32 of the IEEE half whose bit pattern is the low 16 bits of an integer (exact).

    Compiles to the hardware conversion (F16C vcvtph2ps on x86), which also vectorises.
    """
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        half = builder.bitcast(_as_int_width(builder, args[0], 16), ir.HalfType())
        return builder.fpext(half, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def bits_to_f32(typingctx, bits):
    """float32 whose bit pattern is the low 32 bits of an integer (a bitcast; bf16 << 16)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(_as_int_width(builder, args[0], 32), ir.FloatType())

    return types.float32(bits), codegen


def _item_pointer(context, builder, argtys, args):
    aryty = argtys[0]
    ary = context.make_array(aryty)(context, builder, args[0])
    inds = [context.cast(builder, v, t, types.intp) for v, t in zip(args[1:], argtys[1:])]
    return cgutils.get_item_pointer(context, builder, aryty, ary, inds, wraparound=False)


@intrinsic
def ld(typingctx, ary, i):
    """ary[i] for an index known to be non-negative: no wraparound select, so loads vectorise."""
    if not (isinstance(ary, types.Array) and ary.ndim == 1 and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args, args)
        return load_item(context, builder, sig.args[0], ptr)

    return ary.dtype(ary, i), codegen


@intrinsic
def ld2(typingctx, ary, r, i):
    """ary[r, i] for non-negative indices (see `ld`)."""
    if not (isinstance(ary, types.Array) and ary.ndim == 2 and isinstance(r, types.Integer)
            and isinstance(i, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_pointer(context, builder, sig.args, args)
        return load_item(context, builder, sig.args[0], ptr)

    return ary.dtype(ary, r, i), codegen


@intrinsic
def st2(typingctx, ary, i, j, value):
    """ary[i, j] = value for non-negative indices (see `ld`). Storing through the 2-D array, not
    a row view, also keeps numba's parfor alias analysis from dropping `noalias` on the arrays."""
    if not (isinstance(ary, types.Array) and ary.ndim == 2 and isinstance(i, types.Integer)
            and isinstance(j, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        aryty = sig.args[0]
        ptr = _item_pointer(context, builder, sig.args[:3], args[:3])
        value = context.cast(builder, args[3], sig.args[3], aryty.dtype)
        store_item(context, builder, aryty, value, ptr)
        return context.get_dummy_value()

    return types.none(ary, i, j, value), codegen


@njit(inline="always")
def f16_at(w, r, o):
    """The fp16 at byte `o` of row `r`, as float32."""
    lo, hi = np.uint16(ld2(w, r, o)), np.uint16(ld2(w, r, o + 1))
    return f16_bits_to_f32(lo | (hi << np.uint16(8)))


@njit(inline="always")
def lo4(v):
    """Low nibble as float32; the uint8 cast tells LLVM the lane fits in a byte."""
    return np.float32(np.uint8(v & 15))


@njit(inline="always")
def hi4(v):
    return np.float32(np.uint8(v >> 4))


@njit(inline="always")
def bit_as(byte, mask, value):
    """`value` (a float32 power of two) where `byte & mask` is set, else 0. The AND, convert and
    multiply run in 32-bit SIMD lanes; a select or a per-lane shift would run in 64-bit ones."""
    return np.float32(np.uint8(byte & mask)) * (value / np.float32(mask))


@njit(inline="always")
def q5_hi(w, r, o, j):
    """Fifth bit of quant j (bit j of the 32-bit field at byte `o`) as 16.0 or 0.0."""
    return bit_as(ld2(w, r, o + (j >> 3)), 1 << (j & 7), np.float32(16))


@njit(inline="always")
def k4_scale_min(w, r, o, j):
    """(scale, min) of sub-block j from the 12 packed bytes at `o` (get_scale_min_k4)."""
    if j < 4:
        return np.float32(ld2(w, r, o + j) & 63), np.float32(ld2(w, r, o + j + 4) & 63)
    sc = (ld2(w, r, o + j + 4) & 15) | ((ld2(w, r, o + j - 4) >> 6) << 4)
    m = (ld2(w, r, o + j + 4) >> 4) | ((ld2(w, r, o + j) >> 6) << 4)
    return np.float32(np.int64(sc)), np.float32(np.int64(m))


@njit(inline="always")
def q3_k_scale(w, r, o, k):
    """Signed six-bit scale k (0..15) of a Q3_K block whose 12 scale bytes start at `o`."""
    low = np.int64(ld2(w, r, o + k) & 15) if k < 8 else np.int64(ld2(w, r, o + k - 8) >> 4)
    high = np.int64((ld2(w, r, o + 8 + k % 4) >> (2 * (k // 4))) & 3)
    return np.float32((low | (high << 4)) - 32)


@njit(inline="always")
def iq4_xs_scale(w, r, o, ib):
    """Signed six-bit scale of sub-block ib (0..7) of an IQ4_XS block starting at `o`."""
    low = np.int64((ld2(w, r, o + 4 + ib // 2) >> (4 * (ib % 2))) & 15)
    scales_h = np.uint16(ld2(w, r, o + 2)) | (np.uint16(ld2(w, r, o + 3)) << np.uint16(8))
    high = np.int64((scales_h >> (2 * ib)) & 3)
    return np.float32((low | (high << 4)) - 32)


# ----------------------------------------------------------------------------------------------
# Row decoders: out[i, :] <- row r, with the numpy twins' float operations (d * q, d * q + m, ...)


@njit(inline="always")
def dq_f32(w, r, out, i):  # w: float32 [rows, n]
    for k in range(out.shape[1]):
        st2(out, i, k, ld2(w, r, k))


@njit(inline="always")
def dq_f16(w, r, out, i):  # w: uint16 [rows, n]
    for k in range(out.shape[1]):
        st2(out, i, k, f16_bits_to_f32(ld2(w, r, k)))


@njit(inline="always")
def dq_bf16(w, r, out, i):  # w: uint16 [rows, n]
    for k in range(out.shape[1]):
        st2(out, i, k, bits_to_f32(np.uint32(ld2(w, r, k)) << np.uint32(16)))


@njit(inline="always")
def dq_q4_0(w, r, out, i):
    for b in range(w.shape[1] // 18):
        o, y = 18 * b, 32 * b
        d = f16_at(w, r, o)
        for j in range(16):
            v = ld2(w, r, o + 2 + j)
            st2(out, i, y + j, d * (lo4(v) - np.float32(8)))
            st2(out, i, y + 16 + j, d * (hi4(v) - np.float32(8)))


@njit(inline="always")
def dq_q4_1(w, r, out, i):
    for b in range(w.shape[1] // 20):
        o, y = 20 * b, 32 * b
        d, m = f16_at(w, r, o), f16_at(w, r, o + 2)
        for j in range(16):
            v = ld2(w, r, o + 4 + j)
            st2(out, i, y + j, d * lo4(v) + m)
            st2(out, i, y + 16 + j, d * hi4(v) + m)


@njit(inline="always")
def dq_q5_0(w, r, out, i):
    for b in range(w.shape[1] // 22):
        o, y = 22 * b, 32 * b
        d = f16_at(w, r, o)
        for j in range(16):
            v = ld2(w, r, o + 6 + j)
            st2(out, i, y + j, d * (lo4(v) + q5_hi(w, r, o + 2, j) - np.float32(16)))
            st2(out, i, y + 16 + j, d * (hi4(v) + q5_hi(w, r, o + 2, j + 16) - np.float32(16)))


@njit(inline="always")
def dq_q5_1(w, r, out, i):
    for b in range(w.shape[1] // 24):
        o, y = 24 * b, 32 * b
        d, m = f16_at(w, r, o), f16_at(w, r, o + 2)
        for j in range(16):
            v = ld2(w, r, o + 8 + j)
            st2(out, i, y + j, d * (lo4(v) + q5_hi(w, r, o + 4, j)) + m)
            st2(out, i, y + 16 + j, d * (hi4(v) + q5_hi(w, r, o + 4, j + 16)) + m)


@njit(inline="always")
def dq_q8_0(w, r, out, i):
    for b in range(w.shape[1] // 34):
        o, y = 34 * b, 32 * b
        d = f16_at(w, r, o)
        for j in range(32):
            st2(out, i, y + j, d * np.float32(np.int8(ld2(w, r, o + 2 + j))))


@njit(inline="always")
def dq_q2_k(w, r, out, i):
    # dequantize_row_q2_K: 16 sub-blocks of 16; the 2-bit quants of byte l (of 32) go to 4 places
    for b in range(w.shape[1] // 84):
        o, y = 84 * b, 256 * b
        d, dmin = f16_at(w, r, o + 80), f16_at(w, r, o + 82)
        for h in range(2):
            for j in range(4):
                for k in range(2):  # sub-block s = 8h + 2j + k covers out[y + 128h + 32j + 16k ...]
                    sc = ld2(w, r, o + 8 * h + 2 * j + k)
                    dl, ml = d * np.float32(sc & 15), dmin * np.float32(sc >> 4)
                    qo, yo = o + 16 + 32 * h + 16 * k, y + 128 * h + 32 * j + 16 * k
                    for l in range(16):
                        q = np.float32(np.uint8((ld2(w, r, qo + l) >> (2 * j)) & 3))
                        st2(out, i, yo + l, dl * q - ml)


@njit(inline="always")
def dq_q3_k(w, r, out, i):
    # dequantize_row_q3_K: q = crumb - 4 unless the hmask bit (4h + j) of byte l is set
    for b in range(w.shape[1] // 110):
        o, y = 110 * b, 256 * b
        d = f16_at(w, r, o + 108)
        for h in range(2):
            for j in range(4):
                for k in range(2):
                    dl = d * q3_k_scale(w, r, o + 96, 8 * h + 2 * j + k)
                    for l in range(16):
                        lane = 16 * k + l
                        q = np.float32(np.uint8((ld2(w, r, o + 32 + 32 * h + lane) >> (2 * j)) & 3))
                        hb = bit_as(ld2(w, r, o + lane), 1 << (4 * h + j), np.float32(4))
                        st2(out, i, y + 128 * h + 32 * j + lane, dl * (q + hb - np.float32(4)))


@njit(inline="always")
def dq_q4_k(w, r, out, i):
    for b in range(w.shape[1] // 144):
        o, y = 144 * b, 256 * b
        d, dmin = f16_at(w, r, o), f16_at(w, r, o + 2)
        for j in range(4):  # 32 bytes: low nibbles are sub-block 2j, high nibbles 2j + 1
            sc0, m0 = k4_scale_min(w, r, o + 4, 2 * j)
            sc1, m1 = k4_scale_min(w, r, o + 4, 2 * j + 1)
            d0, d1, n0, n1 = d * sc0, d * sc1, dmin * m0, dmin * m1
            for l in range(32):
                v = ld2(w, r, o + 16 + 32 * j + l)
                st2(out, i, y + 64 * j + l, d0 * lo4(v) - n0)
                st2(out, i, y + 64 * j + 32 + l, d1 * hi4(v) - n1)


@njit(inline="always")
def dq_q5_k(w, r, out, i):
    for b in range(w.shape[1] // 176):
        o, y = 176 * b, 256 * b
        d, dmin = f16_at(w, r, o), f16_at(w, r, o + 2)
        for j in range(4):
            sc0, m0 = k4_scale_min(w, r, o + 4, 2 * j)
            sc1, m1 = k4_scale_min(w, r, o + 4, 2 * j + 1)
            d0, d1, n0, n1 = d * sc0, d * sc1, dmin * m0, dmin * m1
            for l in range(32):
                v, hb = ld2(w, r, o + 48 + 32 * j + l), ld2(w, r, o + 16 + l)
                q0 = lo4(v) + bit_as(hb, 1 << (2 * j), np.float32(16))
                q1 = hi4(v) + bit_as(hb, 2 << (2 * j), np.float32(16))
                st2(out, i, y + 64 * j + l, d0 * q0 - n0)
                st2(out, i, y + 64 * j + 32 + l, d1 * q1 - n1)


@njit(inline="always")
def dq_q6_k(w, r, out, i):
    # dequantize_row_q6_K: per half, byte l of ql/qh feeds outputs l, l+32, l+64, l+96
    for b in range(w.shape[1] // 210):
        o, y = 210 * b, 256 * b
        d = f16_at(w, r, o + 208)
        for h in range(2):
            for k in range(2):  # lanes 16k .. 16k+15 share scales
                s = o + 192 + 8 * h + k
                d1 = d * np.float32(np.int8(ld2(w, r, s)))
                d2 = d * np.float32(np.int8(ld2(w, r, s + 2)))
                d3 = d * np.float32(np.int8(ld2(w, r, s + 4)))
                d4 = d * np.float32(np.int8(ld2(w, r, s + 6)))
                for e in range(16):
                    l = 16 * k + e
                    a, c = ld2(w, r, o + 64 * h + l), ld2(w, r, o + 64 * h + 32 + l)
                    hb = ld2(w, r, o + 128 + 32 * h + l)
                    q1 = np.float32(np.uint8((a & 15) | ((hb & 3) << 4))) - np.float32(32)
                    q2 = np.float32(np.uint8((c & 15) | ((hb & 12) << 2))) - np.float32(32)
                    q3 = np.float32(np.uint8((a >> 4) | (hb & 48))) - np.float32(32)
                    q4 = np.float32(np.uint8((c >> 4) | ((hb & 192) >> 2))) - np.float32(32)
                    st2(out, i, y + 128 * h + l, d1 * q1)
                    st2(out, i, y + 128 * h + 32 + l, d2 * q2)
                    st2(out, i, y + 128 * h + 64 + l, d3 * q3)
                    st2(out, i, y + 128 * h + 96 + l, d4 * q4)


@njit(inline="always")
def dq_iq4_nl(w, r, out, i):
    grid = IQ4_NL_GRID
    for b in range(w.shape[1] // 18):
        o, y = 18 * b, 32 * b
        d = f16_at(w, r, o)
        for j in range(16):
            v = ld2(w, r, o + 2 + j)
            st2(out, i, y + j, d * ld(grid, v & 15))
            st2(out, i, y + 16 + j, d * ld(grid, v >> 4))


@njit(inline="always")
def dq_iq4_xs(w, r, out, i):
    grid = IQ4_NL_GRID
    for b in range(w.shape[1] // 136):
        o, y = 136 * b, 256 * b
        d = f16_at(w, r, o)
        for ib in range(8):
            dl = d * iq4_xs_scale(w, r, o, ib)
            for j in range(16):
                v = ld2(w, r, o + 8 + 16 * ib + j)
                st2(out, i, y + 32 * ib + j, dl * ld(grid, v & 15))
                st2(out, i, y + 32 * ib + 16 + j, dl * ld(grid, v >> 4))


# ----------------------------------------------------------------------------------------------
# Parallel kernels: out[i] <- row ids[i] (a tile of a matmul passes consecutive ids; an embedding
# lookup passes token ids). No FMA contraction here, so rows are bit-identical to the numpy twins.
# One per type so that only the types a model uses get compiled: numba cannot cache kernels built
# by a factory or taking a function argument.


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_f32(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_f32(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_f16(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_f16(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_bf16(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_bf16(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q4_0(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q4_0(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q4_1(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q4_1(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q5_0(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q5_0(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q5_1(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q5_1(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q8_0(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q8_0(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q2_k(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q2_k(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q3_k(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q3_k(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q4_k(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q4_k(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q5_k(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q5_k(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_q6_k(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_q6_k(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_iq4_nl(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_iq4_nl(w, ids[i], out, i)


@njit(parallel=True, cache=True, nogil=NOGIL)
def rows_iq4_xs(w, ids, out):
    for i in prange(ids.shape[0]):
        dq_iq4_xs(w, ids[i], out, i)


ROW_KERNELS = {
    GGMLType.F32: rows_f32,
    GGMLType.F16: rows_f16,
    GGMLType.BF16: rows_bf16,
    GGMLType.Q4_0: rows_q4_0,
    GGMLType.Q4_1: rows_q4_1,
    GGMLType.Q5_0: rows_q5_0,
    GGMLType.Q5_1: rows_q5_1,
    GGMLType.Q8_0: rows_q8_0,
    GGMLType.Q2_K: rows_q2_k,
    GGMLType.Q3_K: rows_q3_k,
    GGMLType.Q4_K: rows_q4_k,
    GGMLType.Q5_K: rows_q5_k,
    GGMLType.Q6_K: rows_q6_k,
    GGMLType.IQ4_NL: rows_iq4_nl,
    GGMLType.IQ4_XS: rows_iq4_xs,
}


def call_kernel(kernel, *args) -> None:
    """Run a numba kernel; a call that compiles it (first call per signature) does so with SLP
    vectorisation on. The flag is read only while compiling, so setting it costs two stores."""
    old = numba.config.SLP_VECTORIZE
    numba.config.SLP_VECTORIZE = 1
    try:
        return kernel(*args)
    finally:
        numba.config.SLP_VECTORIZE = old


def output_array(out: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    """`out` checked to be a C-contiguous float32 array of `shape`, or a new one."""
    if out is None:
        return np.empty(shape, np.float32)
    if out.shape != shape or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous float32 {shape}, got {out.dtype} {out.shape}")
    return out


def weight_view(w_blocks: np.ndarray, ggml_type: GGMLType) -> np.ndarray:
    """The array a kernel takes: float32 / uint16 [rows, n] for plain floats, else the bytes."""
    if ggml_type == GGMLType.F32:
        return w_blocks.view(np.float32)
    if ggml_type in (GGMLType.F16, GGMLType.BF16):
        return w_blocks.view(np.uint16)
    return w_blocks


def dequantize_rows(w_blocks: np.ndarray, ggml_type: int, ids: np.ndarray,
                    out: np.ndarray | None = None) -> np.ndarray:
    """Rows `ids` of a quantized matrix (uint8 [rows, row_bytes]) as float32 [len(ids), n]."""
    ggml_type = GGMLType(ggml_type)
    kernel = ROW_KERNELS.get(ggml_type)
    if kernel is None:
        raise NotImplementedError(f"no CPU kernel for tensor type {ggml_type.name}")
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    rows = w_blocks.shape[0]
    if ids.size and (ids.min() < 0 or ids.max() >= rows):
        raise IndexError(f"row id out of range [0, {rows})")
    n = row_length(w_blocks.shape[1], ggml_type)
    out = output_array(out, (ids.size, n))
    call_kernel(kernel, weight_view(w_blocks, ggml_type), ids, out)
    return out


def row_length(row_bytes: int, ggml_type: int) -> int:
    """Weights per row from bytes per row."""
    block, size = GGML_QUANT_SIZES[GGMLType(ggml_type)]
    return row_bytes // size * block
