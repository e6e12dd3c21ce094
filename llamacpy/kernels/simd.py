"""Short SIMD vectors as numba values (LLVM vector types), for the decode kernels' inner loops.

numba has no vector type: kernels written with arrays and lane loops leave the accumulators in
memory (a heap array per row, reloaded and stored around every FMA) and let the loop vectoriser
guess. These values live in registers, and each operation below is one or a few LLVM vector
instructions in target-independent IR, so the kernels run anywhere LLVM does; on x86 with AVX2
they become vpmaddwd, vpand, vpsrlw, vcvtdq2ps, vcvtph2ps and vfmadd231ps on ymm registers.

Types: F32x8 (8 float32), I32x8 (8 int32), I16x16 (16 int16). Loads and stores take an array and
non-negative indices and check nothing (like dequant.ld): the kernels keep them in bounds.
Vectors of a uint8 weight matrix w [rows, row_bytes] are read at byte offsets: `load_w16(w, r, o)`
is the 32 bytes w[r, o:o + 32] as 16 little-endian words.
"""

from __future__ import annotations

import llvmlite.binding as llvm
import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

F32, I8, I16, I32 = ir.FloatType(), ir.IntType(8), ir.IntType(16), ir.IntType(32)
# LLVM does not always find vpmaddwd in the generic pattern of `madd` (it missed it when one
# operand is a masked byte), so when numba compiles for this AVX2 host `madd` calls the
# instruction's intrinsic.
# (numba compiles for the host unless told otherwise: NUMBA_CPU_NAME is the portable build)
_FEATURES = llvm.get_host_cpu_features()
HAS_AVX2 = bool(_FEATURES.get("avx2", False)) and not numba.config.CPU_NAME


class VecType(types.Type):
    """A SIMD vector of `n` lanes of the numba scalar type `elem`."""

    def __init__(self, elem, n: int):
        self.elem, self.n = elem, n
        super().__init__(name=f"{elem}x{n}")


@register_model(VecType)
class VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        elem = dmm.lookup(fe_type.elem).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(elem, fe_type.n))


F32x8 = VecType(types.float32, 8)
I32x8 = VecType(types.int32, 8)
I16x16 = VecType(types.int16, 16)
# 512-bit values, for the decode kernels that are compute-bound at ymm width (see the end)
I16x32 = VecType(types.int16, 32)
I32x16 = VecType(types.int32, 16)
F32x16 = VecType(types.float32, 16)
HAS_AVX512BW = bool(_FEATURES.get("avx512bw", False)) and not numba.config.CPU_NAME
# AVX-512 VNNI (vpdpwssd) on zmm; on ymm it also needs AVX-512VL
HAS_VNNI = HAS_AVX512BW and bool(_FEATURES.get("avx512vnni"))
HAS_VNNI_YMM = HAS_VNNI and bool(_FEATURES.get("avx512vl"))
# Zen 4 executes each 512-bit instruction as two 256-bit halves (Zen 5 and Intel's AVX-512
# cores do not): where a zmm kernel only saves instructions, its ymm twin can be the faster one
HALF_WIDTH_512 = HAS_AVX512BW and llvm.get_host_cpu_name() == "znver4"


# ------------------------------------------------------------------------------- IR helpers


def _vt(vec: VecType) -> ir.VectorType:
    return ir.VectorType({types.float32: F32, types.int32: I32, types.int16: I16}[vec.elem], vec.n)


def _splat(builder, value, vt: ir.VectorType):
    """`value` (an LLVM scalar of vt's element type) in every lane."""
    one = builder.insert_element(ir.Constant(vt, ir.Undefined), value, ir.Constant(I32, 0))
    zeros = ir.Constant(ir.VectorType(I32, vt.count), [0] * vt.count)
    return builder.shuffle_vector(one, ir.Constant(vt, ir.Undefined), zeros)


def _lanes(builder, v, idx: list[int]):
    """The lanes `idx` of v, as a new vector."""
    und = ir.Constant(v.type, ir.Undefined)
    return builder.shuffle_vector(v, und, ir.Constant(ir.VectorType(I32, len(idx)), idx))


def _fma(builder, a, b, c):
    vt = a.type
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                        f"llvm.fma.v{vt.count}f32")
    return builder.call(fn, [a, b, c])


def _item_ptr(context, builder, aryty, ary, inds, indtys):
    a = context.make_array(aryty)(context, builder, ary)
    idx = [context.cast(builder, v, t, types.intp) for v, t in zip(inds, indtys)]
    return cgutils.get_item_pointer(context, builder, aryty, a, idx, wraparound=False)


def _load(builder, ptr, vt):
    return builder.load(builder.bitcast(ptr, vt.as_pointer()), align=1)


def _store(builder, value, ptr):
    builder.store(value, builder.bitcast(ptr, value.type.as_pointer()), align=1)


def _is_array(ary, ndim: int, *dtypes) -> bool:
    return isinstance(ary, types.Array) and ary.ndim == ndim and ary.dtype in dtypes


def _is_scalar(ty) -> bool:
    return isinstance(ty, (types.Float, types.Integer))


def _f32x8_or_scalar(context, builder, value, ty):
    if ty == F32x8:
        return value
    return _splat(builder, context.cast(builder, value, ty, types.float32), _vt(F32x8))


def _load_codegen(vec: VecType):
    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        return _load(builder, ptr, _vt(vec))

    return codegen


def _loader_1d(dtype, vec: VecType, doc: str):
    """An intrinsic reading `vec` from a 1-D array of `dtype` at index i."""
    def typer(typingctx, a, i):
        return (vec(a, i), _load_codegen(vec)) if _is_array(a, 1, dtype) else None

    typer.__doc__ = doc
    return intrinsic(typer)


# ------------------------------------------------------------------------------ loads, stores

UINT8 = (types.uint8,)
load_i16 = _loader_1d(types.int16, I16x16, "a[i:i + 16] of an int16 array.")
load_i32 = _loader_1d(types.int32, I32x8, "a[i:i + 8] of an int32 array.")
load_f32 = _loader_1d(types.float32, F32x8, "a[i:i + 8] of a float32 array.")


def _parity_loader(first: int, doc: str):
    """An intrinsic reading 8 alternate lanes of a[i:i + 16] (a 1-D float32 array)."""
    def typer(typingctx, a, i):
        if not _is_array(a, 1, types.float32):
            return None

        def codegen(context, builder, sig, args):
            ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
            return _lanes(builder, _load(builder, ptr, ir.VectorType(F32, 16)),
                          list(range(first, 16, 2)))

        return F32x8(a, i), codegen

    typer.__doc__ = doc
    return intrinsic(typer)


load_f32_even = _parity_loader(0, "F32x8 [a[i], a[i + 2], ..., a[i + 14]] of a float32 array.")
load_f32_odd = _parity_loader(1, "F32x8 [a[i + 1], a[i + 3], ..., a[i + 15]] of a float32 array.")


@intrinsic
def load_w16(typingctx, w, r, o):
    """The 32 bytes w[r, o:o + 32] as 16 little-endian words."""
    return (I16x16(w, r, o), _load_codegen(I16x16)) if _is_array(w, 2, *UINT8) else None


@intrinsic
def load_f32_bytes(typingctx, w, r, o):
    """F32x8: the 32 bytes w[r, o:o + 32] as 8 little-endian float32."""
    return (F32x8(w, r, o), _load_codegen(F32x8)) if _is_array(w, 2, *UINT8) else None


@intrinsic
def i16_splats(typingctx, w, r, o):
    """Four I16x16 from the two int16 a, b at bytes o, o + 2 of row r: [a] * 16, [b] * 16, and
    the same two again (the shape `_group_scales` returns)."""
    if not _is_array(w, 2, *UINT8):
        return None
    retty = types.UniTuple(I16x16, 4)

    def codegen(context, builder, sig, args):
        ptr = builder.bitcast(_item_ptr(context, builder, sig.args[0], args[0], args[1:],
                                        sig.args[1:]), I16.as_pointer())
        # two scalar loads: each splat becomes one vpbroadcastw from memory
        a = builder.load(ptr, align=1)
        b = builder.load(builder.gep(ptr, [ir.Constant(I32, 1)]), align=1)
        va, vb = _splat(builder, a, _vt(I16x16)), _splat(builder, b, _vt(I16x16))
        return context.make_tuple(builder, retty, [va, vb, va, vb])

    return retty(w, r, o), codegen


@intrinsic
def load_i8_words(typingctx, w, r, o):
    """I16x16: the 16 bytes w[r, o:o + 16] as int8, sign-extended (one vpmovsxbw from memory)."""
    if not _is_array(w, 2, *UINT8):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        return builder.sext(_load(builder, ptr, ir.VectorType(I8, 16)), _vt(I16x16))

    return I16x16(w, r, o), codegen


@intrinsic
def load_nibble_words(typingctx, w, r, o):
    """I16x16: the 16 bytes w[r, o:o + 16] as 8 little-endian words, then the same 8 words
    shifted right by 4, so that the low nibbles of the first 8 words and of the last 8 are the
    low and the high nibbles of the 16 bytes (32 four-bit quants: Q4_0, Q4_1)."""
    if not _is_array(w, 2, *UINT8):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        v = _load(builder, ptr, ir.VectorType(I16, 8))
        hi = builder.lshr(v, ir.Constant(ir.VectorType(I16, 8), [4] * 8))
        return builder.shuffle_vector(v, hi, ir.Constant(ir.VectorType(I32, 16), list(range(16))))

    return I16x16(w, r, o), codegen


@intrinsic
def load_nibbles(typingctx, w, r, o):
    """I16x16 whose byte p is nibble p of the 16 bytes w[r, o:o + 16]: the low nibbles of bytes
    0-15, then their high nibbles (the quant order of Q4_0 / Q4_1 / Q5_0 / IQ4_NL blocks).
    One 128-bit broadcast, one variable dword shift (the high half by 4), one mask."""
    if not _is_array(w, 2, *UINT8):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        v16 = _load(builder, ptr, ir.VectorType(I8, 16))
        both = builder.shuffle_vector(v16, v16, ir.Constant(ir.VectorType(I32, 32),
                                                            list(range(16)) * 2))
        v8 = ir.VectorType(I32, 8)
        shifted = builder.lshr(builder.bitcast(both, v8), ir.Constant(v8, [0] * 4 + [4] * 4))
        masked = builder.and_(builder.bitcast(shifted, ir.VectorType(I8, 32)),
                              ir.Constant(ir.VectorType(I8, 32), [15] * 32))
        return builder.bitcast(masked, _vt(I16x16))

    return I16x16(w, r, o), codegen


@intrinsic
def bit_bytes(typingctx, w, r, o, if_set, if_clear):
    """I16x16 whose byte p (little-endian in the words) is `if_set` where bit p of the uint32 at
    bytes w[r, o:o + 4] is set, else `if_clear`: Q5_0's fifth bits spread over the quant bytes of
    `load_nibbles` (broadcast, vpshufb, vpand, vpcmpeqb, vpand; bytes_from_bits_32 in ggml)."""
    if not (_is_array(w, 2, *UINT8) and isinstance(if_set, types.Integer)
            and isinstance(if_clear, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:3], sig.args[1:3])
        v32 = ir.VectorType(I8, 32)
        four = _load(builder, ptr, ir.VectorType(I8, 4))
        spread = builder.shuffle_vector(four, ir.Constant(four.type, ir.Undefined),
                                        ir.Constant(ir.VectorType(I32, 32),
                                                    [p // 8 for p in range(32)]))
        masks = ir.Constant(v32, [1 << (p % 8) for p in range(32)])
        hit = builder.icmp_unsigned("==", builder.and_(spread, masks), masks)
        fill = [_splat(builder, builder.trunc(context.cast(builder, v, t, types.int32), I8), v32)
                for v, t in zip(args[3:], sig.args[3:])]
        return builder.bitcast(builder.select(hit, *fill), _vt(I16x16))

    return I16x16(w, r, o, if_set, if_clear), codegen


@intrinsic
def shuffle_bytes(typingctx, table, v):
    """I16x16 whose byte p is table[v's byte p] for v's bytes in 0..15 (x86 vpshufb with the
    16-byte table in both halves): a 16-entry lookup, e.g. IQ4_NL's grid as int8."""
    if not (_is_array(table, 1, types.int8, types.uint8) and v == I16x16):
        return None

    def codegen(context, builder, sig, args):
        v32 = ir.VectorType(I8, 32)
        ptr = _item_ptr(context, builder, sig.args[0], args[0], [context.get_constant(types.intp, 0)],
                        [types.intp])
        t16 = _load(builder, ptr, ir.VectorType(I8, 16))
        idx = builder.bitcast(args[1], v32)
        if HAS_AVX2:
            tab = builder.shuffle_vector(t16, t16, ir.Constant(ir.VectorType(I32, 32),
                                                               list(range(16)) * 2))
            fnty = ir.FunctionType(v32, [v32, v32])
            fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.avx2.pshuf.b")
            return builder.bitcast(builder.call(fn, [tab, idx]), _vt(I16x16))
        out = ir.Constant(v32, [0] * 32)
        for p in range(32):
            k = builder.and_(builder.extract_element(idx, ir.Constant(I32, p)), ir.Constant(I8, 15))
            out = builder.insert_element(out, builder.extract_element(t16, k), ir.Constant(I32, p))
        return builder.bitcast(out, _vt(I16x16))

    return I16x16(table, v), codegen


@intrinsic
def load_row8(typingctx, a, r, i):
    """a[r, i:i + 8] of a 2-D float32 array, or of a uint16 array of fp16 bits (converted)."""
    if not _is_array(a, 2, types.float32, types.uint16):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        if sig.args[0].dtype == types.float32:
            return _load(builder, ptr, _vt(F32x8))
        halves = builder.bitcast(_load(builder, ptr, ir.VectorType(I16, 8)),
                                 ir.VectorType(ir.HalfType(), 8))
        return builder.fpext(halves, _vt(F32x8))

    return F32x8(a, r, i), codegen


@intrinsic
def store_f32(typingctx, a, i, v):
    """a[i:i + 8] = v (an F32x8; a[i:i + 16] for an F32x16) for a 1-D float32 array."""
    if not (_is_array(a, 1, types.float32) and v in (F32x8, F32x16)):
        return None

    def codegen(context, builder, sig, args):
        _store(builder, args[2], _item_ptr(context, builder, sig.args[0], args[0], args[1:2],
                                           sig.args[1:2]))
        return context.get_dummy_value()

    return types.none(a, i, v), codegen


@intrinsic
def store_i16(typingctx, a, i, v):
    """a[i:i + 16] = v for a 1-D int16 array."""
    if not (_is_array(a, 1, types.int16) and v == I16x16):
        return None

    def codegen(context, builder, sig, args):
        _store(builder, args[2], _item_ptr(context, builder, sig.args[0], args[0], args[1:2],
                                           sig.args[1:2]))
        return context.get_dummy_value()

    return types.none(a, i, v), codegen


@intrinsic
def store_rounded_i16(typingctx, a, r, c, v):
    """a[r, c:c + 8] = the lanes of v rounded to the nearest integer (ties to even, as np.rint)
    as int16, for a 2-D int16 array; the lanes must lie within [-32768, 32767]."""
    if not (_is_array(a, 2, types.int16) and v == F32x8):
        return None

    def codegen(context, builder, sig, args):
        vt = _vt(F32x8)
        rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]),
                                              "llvm.rint.v8f32")
        q = builder.trunc(builder.fptosi(builder.call(rint, [args[3]]), ir.VectorType(I32, 8)),
                          ir.VectorType(I16, 8))
        _store(builder, q, _item_ptr(context, builder, sig.args[0], args[0], args[1:3],
                                     sig.args[1:3]))
        return context.get_dummy_value()

    return types.none(a, r, c, v), codegen


def _f32_llvm_unary(name: str, doc: str):
    """An F32x8 intrinsic calling LLVM's lane-wise `llvm.<name>.v8f32`."""
    def typer(typingctx, a):
        if a != F32x8:
            return None

        def codegen(context, builder, sig, args):
            vt = _vt(F32x8)
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]),
                                                f"llvm.{name}.v8f32")
            return builder.call(fn, [args[0]])

        return F32x8(a), codegen

    typer.__doc__ = doc
    return intrinsic(typer)


f32x8_rint = _f32_llvm_unary("rint", "Each lane rounded to the nearest integer, ties to even.")
f32x8_abs = _f32_llvm_unary("fabs", "|a| lane-wise.")


@intrinsic
def store_w16(typingctx, w, r, o, v):
    """w[r, o:o + 32] = the 32 bytes of v (16 little-endian words), for a 2-D uint8 array."""
    if not (_is_array(w, 2, *UINT8) and v == I16x16):
        return None

    def codegen(context, builder, sig, args):
        _store(builder, args[3], _item_ptr(context, builder, sig.args[0], args[0], args[1:3],
                                           sig.args[1:3]))
        return context.get_dummy_value()

    return types.none(w, r, o, v), codegen


@intrinsic
def store_row8(typingctx, a, r, i, v):
    """a[r, i:i + 8] = v for a 2-D float32 array."""
    if not (_is_array(a, 2, types.float32) and v == F32x8):
        return None

    def codegen(context, builder, sig, args):
        _store(builder, args[3], _item_ptr(context, builder, sig.args[0], args[0], args[1:3],
                                           sig.args[1:3]))
        return context.get_dummy_value()

    return types.none(a, r, i, v), codegen


@intrinsic
def prefetch(typingctx, a, r, o):
    """Hint the cache line holding byte o of row r of a 2-D array into the cache. The address may
    lie past the end (a prefetch never faults), so it is computed as an integer."""
    if not (isinstance(a, types.Array) and a.ndim == 2):
        return None

    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        intp = context.get_value_type(types.intp)
        row = context.cast(builder, args[1], sig.args[1], types.intp)
        col = context.cast(builder, args[2], sig.args[2], types.intp)
        offset = builder.add(builder.mul(row, builder.extract_value(ary.strides, 0)), col)
        prefetch_ir(builder, builder.add(builder.ptrtoint(ary.data, intp), offset), 3)
        return context.get_dummy_value()

    return types.none(a, r, o), codegen


def prefetch_ir(builder, addr, locality: int) -> None:
    """A read prefetch of the data at integer address `addr` (it may lie past an array's end: a
    prefetch never faults); locality 3 keeps it in every level (prefetcht0), 2 from L2 on."""
    fnty = ir.FunctionType(ir.VoidType(), [I8.as_pointer(), I32, I32, I32])
    fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0i8")
    builder.call(fn, [builder.inttoptr(addr, I8.as_pointer()), ir.Constant(I32, 0),
                      ir.Constant(I32, locality), ir.Constant(I32, 1)])  # read, data


# ------------------------------------------------------------------------- block scale fields


@intrinsic
def load_u32(typingctx, w, r, o):
    """The little-endian uint32 at bytes w[r, o:o + 4] (any alignment)."""
    if not _is_array(w, 2, *UINT8):
        return None

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        return builder.load(builder.bitcast(ptr, I32.as_pointer()), align=1)

    return types.uint32(w, r, o), codegen


@intrinsic
def f16_pair(typingctx, w, r, o):
    """The two fp16 at bytes w[r, o:o + 4] as a tuple of float32. A 32-bit load and one
    conversion: a lone 16-bit fp16 load becomes vpinsrw into a stale register, a false dependency
    on whatever last wrote it (in a loop, often an accumulator)."""
    if not _is_array(w, 2, *UINT8):
        return None
    retty = types.UniTuple(types.float32, 2)

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        bits = builder.load(builder.bitcast(ptr, I32.as_pointer()), align=1)
        vec = builder.insert_element(ir.Constant(ir.VectorType(I32, 1), None), bits,
                                     ir.Constant(I32, 0))
        halves = builder.bitcast(vec, ir.VectorType(ir.HalfType(), 2))
        floats = builder.fpext(halves, ir.VectorType(F32, 2))
        items = [builder.extract_element(floats, ir.Constant(I32, k)) for k in range(2)]
        return context.make_tuple(builder, retty, items)

    return retty(w, r, o), codegen


@intrinsic
def f16_bits(typingctx, x):
    """The fp16 bit pattern (uint16) of float32 x, rounded to nearest even as numpy's
    astype(float16) rounds (vcvtps2ph with F16C)."""
    if x != types.float32:
        return None

    def codegen(context, builder, sig, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), I16)

    return types.uint16(x), codegen


def _f16_rows_codegen(word):
    """Codegen loading a `word` (I16: one fp16, I32: an fp16 pair) at byte o of each of rows
    r0..r3 into one vector, converted to an F32x8 at once."""
    def codegen(context, builder, sig, args):
        vec = ir.Constant(ir.VectorType(word, 8 * 16 // word.width), None)
        for k in range(4):
            ptr = _item_ptr(context, builder, sig.args[0], args[0], [args[1 + k], args[5]],
                            [sig.args[1 + k], sig.args[5]])
            bits = builder.load(builder.bitcast(ptr, word.as_pointer()), align=1)
            vec = builder.insert_element(vec, bits, ir.Constant(I32, k))
        return builder.fpext(builder.bitcast(vec, ir.VectorType(ir.HalfType(), 8)), _vt(F32x8))

    return codegen


@intrinsic
def f16_rows(typingctx, w, r0, r1, r2, r3, o):
    """F32x8 whose lanes 0-3 are the fp16 at byte o of rows r0..r3 (lanes 4-7 zero): four rows'
    block scales in one conversion (vmovd, three vpinsrw, vcvtph2ps; no false dependency)."""
    if not _is_array(w, 2, *UINT8):
        return None
    return F32x8(w, r0, r1, r2, r3, o), _f16_rows_codegen(I16)


@intrinsic
def f16_pair_rows(typingctx, w, r0, r1, r2, r3, o):
    """F32x8 [a0, b0, a1, b1, a2, b2, a3, b3]: the fp16 pair at bytes o, o + 2 of rows r0..r3
    (Q4_1's scale and min). One dword load per row and one conversion for both, where two
    f16_rows calls take a word load per value and two conversions."""
    if not _is_array(w, 2, *UINT8):
        return None
    return F32x8(w, r0, r1, r2, r3, o), _f16_rows_codegen(I32)


@intrinsic
def nibble_words_pair(typingctx, w, ra, rb, o):
    """I16x32: concat(load_nibble_words(w, ra, o), load_nibble_words(w, rb, o)), with the two
    rows' bytes joined first so that one 256-bit shift serves both."""
    if not _is_array(w, 2, *UINT8):
        return None

    def codegen(context, builder, sig, args):
        v8 = ir.VectorType(I16, 8)
        a, b = [_load(builder, _item_ptr(context, builder, sig.args[0], args[0], [r, args[3]],
                                         [rt, sig.args[3]]), v8)
                for r, rt in ((args[1], sig.args[1]), (args[2], sig.args[2]))]
        ab = builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, 16), list(range(16))))
        hi = builder.lshr(ab, ir.Constant(ir.VectorType(I16, 16), [4] * 16))
        order = list(range(8)) + list(range(16, 24)) + list(range(8, 16)) + list(range(24, 32))
        return builder.shuffle_vector(ab, hi, ir.Constant(ir.VectorType(I32, 32), order))

    return I16x32(w, ra, rb, o), codegen


def _u32_pair_bytes(context, builder, sig, args):
    """The 8 bytes of the first two (integer) arguments as uint32, lo's four first: <8 x i8>."""
    pair = ir.Constant(ir.VectorType(I32, 2), None)
    for k in range(2):
        pair = builder.insert_element(pair, context.cast(builder, args[k], sig.args[k],
                                                         types.uint32), ir.Constant(I32, k))
    return builder.bitcast(pair, ir.VectorType(I8, 8))


def _bytes_f32(signed: bool):
    def typer(typingctx, lo, hi):
        if not (isinstance(lo, types.Integer) and isinstance(hi, types.Integer)):
            return None

        def codegen(context, builder, sig, args):
            b = _u32_pair_bytes(context, builder, sig, args)
            if signed:
                return builder.sitofp(builder.sext(b, ir.VectorType(I32, 8)), _vt(F32x8))
            return builder.uitofp(builder.zext(b, ir.VectorType(I32, 8)), _vt(F32x8))

        return F32x8(lo, hi), codegen

    return typer


bytes_f32 = intrinsic(_bytes_f32(False))
bytes_f32.__doc__ = "F32x8 of the 8 bytes of two uint32 (lo's four, little-endian, then hi's)."
sbytes_f32 = intrinsic(_bytes_f32(True))
sbytes_f32.__doc__ = "Like bytes_f32, the bytes read as int8."


# ---------------------------------------------------------------------------- integer lanes


def _int_binop(op: str, doc: str):
    def typer(typingctx, a, b):
        if not (isinstance(a, VecType) and a.elem in (types.int16, types.int32)
                and (b == a or isinstance(b, types.Integer))):
            return None

        def codegen(context, builder, sig, args):
            rhs = args[1]
            if sig.args[1] != a:
                rhs = _splat(builder, context.cast(builder, rhs, sig.args[1], a.elem), _vt(a))
            return getattr(builder, op)(args[0], rhs)

        return a(a, b), codegen

    typer.__doc__ = doc + " (b a vector of the same type, or an integer for every lane)."
    return intrinsic(typer)


vand = _int_binop("and_", "a & b lane-wise")
vor = _int_binop("or_", "a | b lane-wise")
vxor = _int_binop("xor", "a ^ b lane-wise")
vshr = _int_binop("lshr", "a >> b lane-wise, logical (zeros shifted in)")
vshl = _int_binop("shl", "a << b lane-wise")
vsar = _int_binop("ashr", "a >> b lane-wise, arithmetic (the sign shifted in)")
vadd = _int_binop("add", "a + b lane-wise (integers wrap)")
vsub = _int_binop("sub", "a - b lane-wise (integers wrap)")
vmul = _int_binop("mul", "a * b lane-wise, the low half of each product (integers wrap)")


@intrinsic
def i8_scale_pairs(typingctx, w, r, o):
    """Four I16x16 from the 8 int8 bytes s = w[r, o:o + 8]: vector k is [s[2k]] * 8 +
    [s[2k + 1]] * 8, per-16-weight scales laid over a word vector whose lanes 0-7 and 8-15 fall
    in different sub-blocks (Q6_K's scales of four blocks, from one load)."""
    if not _is_array(w, 2, *UINT8):
        return None
    retty = types.UniTuple(I16x16, 4)

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        v = builder.sext(_load(builder, ptr, ir.VectorType(I8, 8)), ir.VectorType(I16, 8))
        und = ir.Constant(v.type, ir.Undefined)
        items = [builder.shuffle_vector(v, und, ir.Constant(ir.VectorType(I32, 16),
                                                             [2 * k] * 8 + [2 * k + 1] * 8))
                 for k in range(4)]
        return context.make_tuple(builder, retty, items)

    return retty(w, r, o), codegen


@intrinsic
def madd(typingctx, a, b):
    """I32x8 lane k = a[2k] * b[2k] + a[2k + 1] * b[2k + 1]: the int16 products summed in pairs in
    32 bits (x86 vpmaddwd; exact unless all four inputs are -32768). Two I16x32 give an I32x16
    (vpmaddwd on zmm with AVX-512BW)."""
    if not (a == b and a in (I16x16, I16x32)):
        return None
    out = I32x8 if a == I16x16 else I32x16

    def codegen(context, builder, sig, args):
        return _madd_ir(builder, a, out, args[0], args[1])

    return out(a, b), codegen


def _madd_ir(builder, a: VecType, out: VecType, x, y):
    """`madd`'s IR: the native instruction where numba compiles for this host, else the pattern."""
    native = HAS_AVX2 if a == I16x16 else HAS_AVX512BW
    if native:
        name = "llvm.x86.avx2.pmadd.wd" if a == I16x16 else "llvm.x86.avx512.pmaddw.d.512"
        fnty = ir.FunctionType(_vt(out), [_vt(a), _vt(a)])
        return builder.call(cgutils.get_or_insert_function(builder.module, fnty, name), [x, y])
    wide = ir.VectorType(I32, a.n)
    p = builder.mul(builder.sext(x, wide), builder.sext(y, wide), flags=["nsw"])
    even = _lanes(builder, p, list(range(0, a.n, 2)))
    odd = _lanes(builder, p, list(range(1, a.n, 2)))
    return builder.add(even, odd, flags=["nsw"])


@intrinsic
def dpwssd(typingctx, acc, a, b):
    """acc + madd(a, b): an I32x8 plus the pair sums of two I16x16, or an I32x16 and two I16x32
    (one vpdpwssd where the CPU has VNNI, else vpmaddwd and vpaddd: the same sums)."""
    if not ((acc, a, b) in ((I32x8, I16x16, I16x16), (I32x16, I16x32, I16x32))):
        return None

    def codegen(context, builder, sig, args):
        if HAS_VNNI_YMM if acc == I32x8 else HAS_VNNI:
            vt = _vt(acc)
            name = f"llvm.x86.avx512.vpdpwssd.{256 if acc == I32x8 else 512}"
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt] * 3),
                                                name)
            return builder.call(fn, [args[0], builder.bitcast(args[1], vt),
                                     builder.bitcast(args[2], vt)])
        return builder.add(args[0], _madd_ir(builder, a, acc, args[1], args[2]))

    return acc(acc, a, b), codegen


@intrinsic
def maddubs(typingctx, a, b):
    """Word k = a[2k] * b[2k] + a[2k + 1] * b[2k + 1] over the bytes of two word vectors, a's
    read unsigned and b's signed, for two I16x32 (vpmaddubsw on zmm with AVX-512BW, which
    saturates: callers keep each pair within int16; elsewhere the same sums in generic IR)."""
    if not (a == b == I16x32):
        return None

    def codegen(context, builder, sig, args):
        vb = ir.VectorType(I8, 64)
        x, y = (builder.bitcast(v, vb) for v in args)
        if HAS_AVX512BW:
            fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(
                _vt(I16x32), [vb, vb]), "llvm.x86.avx512.pmaddubs.w.512")
            return builder.call(fn, [x, y])
        wide = ir.VectorType(I16, 64)
        p = builder.mul(builder.zext(x, wide), builder.sext(y, wide))
        return builder.add(_lanes(builder, p, list(range(0, 64, 2))),
                           _lanes(builder, p, list(range(1, 64, 2))))

    return I16x32(a, b), codegen


@intrinsic
def fma_lane(typingctx, p, s, k, acc):
    """acc + float32(p) * s[k]: an I32x8 converted, times lane k of an F32x8 (k a constant once
    loops are unrolled, so the lane is broadcast by one shuffle)."""
    if not (p == I32x8 and s == F32x8 and isinstance(k, types.Integer) and acc == F32x8):
        return None

    def codegen(context, builder, sig, args):
        vt = _vt(F32x8)
        lane = builder.extract_element(args[1], context.cast(builder, args[2], sig.args[2],
                                                             types.int32))
        return _fma(builder, builder.sitofp(args[0], vt), _splat(builder, lane, vt), args[3])

    return F32x8(p, s, k, acc), codegen


@intrinsic
def fma_vec(typingctx, p, s, acc):
    """acc + float32(p) * s lane-wise: an I32x8 converted, times an F32x8 (or I32x16 and
    F32x16)."""
    if not ((p, s, acc) in ((I32x8, F32x8, F32x8), (I32x16, F32x16, F32x16))):
        return None

    def codegen(context, builder, sig, args):
        return _fma(builder, builder.sitofp(args[0], _vt(sig.args[1])), args[1], args[2])

    return acc(p, s, acc), codegen


def _zeros(vec: VecType):
    """An intrinsic giving a `vec` of zeros."""
    def typer(typingctx):
        def codegen(context, builder, sig, args):
            return ir.Constant(_vt(vec), [0] * vec.n)

        return vec(), codegen

    typer.__doc__ = f"A {vec} of zeros."
    return intrinsic(typer)


f32x8_zero = _zeros(F32x8)


@intrinsic
def f32x8_splat(typingctx, s):
    """The scalar s in every lane."""
    if not _is_scalar(s):
        return None

    def codegen(context, builder, sig, args):
        return _f32x8_or_scalar(context, builder, args[0], sig.args[0])

    return F32x8(s), codegen


def _f32_binop(fn, doc: str):
    def typer(typingctx, a, b):
        if not (a == F32x8 and (b == F32x8 or _is_scalar(b))):
            return None

        def codegen(context, builder, sig, args):
            return fn(builder, args[0], _f32x8_or_scalar(context, builder, args[1], sig.args[1]))

        return F32x8(a, b), codegen

    typer.__doc__ = doc + " (b an F32x8, or a scalar for every lane)."
    return intrinsic(typer)


f32x8_add = _f32_binop(lambda b, x, y: b.fadd(x, y), "a + b lane-wise")
f32x8_mul = _f32_binop(lambda b, x, y: b.fmul(x, y), "a * b lane-wise")
f32x8_div = _f32_binop(lambda b, x, y: b.fdiv(x, y), "a / b lane-wise (IEEE division)")
f32x8_max = _f32_binop(lambda b, x, y: b.select(b.fcmp_ordered(">", x, y), x, y),
                       "Lane-wise maximum: a where a > b, else b")


@intrinsic
def f32x8_fma(typingctx, a, b, c):
    """a * b + c lane-wise, fused; b an F32x8 or a scalar for every lane."""
    if not (a == F32x8 and c == F32x8 and (b == F32x8 or _is_scalar(b))):
        return None

    def codegen(context, builder, sig, args):
        b = _f32x8_or_scalar(context, builder, args[1], sig.args[1])
        return _fma(builder, args[0], b, args[2])

    return F32x8(a, b, c), codegen


@intrinsic
def lane(typingctx, v, k):
    """Lane k of an F32x8, as a float32."""
    if not (v == F32x8 and isinstance(k, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        return builder.extract_element(args[0], context.cast(builder, args[1], sig.args[1],
                                                             types.int32))

    return types.float32(v, k), codegen


@intrinsic
def lane_pairs(typingctx, s, q):
    """F32x8 [s[2q]] * 4 + [s[2q + 1]] * 4 (q a constant once loops are unrolled)."""
    if not (s == F32x8 and isinstance(q, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        q2 = builder.shl(context.cast(builder, args[1], sig.args[1], types.int32),
                         ir.Constant(I32, 1))
        v4 = ir.VectorType(F32, 4)
        a = _splat(builder, builder.extract_element(args[0], q2), v4)
        b = _splat(builder, builder.extract_element(args[0], builder.add(q2, ir.Constant(I32, 1))),
                   v4)
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(I32, 8), list(range(8))))

    return F32x8(s, q), codegen


@intrinsic
def swap_halves(typingctx, a):
    """[a4, a5, a6, a7, a0, a1, a2, a3]."""
    if a != F32x8:
        return None

    def codegen(context, builder, sig, args):
        return _lanes(builder, args[0], [4, 5, 6, 7, 0, 1, 2, 3])

    return F32x8(a), codegen


@intrinsic
def hi_lo(typingctx, a, b):
    """I16x16 [a8..a15, b0..b7]: a's high 128-bit half, then b's low half (vperm2i128)."""
    if not (a == I16x16 and b == I16x16):
        return None

    def codegen(context, builder, sig, args):
        idx = ir.Constant(ir.VectorType(I32, 16), list(range(8, 24)))
        return builder.shuffle_vector(args[0], args[1], idx)

    return I16x16(a, b), codegen


# ------------------------------------------------------------------------------- reductions


@intrinsic
def f32x8_sum(typingctx, a):
    """Sum of the 8 lanes as a tree: halves, quarters, then the last pair."""
    if a != F32x8:
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        v4 = builder.fadd(_lanes(builder, v, [0, 1, 2, 3]), _lanes(builder, v, [4, 5, 6, 7]))
        v2 = builder.fadd(_lanes(builder, v4, [0, 1]), _lanes(builder, v4, [2, 3]))
        return builder.fadd(builder.extract_element(v2, ir.Constant(I32, 0)),
                            builder.extract_element(v2, ir.Constant(I32, 1)))

    return types.float32(a), codegen


@intrinsic
def f32x8_half_sums(typingctx, a):
    """(a0 + a1 + a2 + a3, a4 + a5 + a6 + a7) as a tuple of float32."""
    if a != F32x8:
        return None
    retty = types.UniTuple(types.float32, 2)

    def codegen(context, builder, sig, args):
        v = args[0]
        v4 = builder.fadd(_lanes(builder, v, [0, 4, 2, 6]), _lanes(builder, v, [1, 5, 3, 7]))
        v2 = builder.fadd(_lanes(builder, v4, [0, 1]), _lanes(builder, v4, [2, 3]))
        items = [builder.extract_element(v2, ir.Constant(I32, k)) for k in range(2)]
        return context.make_tuple(builder, retty, items)

    return retty(a), codegen


@intrinsic
def f32x8_hmax(typingctx, a):
    """The largest of the 8 lanes."""
    if a != F32x8:
        return None

    def codegen(context, builder, sig, args):
        def vmax(x, y):
            return builder.select(builder.fcmp_ordered(">", x, y), x, y)

        v4 = vmax(_lanes(builder, args[0], [0, 1, 2, 3]), _lanes(builder, args[0], [4, 5, 6, 7]))
        v2 = vmax(_lanes(builder, v4, [0, 1]), _lanes(builder, v4, [2, 3]))
        return vmax(builder.extract_element(v2, ir.Constant(I32, 0)),
                    builder.extract_element(v2, ir.Constant(I32, 1)))

    return types.float32(a), codegen


@intrinsic
def sums8(typingctx, a0, a1, a2, a3, a4, a5, a6, a7):
    """F32x8 [sum(a0), sum(a1), ..., sum(a7)]: eight horizontal sums as one transposing add tree
    (three rounds of pairwise adds, like vhaddps, then the two 128-bit halves)."""
    if not all(a == F32x8 for a in (a0, a1, a2, a3, a4, a5, a6, a7)):
        return None

    def codegen(context, builder, sig, args):
        idx = lambda v: ir.Constant(ir.VectorType(I32, 8), v)  # noqa: E731

        def pair_add(x, y):  # [x0+x1, x2+x3, y0+y1, y2+y3 | the same on lanes 4-7]
            ev = builder.shuffle_vector(x, y, idx([0, 2, 8, 10, 4, 6, 12, 14]))
            od = builder.shuffle_vector(x, y, idx([1, 3, 9, 11, 5, 7, 13, 15]))
            return builder.fadd(ev, od)

        t0 = pair_add(pair_add(args[0], args[1]), pair_add(args[2], args[3]))
        t1 = pair_add(pair_add(args[4], args[5]), pair_add(args[6], args[7]))
        lo = builder.shuffle_vector(t0, t1, idx([0, 1, 2, 3, 8, 9, 10, 11]))
        hi = builder.shuffle_vector(t0, t1, idx([4, 5, 6, 7, 12, 13, 14, 15]))
        return builder.fadd(lo, hi)

    return F32x8(a0, a1, a2, a3, a4, a5, a6, a7), codegen


# --------------------------------------------------------------------------------------- exp

# Cephes expf: exp(x) = 2^n * exp(r), n = rint(x / ln 2), r = x - n ln 2 (ln 2 in two parts), and
# exp(r) by a degree-6 polynomial; within 2 ulp of the correctly rounded result on [-87.3, 88.3].
_EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
             1.6666665459e-1, 5.0000001201e-1)


def exp_ir(builder, v):
    """Cephes expf of each lane of a float vector `v` of any width (f32x8_exp's operations)."""
    vt = v.type
    it = ir.VectorType(I32, vt.count)

    def const(c):
        return ir.Constant(vt, [float(c)] * vt.count)

    rint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vt, [vt]),
                                          f"llvm.rint.v{vt.count}f32")
    lo, hi = const(-87.3), const(88.3)
    clamped = builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
    clamped = builder.select(builder.fcmp_ordered(">", clamped, hi), hi, clamped)
    n = builder.call(rint, [builder.fmul(clamped, const(1.44269504088896341))])
    r = _fma(builder, n, const(-0.693359375), clamped)
    r = _fma(builder, n, const(2.12194440e-4), r)
    p = const(_EXP_POLY[0])
    for c in _EXP_POLY[1:]:
        p = _fma(builder, p, r, const(c))
    p = _fma(builder, p, builder.fmul(r, r), builder.fadd(r, const(1.0)))
    bits = builder.shl(builder.add(builder.fptosi(n, it), ir.Constant(it, [127] * vt.count)),
                       ir.Constant(it, [23] * vt.count))
    y = builder.fmul(p, builder.bitcast(bits, vt))
    y = builder.select(builder.fcmp_ordered("<", v, lo), const(0.0), y)
    return builder.select(builder.fcmp_ordered(">", v, hi), const(float("inf")), y)


@intrinsic
def f32x8_exp(typingctx, x):
    """exp of each lane (Cephes expf). Inputs below -87.3 give 0 and above 88.3 inf (exact from
    88.73 on); NaN stays NaN. Meant for softmax and sigmoids, not as a general exp."""
    if x != F32x8:
        return None

    def codegen(context, builder, sig, args):
        return exp_ir(builder, args[0])

    return F32x8(x), codegen


@intrinsic
def f32x8_recip(typingctx, a):
    """1 / a lane-wise (a true division)."""
    if a != F32x8:
        return None

    def codegen(context, builder, sig, args):
        return builder.fdiv(ir.Constant(_vt(F32x8), [1.0] * 8), args[0])

    return F32x8(a), codegen


# ------------------------------------------------------------------- 512-bit values (AVX-512)
# Twice the lanes for the decode kernels that are compute-bound at ymm width: generic
# vector IR that LLVM keeps in zmm registers where the CPU has AVX-512BW (numba's IR carries no
# min-legal-vector-width, so 512-bit types are legal), and splits in two elsewhere. `madd` and
# `fma_vec` above take these widths too.


@intrinsic
def i8_scale_quads(typingctx, w, r, o):
    """Four I16x32 from the 16 int8 bytes s = w[r, o:o + 16]: vector k is [s[4k + i]] * 8 for
    i = 0..3 in turn, per-16-weight scales over a vector of four sub-blocks (Q6_K's 16 scales)."""
    if not _is_array(w, 2, *UINT8):
        return None
    retty = types.UniTuple(I16x32, 4)

    def codegen(context, builder, sig, args):
        ptr = _item_ptr(context, builder, sig.args[0], args[0], args[1:], sig.args[1:])
        v = builder.sext(_load(builder, ptr, ir.VectorType(I8, 16)), ir.VectorType(I16, 16))
        und = ir.Constant(v.type, ir.Undefined)
        items = [builder.shuffle_vector(v, und, ir.Constant(
            ir.VectorType(I32, 32), [4 * k + i for i in range(4) for _ in range(8)]))
            for k in range(4)]
        return context.make_tuple(builder, retty, items)

    return retty(w, r, o), codegen


@intrinsic
def load_w32(typingctx, w, r, o):
    """The 64 bytes w[r, o:o + 64] as 32 little-endian words."""
    return (I16x32(w, r, o), _load_codegen(I16x32)) if _is_array(w, 2, *UINT8) else None


load_i16x32 = _loader_1d(types.int16, I16x32, "a[i:i + 32] of an int16 array.")


f32x16_zero = _zeros(F32x16)
i32x16_zero = _zeros(I32x16)


@intrinsic
def byte_words(typingctx, lo, hi, k0, k1):
    """An I16x32 of [byte k0] * 16 ++ [byte k1] * 16 of the 8 bytes of two uint32 (lo's four,
    little-endian, then hi's), read unsigned: per-sub-block scales over a vector whose halves
    fall in two sub-blocks (k0, k1 constants once loops are unrolled)."""
    if not all(isinstance(t, types.Integer) for t in (lo, hi, k0, k1)):
        return None

    def codegen(context, builder, sig, args):
        words = builder.zext(_u32_pair_bytes(context, builder, sig, args), ir.VectorType(I16, 8))
        halves = [_splat(builder, builder.extract_element(
            words, context.cast(builder, args[i], sig.args[i], types.int32)),
            ir.VectorType(I16, 16)) for i in (2, 3)]
        return builder.shuffle_vector(halves[0], halves[1],
                                      ir.Constant(ir.VectorType(I32, 32), list(range(32))))

    return I16x32(lo, hi, k0, k1), codegen


@intrinsic
def fma_lane_pair(typingctx, p, s, k0, k1, acc):
    """acc + float32(p) * [s[k0]] * 8 ++ [s[k1]] * 8: an I32x16 whose halves belong to two
    sub-blocks, converted and scaled by their lanes of an F32x8 (k0, k1 constants once loops
    are unrolled)."""
    if not (p == I32x16 and s == F32x8 and isinstance(k0, types.Integer)
            and isinstance(k1, types.Integer) and acc == F32x16):
        return None

    def codegen(context, builder, sig, args):
        v8 = ir.VectorType(F32, 8)
        lanes = [builder.extract_element(args[1], context.cast(builder, args[i], sig.args[i],
                                                               types.int32)) for i in (2, 3)]
        halves = [_splat(builder, x, v8) for x in lanes]
        scale = builder.shuffle_vector(halves[0], halves[1],
                                       ir.Constant(ir.VectorType(I32, 16), list(range(16))))
        return _fma(builder, builder.sitofp(args[0], _vt(F32x16)), scale, args[4])

    return F32x16(p, s, k0, k1, acc), codegen


@intrinsic
def f32x16_sum(typingctx, a):
    """Sum of the 16 lanes as a tree."""
    if a != F32x16:
        return None

    def codegen(context, builder, sig, args):
        v = args[0]
        for n in (8, 4, 2, 1):
            v = builder.fadd(_lanes(builder, v, list(range(n))),
                             _lanes(builder, v, list(range(n, 2 * n))))
        return builder.extract_element(v, ir.Constant(I32, 0))

    return types.float32(a), codegen


_WIDER = {I16x16: I16x32, I32x8: I32x16, F32x8: F32x16}


@intrinsic
def concat(typingctx, a, b):
    """[a..., b...]: two I16x16 as an I16x32, two I32x8 as an I32x16, two F32x8 as an F32x16."""
    if not (a == b and a in _WIDER):
        return None
    wide = _WIDER[a]

    def codegen(context, builder, sig, args):
        idx = ir.Constant(ir.VectorType(I32, wide.n), list(range(wide.n)))
        return builder.shuffle_vector(args[0], args[1], idx)

    return wide(a, b), codegen


@intrinsic
def f32x16_halves(typingctx, a):
    """(lanes 0-7, lanes 8-15) of an F32x16 as two F32x8."""
    if a != F32x16:
        return None
    retty = types.UniTuple(F32x8, 2)

    def codegen(context, builder, sig, args):
        halves = [_lanes(builder, args[0], list(range(k, k + 8))) for k in (0, 8)]
        return context.make_tuple(builder, retty, halves)

    return retty(a), codegen


@intrinsic
def lane_rotations(typingctx, v):
    """(v, then v's four 128-bit lanes rotated down by one, two and three): lane j of rotation k
    holds v's lane (j + k) mod 4 (vshufi64x2), for four tokens a vector."""
    if v != I16x32:
        return None
    retty = types.UniTuple(I16x32, 4)

    def codegen(context, builder, sig, args):
        rots = [args[0]] + [_lanes(builder, args[0], [(8 * k + i) % 32 for i in range(32)])
                            for k in (1, 2, 3)]
        return context.make_tuple(builder, retty, rots)

    return retty(v), codegen


@intrinsic
def f32x16_scaled(typingctx, a, i, s):
    """a[i:i + 16] * s: a 1-D float32 array's 16 values times the scalar s."""
    if not (_is_array(a, 1, types.float32) and _is_scalar(s)):
        return None

    def codegen(context, builder, sig, args):
        vt = _vt(F32x16)
        v = _load(builder, _item_ptr(context, builder, sig.args[0], args[0], args[1:2],
                                     sig.args[1:2]), vt)
        return builder.fmul(v, _splat(builder, context.cast(builder, args[2], sig.args[2],
                                                            types.float32), vt))

    return F32x16(a, i, s), codegen
