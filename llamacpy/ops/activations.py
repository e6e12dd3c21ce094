"""Activations used by the feed-forward blocks (ggml_silu, ggml_gelu with the tanh form).

float32 arrays go to the numba kernels of kernels/elementwise.py (a vectorised exp in the
logistic form, within a few ulp of the numpy twins below, which other dtypes use).
"""

from __future__ import annotations

import numpy as np

from ..kernels.elementwise import GELU_COEF_A, SQRT_2_OVER_PI, gated_1d, gelu_tanh_1d, silu_1d


def silu(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """x * sigmoid(x) (ggml_silu); into `out` (contiguous float32, x itself allowed) if given."""
    return _elementwise(silu_1d, silu_reference, x, out)


def silu_times(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """silu(z) * y, computed into z (contiguous float32 arrays of one shape): the same float
    operations as silu(z) * y, without two more arrays of z's size."""
    gated_1d(z.reshape(-1), np.ascontiguousarray(y, np.float32).reshape(-1), 0)
    return z


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (ggml_gelu; HF gelu_pytorch_tanh)."""
    return _elementwise(gelu_tanh_1d, gelu_tanh_reference, x)


# the kernels' code for each activation (elementwise.gated_1d's k): a gated FFN forms
# act(gate) * up in one pass, and in a prompt's integer GEMM as up is stored
GATED_KINDS = {silu: 0, gelu_tanh: 1}


def _elementwise(kernel, reference, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if x.dtype != np.float32:
        if out is None:
            return reference(x)
        out[...] = reference(x)
        return out
    flat = np.ascontiguousarray(x).reshape(-1)
    dst = np.empty_like(flat) if out is None else out.reshape(-1)  # a view: out is contiguous
    kernel(flat, dst)
    return dst.reshape(x.shape)


def silu_reference(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # exp overflow for x < -88 correctly gives silu = -0
        return x / (np.float32(1) + np.exp(-x))


def gelu_tanh_reference(x: np.ndarray) -> np.ndarray:
    u = SQRT_2_OVER_PI * x * (np.float32(1) + GELU_COEF_A * x * x)
    return np.float32(0.5) * x * (np.float32(1) + np.tanh(u))
