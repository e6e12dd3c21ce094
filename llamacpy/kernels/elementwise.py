"""Per-element kernels of a decode step: rotary embedding and the feed-forward activations.

At decode sizes (one token, a few thousand values) numpy spends most of its time on per-call
overhead and temporaries (20-45 us for a rope or a GELU); these run in 1-3 us. Their numpy twins
are in ops/rope.py and ops/activations.py. The rope kernel does exactly the twin's float32
operations (no fused multiply-add), so it is bit-identical; the activations use kernels/simd.py's
vectorised exp (within 2 ulp of libm's), in the logistic form x * sigmoid(.) that both SiLU and
tanh-GELU have.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit

from .simd import (exp_ir, f32x8_add, f32x8_div, f32x8_exp, f32x8_mul, f32x8_splat, load_f32,
                   store_f32)
from .threading_layer import NOGIL

SQRT_2_OVER_PI = np.float32(0.7978845608028654)
GELU_COEF_A = np.float32(0.044715)


@njit(cache=True, nogil=NOGIL)
def rope_neox(x, cos, sin):  # x: float32 [n_tok, n_head, head_dim] in place; cos, sin [n_tok, half]
    n_tok, n_head, _ = x.shape
    half = cos.shape[1]
    for t in range(n_tok):
        for h in range(n_head):
            for i in range(half):
                a, b = x[t, h, i], x[t, h, half + i]
                x[t, h, i] = a * cos[t, i] - b * sin[t, i]
                x[t, h, half + i] = a * sin[t, i] + b * cos[t, i]


@njit(cache=True, nogil=NOGIL)
def rope_norm(x, cos, sin):  # adjacent pairs x[2i], x[2i + 1]
    n_tok, n_head, _ = x.shape
    half = cos.shape[1]
    for t in range(n_tok):
        for h in range(n_head):
            for i in range(half):
                a, b = x[t, h, 2 * i], x[t, h, 2 * i + 1]
                x[t, h, 2 * i] = a * cos[t, i] - b * sin[t, i]
                x[t, h, 2 * i + 1] = a * sin[t, i] + b * cos[t, i]


@njit(inline="always")
def logistic_times8(v, k):
    """v / (1 + exp(-z)) = v * sigmoid(z) for an F32x8 v, with z = v (k = 0: SiLU) or
    z = 2 sqrt(2/pi) v (1 + 0.044715 v^2) (k = 1: tanh-GELU, as 0.5 (1 + tanh(u)) = sigmoid(2u))."""
    one = f32x8_splat(np.float32(1))
    z = v
    if k == 1:
        z = f32x8_mul(f32x8_mul(v, 2 * SQRT_2_OVER_PI),
                      f32x8_add(one, f32x8_mul(f32x8_mul(v, v), GELU_COEF_A)))
    return f32x8_div(v, f32x8_add(one, f32x8_exp(f32x8_mul(z, np.float32(-1)))))


def logistic_times_ir(builder, v, gelu):
    """`logistic_times8` in LLVM IR on a float vector of any width, the same float operations
    (for the integer GEMM's stores): `gelu` an i1, true for tanh-GELU, false for SiLU."""
    vt = v.type

    def const(c):
        return ir.Constant(vt, [float(c)] * vt.count)

    one = const(1)
    z_gelu = builder.fmul(builder.fmul(v, const(2 * SQRT_2_OVER_PI)),
                          builder.fadd(one, builder.fmul(builder.fmul(v, v), const(GELU_COEF_A))))
    z = builder.select(gelu, z_gelu, v)
    return builder.fdiv(v, builder.fadd(one, exp_ir(builder, builder.fmul(z, const(-1)))))


@njit(inline="always")
def logistic_times1(v, k):
    """`logistic_times8` for one float32 (libm's exp: the tails of arrays not a multiple of 8)."""
    z = v if k == 0 else np.float32(2) * SQRT_2_OVER_PI * v * (np.float32(1) + GELU_COEF_A * v * v)
    return v / (np.float32(1) + np.exp(-z))


@njit(inline="always")
def _logistic_times(x, k, out):
    """out[i] = logistic_times(x[i]) for float32 1-D arrays (k: 0 SiLU, 1 tanh-GELU)."""
    n = x.shape[0]
    for i in range(0, n // 8 * 8, 8):
        store_f32(out, i, logistic_times8(load_f32(x, i), k))
    for i in range(n // 8 * 8, n):
        out[i] = logistic_times1(x[i], k)


@njit(cache=True, nogil=NOGIL)
def gated_1d(g, u, k):
    """g[i] = act_k(g[i]) * u[i] in place (float32 [n]; k: 0 SiLU, 1 tanh-GELU): a gated FFN's
    product, the same float operations as the activation and then the multiply."""
    n = g.shape[0]
    for i in range(0, n // 8 * 8, 8):
        store_f32(g, i, f32x8_mul(logistic_times8(load_f32(g, i), k), load_f32(u, i)))
    for i in range(n // 8 * 8, n):
        g[i] = logistic_times1(g[i], k) * u[i]


@njit(cache=True, nogil=NOGIL)
def silu_1d(x, out):  # float32 [n]
    _logistic_times(x, 0, out)


@njit(cache=True, nogil=NOGIL)
def gelu_tanh_1d(x, out):  # float32 [n]
    _logistic_times(x, 1, out)
