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
from numba import njit

from .simd import f32x8_add, f32x8_div, f32x8_exp, f32x8_mul, f32x8_splat, load_f32, store_f32
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
def _logistic_times(x, k, out):
    """out[i] = x[i] / (1 + exp(-z[i])) = x[i] * sigmoid(z[i]) for float32 1-D arrays, with z = x
    (k = 0: SiLU) or z = 2 sqrt(2/pi) x (1 + 0.044715 x^2) (k = 1: tanh-GELU, as
    0.5 (1 + tanh(u)) = sigmoid(2u))."""
    n = x.shape[0]
    one = f32x8_splat(np.float32(1))
    for i in range(0, n // 8 * 8, 8):
        v = load_f32(x, i)
        z = v
        if k == 1:
            z = f32x8_mul(f32x8_mul(v, 2 * SQRT_2_OVER_PI),
                          f32x8_add(one, f32x8_mul(f32x8_mul(v, v), GELU_COEF_A)))
        store_f32(out, i, f32x8_div(v, f32x8_add(one, f32x8_exp(f32x8_mul(z, np.float32(-1))))))
    for i in range(n // 8 * 8, n):
        v = x[i]
        z = v if k == 0 else np.float32(2) * SQRT_2_OVER_PI * v * (
            np.float32(1) + GELU_COEF_A * v * v)
        out[i] = v / (np.float32(1) + np.exp(-z))


@njit(cache=True, nogil=NOGIL)
def silu_1d(x, out):  # float32 [n]
    _logistic_times(x, 0, out)


@njit(cache=True, nogil=NOGIL)
def gelu_tanh_1d(x, out):  # float32 [n]
    _logistic_times(x, 1, out)
