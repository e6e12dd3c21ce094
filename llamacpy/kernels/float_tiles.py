"""Few-token matmul for F16 and BF16 weights (a speculative verification of an F16 model, an F16
vision or whisper layer at a few rows): tiles of ROWS weight rows x 4 tokens, the weights
converted to float32 in registers as they are loaded.

The generic float-rows kernel (matmul._float_rows) decodes each row into a float32 buffer and
then dots it with every token: a store and two loads per weight per token pass, and one token at
a time when fewer than four are left, so 2 tokens of an F16 Qwen2.5-Coder-0.5B took 2.3x one
token and 4 tokens 2.6x. Here each pass over a tile's weights feeds ROWS x 4 accumulators (16
float32 lanes on AVX-512, 8 on AVX2), so up to 4 tokens read every weight once, and the step
stays near one token's memory-bound time. Sums are float32, in lanes then across them (the
order the fastmath reductions of matmul's kernels already take).
"""

from __future__ import annotations

from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd import HAS_AVX512BW, prefetch_ir

LANES = 16 if HAS_AVX512BW else 8
ROWS = 4 if HAS_AVX512BW else 2  # AVX2 has 16 ymm registers: 2 x 4 sums, 2 weights, 4 tokens
TOKENS = 4
# The weights PREFETCH_ROWS rows on are prefetched into L2 (prefetcht1) as a tile reads its own:
# four interleaved row streams defeat the hardware prefetcher, and into L1 (prefetcht0) they
# push out the tokens. An F16 Qwen2.5-Coder-0.5B step of 4 tokens: 120 ms as float rows, 87
# tiled with L1 prefetches, 48 with these (one token: 43 ms). 8 to 32 rows ahead time the same.
PREFETCH_ROWS = 8

I16, I32, I64, F32 = ir.IntType(16), ir.IntType(32), ir.IntType(64), ir.FloatType()
VF, VH = ir.VectorType(F32, LANES), ir.VectorType(I16, LANES)


@intrinsic
def _tile(typingctx, w, X, Y, r0, nr, t0, n_tok, bf16):
    """tile(w, X, Y, r0, nr, t0, n_tok, bf16): Y[t0 + t, r0 + r] = w[r0 + r] . X[t0 + t] for
    r < nr <= ROWS, t < n_tok <= TOKENS, k over whole vectors of LANES (w uint16 [rows, n] of fp16
    or, with bf16, bf16 bits, X float32 [T, n], Y float32 [T, rows], each row contiguous,
    n % LANES == 0). n_tok and bf16 are constants: one tile's code per token count and type.
    Rows past nr repeat the last real one and are not stored."""
    if not (isinstance(n_tok, types.IntegerLiteral) and isinstance(bf16, types.BooleanLiteral)):
        return None
    tokens, is_bf16 = n_tok.literal_value, bf16.literal_value
    sig = types.void(w, X, Y, r0, nr, t0, n_tok, bf16)

    def codegen(context, builder, sig, args):
        c = lambda v: ir.Constant(I64, v)  # noqa: E731
        arrays = [context.make_array(t)(context, builder, a)
                  for t, a in zip(sig.args[:3], args[:3])]
        r0, nr, t0 = [context.cast(builder, v, t, types.int64)
                      for v, t in zip(args[3:6], sig.args[3:6])]
        n = cgutils.unpack_tuple(builder, arrays[0].shape, 2)[1]

        def row_ptr(k, ary, i):  # the start of row i of a 2-D array
            return cgutils.get_item_pointer(context, builder, sig.args[k], ary, [i, c(0)],
                                            wraparound=False)

        def clamp(base, i, count):  # base + min(i, count - 1)
            last = builder.sub(count, c(1))
            return builder.add(base, builder.select(builder.icmp_signed("<", c(i), count),
                                                    c(i), last))

        w_rows = [row_ptr(0, arrays[0], clamp(r0, r, nr)) for r in range(ROWS)]
        w_stride = cgutils.unpack_tuple(builder, arrays[0].strides, 2)[0]
        w_ahead = builder.mul(w_stride, c(PREFETCH_ROWS))
        x_rows = [row_ptr(1, arrays[1], builder.add(t0, c(t))) for t in range(tokens)]
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(VF, [VF] * 3),
                                             f"llvm.fma.v{LANES}f32")
        entry = builder.basic_block
        loop = builder.append_basic_block("k")
        done = builder.append_basic_block("done")
        builder.branch(loop)
        builder.position_at_end(loop)
        k = builder.phi(I64)
        k.add_incoming(c(0), entry)
        acc = []
        for _ in range(ROWS * tokens):
            a = builder.phi(VF)
            a.add_incoming(ir.Constant(VF, [0.0] * LANES), entry)
            acc.append(a)

        def load(ptr, vt):
            return builder.load(builder.bitcast(builder.gep(ptr, [k]), vt.as_pointer()),
                                align=2)

        for ptr in w_rows:  # the rows PREFETCH_ROWS on, at this k, into L2 (locality 2)
            prefetch_ir(builder, builder.add(builder.ptrtoint(builder.gep(ptr, [k]), I64),
                                             w_ahead), 2)
        weights = []
        for ptr in w_rows:
            bits = load(ptr, VH)
            if is_bf16:  # bf16 is the top half of a float32
                v32 = builder.shl(builder.zext(bits, ir.VectorType(I32, LANES)),
                                  ir.Constant(ir.VectorType(I32, LANES), [16] * LANES))
                weights.append(builder.bitcast(v32, VF))
            else:
                weights.append(builder.fpext(builder.bitcast(
                    bits, ir.VectorType(ir.HalfType(), LANES)), VF))
        xs = [load(ptr, VF) for ptr in x_rows]
        new = [builder.call(fma, [weights[r], xs[t], acc[r * tokens + t]])
               for r in range(ROWS) for t in range(tokens)]
        for a, v in zip(acc, new):
            a.add_incoming(v, loop)
        k_next = builder.add(k, c(LANES))
        k.add_incoming(k_next, loop)
        builder.cbranch(builder.icmp_signed("<", k_next, n), loop, done)

        builder.position_at_end(done)
        for r in range(ROWS):
            for t in range(tokens):
                with builder.if_then(builder.icmp_signed("<", c(r), nr)):
                    total = _lane_sum(builder, new[r * tokens + t])
                    at = cgutils.get_item_pointer(
                        context, builder, sig.args[2], arrays[2],
                        [builder.add(t0, c(t)), builder.add(r0, c(r))], wraparound=False)
                    builder.store(total, at)
        return context.get_dummy_value()

    return sig, codegen


def _lane_sum(builder, v):
    """The sum of a vector's lanes, halving it (the tree a vectorised fastmath reduction takes)."""
    width = v.type.count
    while width > 1:
        width //= 2
        halves = [ir.Constant(ir.VectorType(I32, width), list(range(o, o + width)))
                  for o in (0, width)]
        lo, hi = [builder.shuffle_vector(v, v, idx) for idx in halves]
        v = builder.fadd(lo, hi)
    return builder.extract_element(v, ir.Constant(I32, 0))


@njit(inline="always")
def _tiles_for(w, X, Y, r, nr, t, nt, bf16):
    """The tile for nt (1 to TOKENS) tokens from t."""
    if nt == 4:
        _tile(w, X, Y, r, nr, t, 4, bf16)
    elif nt == 3:
        _tile(w, X, Y, r, nr, t, 3, bf16)
    elif nt == 2:
        _tile(w, X, Y, r, nr, t, 2, bf16)
    else:
        _tile(w, X, Y, r, nr, t, 1, bf16)


@njit(inline="always")
def tiles_fit(w, X, Y):
    """Whether the tiles take these arrays: rows of whole vectors, each row contiguous."""
    return w.shape[1] % LANES == 0 and w.strides[1] == 2 and X.strides[1] == 4 and \
        Y.strides[1] == 4


@njit(inline="always")
def float_tiles(w, X, Y, chunks, bf16):
    """Y = X @ W^T: each thread takes a run of rows, ROWS at a time, and every group of up to
    4 tokens passes over a row group's weights while they are in L1."""
    rows, n_tok = w.shape[0], X.shape[0]
    for part in prange(chunks):
        lo, hi = rows * part // chunks, rows * (part + 1) // chunks
        for r in range(lo, hi, ROWS):
            nr = min(ROWS, hi - r)
            for t in range(0, n_tok, TOKENS):
                _tiles_for(w, X, Y, r, nr, t, min(TOKENS, n_tok - t), bf16)
