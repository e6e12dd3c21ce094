"""Peak multiply-add rate of one core: int16 pairs (vpmaddwd + vpaddd, kernels/simd.py `madd`)
against fp32 FMA, 8-lane vectors, 12 independent accumulators each, as the prompt GEMMs use them.
The ceiling the integer GEMM (kernels/vnni.py) has over sgemm on an AVX2 CPU.

    NUMBA_NUM_THREADS=1 python bench/mac_peak.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
from numba import njit  # noqa: E402

from llamacpy.kernels.simd import (  # noqa: E402
    f32x8_fma, f32x8_sum, f32x8_zero, fma_vec, load_f32, load_i16, madd, vadd)


@njit(cache=False)
def int16_macs(a, n):
    """n steps of 12 vpmaddwd + 12 vpaddd (16 multiply-adds each) over two weight vectors."""
    z = vadd(madd(load_i16(a, 0), load_i16(a, 0)), 0)
    c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = c8 = c9 = c10 = c11 = z
    w0, w1 = load_i16(a, 16), load_i16(a, 32)
    for i in range(n):
        o = (i & 7) * 16
        x = load_i16(a, o)
        c0, c1 = vadd(c0, madd(w0, x)), vadd(c1, madd(w1, x))
        x = load_i16(a, o + 2)
        c2, c3 = vadd(c2, madd(w0, x)), vadd(c3, madd(w1, x))
        x = load_i16(a, o + 4)
        c4, c5 = vadd(c4, madd(w0, x)), vadd(c5, madd(w1, x))
        x = load_i16(a, o + 6)
        c6, c7 = vadd(c6, madd(w0, x)), vadd(c7, madd(w1, x))
        x = load_i16(a, o + 8)
        c8, c9 = vadd(c8, madd(w0, x)), vadd(c9, madd(w1, x))
        x = load_i16(a, o + 10)
        c10, c11 = vadd(c10, madd(w0, x)), vadd(c11, madd(w1, x))
        w0 = vadd(w0, x)
    s = vadd(vadd(vadd(c0, c1), vadd(c2, c3)), vadd(vadd(c4, c5), vadd(c6, c7)))
    s = vadd(s, vadd(vadd(c8, c9), vadd(c10, c11)))
    return f32x8_sum(fma_vec(s, f32x8_zero(), f32x8_zero()))  # kept live, always 0


@njit(cache=False)
def fp32_macs(a, n):
    """n steps of 12 FMAs (8 multiply-adds each) over two weight vectors."""
    c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = c8 = c9 = c10 = c11 = f32x8_zero()
    w0, w1 = load_f32(a, 8), load_f32(a, 16)
    for i in range(n):
        o = (i & 7) * 8
        x = load_f32(a, o)
        c0, c1 = f32x8_fma(w0, x, c0), f32x8_fma(w1, x, c1)
        x = load_f32(a, o + 1)
        c2, c3 = f32x8_fma(w0, x, c2), f32x8_fma(w1, x, c3)
        x = load_f32(a, o + 2)
        c4, c5 = f32x8_fma(w0, x, c4), f32x8_fma(w1, x, c5)
        x = load_f32(a, o + 3)
        c6, c7 = f32x8_fma(w0, x, c6), f32x8_fma(w1, x, c7)
        x = load_f32(a, o + 4)
        c8, c9 = f32x8_fma(w0, x, c8), f32x8_fma(w1, x, c9)
        x = load_f32(a, o + 5)
        c10, c11 = f32x8_fma(w0, x, c10), f32x8_fma(w1, x, c11)
    return (f32x8_sum(c0) + f32x8_sum(c1) + f32x8_sum(c2) + f32x8_sum(c3) + f32x8_sum(c4)
            + f32x8_sum(c5) + f32x8_sum(c6) + f32x8_sum(c7) + f32x8_sum(c8) + f32x8_sum(c9)
            + f32x8_sum(c10) + f32x8_sum(c11))


def main() -> None:
    ai, af, n = np.ones(256, np.int16), np.ones(256, np.float32), 20_000_000
    int16_macs(ai, 10)
    fp32_macs(af, 10)
    for _ in range(3):
        t0 = time.perf_counter()
        int16_macs(ai, n)
        ti = time.perf_counter() - t0
        t0 = time.perf_counter()
        fp32_macs(af, n)
        tf = time.perf_counter() - t0
        print(f"int16 vpmaddwd + vpaddd: {n * 12 * 16 / ti / 1e9:.1f} GMAC/s   "
              f"fp32 FMA: {n * 12 * 8 / tf / 1e9:.1f} GMAC/s   ratio {tf * 2 / ti:.2f}x")


if __name__ == "__main__":
    main()
