"""KV cache cells as ggml blocks (-ctk / -ctv): the store kernels that quantize key and value rows
into them, and the loaders the attention kernels read them with, eight values at a time.

A cache of a block type is uint8 [seq, pos, head, row_bytes]: each head's row of d values is
d / 32 ggml blocks (block_q8_0, block_q4_0, ...), the bytes llama.cpp's ggml_cpy writes into its
K/V tensors. The block quantizers are ports of ggml-quants.c's quantize_row_*_ref (IQ4_NL:
quantize_iq4_nl without an imatrix, from quants/kquantize.py), the same float32 operations in the
same order, so the bytes equal quants/'s numpy quantizers (tested). bf16 is uint16 [seq, pos,
head, d] (the top half of each float32, rounded to nearest even); f16 and f32 stay in
kv_store.py and attention.py as before.

`row8(tag, a, r, i)` is the F32x8 of values i..i + 7 (i a multiple of 8) of row r of a 2-D view
of such a cache, of the type `tag` stands for: the attention kernels read K and V through it and
dequantize in registers where they read, so no dequantized copy of the cache is ever made. It
gives exactly the numpy dequantizers' values (d * q + m unfused, as dequantize_row_q4_1 does).
A tag (TAGS) is a zero-length array whose dtype names the KV type to numba: the loader is chosen
when the kernel compiles, and numba's cache keys on it (a function passed as an argument would
be typed by its address, so every process would compile again).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import overload
from numba.np.numpy_support import from_dtype
from numba.extending import intrinsic

from ..format.constants import GGMLType
from ..quants.kquantize import _iq4_nl_blocks, _put_f16
from .dequant import f16_at, ld
from .simd import (F32x8, _item_ptr, _is_array, _load, _vt, bytes_f32, f32x8_add, f32x8_mul,
                   load_row8, load_u32, sbytes_f32)
from .threading_layer import NOGIL

F = np.float32

# -ctk / -ctv names (llama.cpp common/arg.cpp kv_cache_types, in its order) -> ggml type
KV_TYPES = {"f32": GGMLType.F32, "f16": GGMLType.F16, "bf16": GGMLType.BF16,
            "q8_0": GGMLType.Q8_0, "q4_0": GGMLType.Q4_0, "q4_1": GGMLType.Q4_1,
            "iq4_nl": GGMLType.IQ4_NL, "q5_0": GGMLType.Q5_0, "q5_1": GGMLType.Q5_1}
FLOAT_TYPES = ("f32", "f16", "bf16")
BLOCK = 32  # values per block of every quantized KV type
BLOCK_BYTES = {"q8_0": 34, "q4_0": 18, "q4_1": 20, "iq4_nl": 18, "q5_0": 22, "q5_1": 24}

jit = njit(cache=True, error_model="numpy", inline="always")

# KV type -> its tag: a zero-length array of a dtype no other KV type's tag has
TAG_DTYPES = {"f32": np.float32, "f16": np.uint16, "bf16": np.int16, "q8_0": np.int8,
              "q4_0": np.uint8, "q4_1": np.int32, "iq4_nl": np.uint32, "q5_0": np.int64,
              "q5_1": np.uint64}
TAGS = {name: np.empty(0, dtype) for name, dtype in TAG_DTYPES.items()}
FLOAT_TAG = TAGS["f32"]  # f16 and f32 caches: load_row8 reads both by their dtype
TAG_NAMES = {from_dtype(np.dtype(dtype)): name for name, dtype in TAG_DTYPES.items()}


def is_quantized(name: str) -> bool:
    """A block type (ggml_is_quantized): llama.cpp attends on it only with flash attention."""
    return name in BLOCK_BYTES


def row_units(name: str, d: int) -> int:
    """Array items per head row of d values: bytes for a block type, values for a float type."""
    return d // BLOCK * BLOCK_BYTES[name] if is_quantized(name) else d


# ----------------------------------------------------------------------------------------------
# block quantizers: x float32 [n_blocks, 32] -> y uint8 [n_blocks, block bytes]


@jit
def _roundf(v):
    """C roundf (halves away from zero), exactly: |v| - trunc(|v|) is exact."""
    a = abs(v)
    whole = F(np.floor(a))
    r = whole + F(1) if a - whole >= F(0.5) else whole
    return r if v >= 0 else -r


@jit
def _signed_absmax(x):
    """The first value of largest magnitude (quantize_row_q4_0_ref's scan, from max = 0)."""
    amax, vmax = F(0), F(0)
    for j in range(BLOCK):
        if amax < abs(x[j]):
            amax, vmax = abs(x[j]), x[j]
    return vmax


@jit
def _min_max(x):
    lo, hi = F(np.inf), F(-np.inf)  # the C starts from +-FLT_MAX: the same for finite rows
    for j in range(BLOCK):
        if x[j] < lo:
            lo = x[j]
        if x[j] > hi:
            hi = x[j]
    return lo, hi


@jit
def _inverse(d):
    return F(1) / d if d != 0 else F(0)


@jit
def _symmetric_scale(x, y, b, levels):
    """d = the signed absmax / -levels into block b's header; returns 1 / d (q4_0, q5_0)."""
    d = _signed_absmax(x[b]) / F(-levels)
    _put_f16(y[b], 0, d)
    return _inverse(d)


@jit
def _min_scale(x, y, b, levels):
    """d = (max - min) / levels and the min into block b's header; returns (min, 1 / d)
    (q4_1, q5_1)."""
    lo, hi = _min_max(x[b])
    d = (hi - lo) / F(levels)
    _put_f16(y[b], 0, d)
    _put_f16(y[b], 2, lo)
    return lo, _inverse(d)


@njit(cache=True, error_model="numpy")
def quantize_q8_0(x, y):
    """quantize_row_q8_0_ref."""
    for b in range(x.shape[0]):
        amax = F(0)
        for j in range(BLOCK):
            amax = max(amax, abs(x[b, j]))
        d = amax / F(127)
        idn = _inverse(d)
        _put_f16(y[b], 0, d)
        for j in range(BLOCK):
            y[b, 2 + j] = np.uint8(np.int8(_roundf(x[b, j] * idn)))


@njit(cache=True, error_model="numpy")
def quantize_q4_0(x, y):
    """quantize_row_q4_0_ref."""
    for b in range(x.shape[0]):
        idn = _symmetric_scale(x, y, b, 8)
        for j in range(16):
            lo = min(15, np.int8(x[b, j] * idn + F(8.5)))
            hi = min(15, np.int8(x[b, 16 + j] * idn + F(8.5)))
            y[b, 2 + j] = np.uint8(lo | (hi << 4))


@njit(cache=True, error_model="numpy")
def quantize_q4_1(x, y):
    """quantize_row_q4_1_ref."""
    for b in range(x.shape[0]):
        lo, idn = _min_scale(x, y, b, 15)
        for j in range(16):
            q0 = min(15, np.int8((x[b, j] - lo) * idn + F(0.5)))
            q1 = min(15, np.int8((x[b, 16 + j] - lo) * idn + F(0.5)))
            y[b, 4 + j] = np.uint8(q0 | (q1 << 4))


@jit
def _put_q5(y, b, o, j, q0, q1, qh):
    """Quants j and 16 + j of a Q5 block: low nibbles into the bytes at o, fifth bits into qh."""
    y[b, o + j] = np.uint8((q0 & 15) | ((q1 & 15) << 4))
    return qh | (((q0 & 16) >> 4) << j) | (((q1 & 16) >> 4) << (j + 16))


@jit
def _put_u32(y, b, o, v):
    for k in range(4):
        y[b, o + k] = np.uint8((v >> (8 * k)) & 255)


@njit(cache=True, error_model="numpy")
def quantize_q5_0(x, y):
    """quantize_row_q5_0_ref."""
    for b in range(x.shape[0]):
        idn = _symmetric_scale(x, y, b, 16)
        qh = np.int64(0)
        for j in range(16):
            q0 = np.int64(min(31, np.int8(x[b, j] * idn + F(16.5))))
            q1 = np.int64(min(31, np.int8(x[b, 16 + j] * idn + F(16.5))))
            qh = _put_q5(y, b, 6, j, q0, q1, qh)
        _put_u32(y, b, 2, qh)


@njit(cache=True, error_model="numpy")
def quantize_q5_1(x, y):
    """quantize_row_q5_1_ref."""
    for b in range(x.shape[0]):
        lo, idn = _min_scale(x, y, b, 31)
        qh = np.int64(0)
        for j in range(16):
            q0 = np.int64(np.uint8((x[b, j] - lo) * idn + F(0.5)))
            q1 = np.int64(np.uint8((x[b, 16 + j] - lo) * idn + F(0.5)))
            qh = _put_q5(y, b, 8, j, q0, q1, qh)
        _put_u32(y, b, 4, qh)


QUANTIZERS = {"q8_0": quantize_q8_0, "q4_0": quantize_q4_0, "q4_1": quantize_q4_1,
              "iq4_nl": _iq4_nl_blocks, "q5_0": quantize_q5_0, "q5_1": quantize_q5_1}


# ----------------------------------------------------------------------------------------------
# the Hadamard rotation of quantized K / V (llama_kv_cache's attn_rot_k / attn_rot_v)


@njit(cache=True, nogil=NOGIL)
def hadamard_rows(x, n, out):
    """out = each run of n values of the rows of x float32 [rows, width] times the orthonormal
    Walsh-Hadamard matrix of size n (ggml_gen_hadamard's, symmetric): a fast transform, the same
    operations for a row whatever else the batch holds, so a token's K bytes do not depend on
    which tokens it was decoded with."""
    scale = F(1) / np.sqrt(F(n))
    for r in range(x.shape[0]):
        for c0 in range(0, x.shape[1], n):
            for k in range(c0, c0 + n):
                out[r, k] = x[r, k] * scale
            h = 1
            while h < n:
                for i in range(c0, c0 + n, 2 * h):
                    for j in range(i, i + h):
                        a, b = out[r, j], out[r, j + h]
                        out[r, j], out[r, j + h] = a + b, a - b
                h *= 2


# ----------------------------------------------------------------------------------------------
# store kernels


def quantize_blocks(tag, x, y):
    """The quantizer of the block type `tag` stands for: x [n, 32] -> y [n, block bytes]."""
    raise NotImplementedError  # compiled through the overload below


@overload(quantize_blocks, inline="always")
def _quantize_blocks(tag, x, y):
    kernel = QUANTIZERS[TAG_NAMES[tag.dtype]]
    return lambda tag, x, y: kernel(x, y)


@njit(cache=True, nogil=NOGIL, error_model="numpy")
def store_rows_blocks(cache, seqs, positions, x, tag):
    """Row i of x float32 [n, n_head_kv, d] into cache uint8 [seq, pos, head, row_bytes] at
    sequence seqs[i], position positions[i], as d / 32 blocks of the type `tag` stands for."""
    nb = x.shape[2] // BLOCK
    for i in range(x.shape[0]):
        for h in range(x.shape[1]):
            row = cache[seqs[i], positions[i], h]
            quantize_blocks(tag, x[i, h].reshape(nb, BLOCK), row.reshape(nb, row.shape[0] // nb))


@njit(cache=True, nogil=NOGIL)
def store_rows_bf16(cache, seqs, positions, bits):
    """bits: float32 [n, n_head_kv, d] viewed as uint32 -> bf16 (ggml_compute_fp32_to_bf16:
    round to nearest even, NaN kept quiet) in cache uint16 [seq, pos, head, d]."""
    for i in range(bits.shape[0]):
        for h in range(bits.shape[1]):
            for c in range(bits.shape[2]):
                u = np.uint32(bits[i, h, c])
                if (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000):
                    r = (u >> np.uint32(16)) | np.uint32(64)
                else:
                    r = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) \
                        >> np.uint32(16)
                cache[seqs[i], positions[i], h, c] = np.uint16(r)


def store_rows(cache: np.ndarray, name: str, seqs: np.ndarray, positions: np.ndarray,
               x: np.ndarray) -> None:
    """Rows of x float32 [n, n_head_kv, d] into a cache of type `name` (bf16 or a block type)."""
    x = np.ascontiguousarray(x, np.float32)
    if name == "bf16":
        store_rows_bf16(cache, seqs, positions, x.view(np.uint32))
    else:
        store_rows_blocks(cache, seqs, positions, x, TAGS[name])


# ----------------------------------------------------------------------------------------------
# loaders: F32x8 of values i..i + 7 of row r (rows of a 2-D view, one position per row)


@intrinsic
def load_bf16x8(typingctx, a, r, i):
    """a[r, i:i + 8] of a 2-D uint16 array of bf16 bits, as float32 (each shifted up 16 bits)."""
    if not _is_array(a, 2, types.uint16):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        i32x8 = ir.VectorType(ir.IntType(32), 8)
        wide = builder.zext(_load(builder, ptr, ir.VectorType(ir.IntType(16), 8)), i32x8)
        return builder.bitcast(builder.shl(wide, ir.Constant(i32x8, [16] * 8)), _vt(F32x8))

    return F32x8(a, r, i), codegen


@jit
def row8_float(a, r, i):  # float32, or uint16 fp16 bits
    return load_row8(a, r, i)


@jit
def row8_bf16(a, r, i):
    return load_bf16x8(a, r, i)


@jit
def _nibbles(a, r, o, j):
    """The 8 quants j..j + 7 (j < 32, a multiple of 8) of the 16 nibble bytes at o, as two uint32
    of one byte each: quants 0-15 are the low nibbles, 16-31 the high ones."""
    at, shift = o + (j & 15), (j >> 4) << 2
    lo = (np.int64(load_u32(a, r, at)) >> shift) & 0x0F0F0F0F
    hi = (np.int64(load_u32(a, r, at + 4)) >> shift) & 0x0F0F0F0F
    return lo, hi


@jit
def _spread4(bits):
    """Four bits into the low bit of four bytes (the shifted copies do not overlap)."""
    return (bits * 0x00204081) & 0x01010101


@jit
def _with_fifth_bits(a, r, qh_at, j, lo, hi):
    """Quants j..j + 7 of a Q5 block: nibbles `lo`, `hi` plus bits j.. of the uint32 qh."""
    bits = (np.int64(load_u32(a, r, qh_at)) >> j) & 255
    return lo | (_spread4(bits & 15) << 4), hi | (_spread4(bits >> 4) << 4)


@jit
def row8_q8_0(a, r, i):
    o = (i >> 5) * 34
    at = o + 2 + (i & 31)
    q = sbytes_f32(load_u32(a, r, at), load_u32(a, r, at + 4))
    return f32x8_mul(q, f16_at(a, r, o))


@jit
def row8_q4_0(a, r, i):
    o = (i >> 5) * 18
    lo, hi = _nibbles(a, r, o + 2, i & 31)
    return f32x8_mul(f32x8_add(bytes_f32(lo, hi), F(-8)), f16_at(a, r, o))


@jit
def row8_q4_1(a, r, i):
    o = (i >> 5) * 20
    lo, hi = _nibbles(a, r, o + 4, i & 31)
    return f32x8_add(f32x8_mul(bytes_f32(lo, hi), f16_at(a, r, o)), f16_at(a, r, o + 2))


@jit
def row8_q5_0(a, r, i):
    o, j = (i >> 5) * 22, i & 31
    lo, hi = _nibbles(a, r, o + 6, j)
    lo, hi = _with_fifth_bits(a, r, o + 2, j, lo, hi)
    return f32x8_mul(f32x8_add(bytes_f32(lo, hi), F(-16)), f16_at(a, r, o))


@jit
def row8_q5_1(a, r, i):
    o, j = (i >> 5) * 24, i & 31
    lo, hi = _nibbles(a, r, o + 8, j)
    lo, hi = _with_fifth_bits(a, r, o + 4, j, lo, hi)
    return f32x8_add(f32x8_mul(bytes_f32(lo, hi), f16_at(a, r, o)), f16_at(a, r, o + 2))


# kvalues_iq4nl as the bytes of int8
IQ4_NL_BYTES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                        dtype=np.int8).view(np.uint8).astype(np.int64)


@jit
def _grid4(v):
    """Four nibbles (one per byte of v) through the IQ4_NL grid, as four int8 bytes."""
    g = IQ4_NL_BYTES
    return (ld(g, v & 15) | (ld(g, (v >> 8) & 15) << 8) | (ld(g, (v >> 16) & 15) << 16)
            | (ld(g, (v >> 24) & 15) << 24))


@jit
def row8_iq4_nl(a, r, i):
    o = (i >> 5) * 18
    lo, hi = _nibbles(a, r, o + 2, i & 31)
    return f32x8_mul(sbytes_f32(_grid4(lo), _grid4(hi)), f16_at(a, r, o))


ROW8 = {"f32": row8_float, "f16": row8_float, "bf16": row8_bf16, "q8_0": row8_q8_0,
        "q4_0": row8_q4_0, "q4_1": row8_q4_1, "iq4_nl": row8_iq4_nl, "q5_0": row8_q5_0,
        "q5_1": row8_q5_1}


def row8(tag, a, r, i):
    """F32x8 of values i..i + 7 of row r of `a`, a cache of the type `tag` stands for."""
    raise NotImplementedError  # compiled through the overload below


@overload(row8, inline="always")
def _row8(tag, a, r, i):
    load = ROW8[TAG_NAMES[tag.dtype]]
    return lambda tag, a, r, i: load(a, r, i)


# ----------------------------------------------------------------------------------------------
# whole rows as float32, for the prompt path (a tile of keys at a time) and the numpy twins


def dequantize_cells(cells: np.ndarray, name: str) -> np.ndarray:
    """float32 [..., d] of cache cells [..., row_units] of type `name`."""
    from .dequant import dequantize_rows

    if name == "f32":
        return cells
    lead, width = cells.shape[:-1], cells.shape[-1]
    if name == "f16":
        return cells.view(np.float16).astype(np.float32)
    rows = np.ascontiguousarray(cells).reshape(-1, width).view(np.uint8)
    if rows.shape[0] == 0:
        d = width if name == "bf16" else width // BLOCK_BYTES[name] * BLOCK
        return np.empty((*lead, d), np.float32)
    out = dequantize_rows(rows, KV_TYPES[name], np.arange(rows.shape[0]))
    return out.reshape(*lead, out.shape[1])
