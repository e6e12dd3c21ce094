"""RMS normalisation rows in one pass (ggml_rms_norm followed by the weight multiply).

The sum of squares accumulates in float64 (SIMD lanes, reassociated), so it is at least as exact
as ggml's float sum; ops/norm.py keeps the plain numpy twin the tests compare against.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .dequant import ld, ld2
from .threading_layer import NOGIL


@njit(cache=True, nogil=NOGIL, fastmath={"contract", "reassoc"})
def rms_norm_rows(x, weight, eps, out):  # x, out: float32 [rows, d]; weight: float32 [d]
    rows, d = x.shape
    for r in range(rows):
        ss = 0.0
        for c in range(d):
            v = np.float64(ld2(x, r, c))
            ss += v * v
        scale = np.float32(1.0 / np.sqrt(ss / d + eps))
        for c in range(d):
            out[r, c] = (ld2(x, r, c) * scale) * ld(weight, c)
