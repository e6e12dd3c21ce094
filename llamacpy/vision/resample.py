"""llama.cpp's Pillow-compatible resampling (img_tool::resize_pillow in tools/mtmd/mtmd-image.cpp):
separable, horizontal pass then vertical, weights in 22-bit fixed point, each pass rounded and
clipped to 8 bits. Pillow's own Image.resize differs from it by one level on some images (when
both passes run at large ratios), so llama.cpp's port is what is ported again here.

The passes run as numba kernels; `resample_rows_reference` is their plain numpy twin.
"""

from __future__ import annotations

import math
from enum import Enum

import numpy as np
from numba import njit, prange

PRECISION_BITS = 32 - 8 - 2  # 8-bit pixels, 2 bits of headroom
ROW_BLOCK_BYTES = 32 << 20  # the numpy twin's int32 accumulator, one block of rows at a time


class Resample(Enum):
    """llama.cpp's resize_algo."""

    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"


FILTER_SUPPORT = {Resample.BILINEAR: 1.0, Resample.BICUBIC: 2.0, Resample.LANCZOS: 3.0}


def _filter(algo: Resample, x: np.ndarray) -> np.ndarray:
    """resample_filter, float64, in the C expression order."""
    if algo == Resample.LANCZOS:
        def sinc(v):
            pv = v * 3.141592653589793238462643383279502884
            with np.errstate(invalid="ignore", divide="ignore"):
                return np.where(v == 0.0, 1.0, np.sin(pv) / pv)
        return np.where((x >= -3.0) & (x < 3.0), sinc(x) * sinc(x / 3.0), 0.0)
    x = np.abs(x)
    if algo == Resample.BILINEAR:
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5  # Pillow's bicubic (ggml and PyTorch use -0.75)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def coefficients(n_in: int, n_out: int, algo: Resample):
    """precompute_weights: per output pixel the first input index and the input count (int64
    [n_out] each) and fixed-point weights int32 [n_out, ksize], zero past the count."""
    scale = n_in / n_out
    filterscale = max(scale, 1.0)  # widen the filter when downsampling
    support = FILTER_SUPPORT[algo] * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(n_out) + 0.5) * scale
    first = np.maximum((center - support + 0.5).astype(np.int64), 0)  # casts truncate, as in C
    count = np.minimum((center + support + 0.5).astype(np.int64), n_in) - first
    taps = np.arange(ksize)
    w = _filter(algo, ((taps[None, :] + first[:, None]) - center[:, None] + 0.5)
                * (1.0 / filterscale))
    w = np.where(taps[None, :] < count[:, None], w, 0.0)
    total = np.cumsum(w, axis=1)[:, -1:]  # summed left to right, like the C loop
    w = np.where(total != 0.0, w / np.where(total != 0.0, total, 1.0), w)
    fixed = w * float(1 << PRECISION_BITS) + np.where(w < 0, -0.5, 0.5)
    return first, count, fixed.astype(np.int32)


@njit(parallel=True, cache=True)
def _horizontal(src, first, count, weights, out):  # uint8 [rows, n_in, 3] -> [rows, n_out, 3]
    half = np.int64(1) << (PRECISION_BITS - 1)
    for r in prange(src.shape[0]):
        for xx in range(out.shape[1]):
            s0 = s1 = s2 = half
            x0 = first[xx]
            for k in range(count[xx]):
                w = np.int64(weights[xx, k])
                s0 += np.int64(src[r, x0 + k, 0]) * w
                s1 += np.int64(src[r, x0 + k, 1]) * w
                s2 += np.int64(src[r, x0 + k, 2]) * w
            out[r, xx, 0] = min(max(s0 >> PRECISION_BITS, 0), 255)
            out[r, xx, 1] = min(max(s1 >> PRECISION_BITS, 0), 255)
            out[r, xx, 2] = min(max(s2 >> PRECISION_BITS, 0), 255)


@njit(parallel=True, cache=True)
def _vertical(src, first, count, weights, out):  # src uint8 [n_in, row], out uint8 [n_out, row]
    half = np.int64(1) << (PRECISION_BITS - 1)
    for yy in prange(out.shape[0]):
        acc = np.full(src.shape[1], half, np.int64)
        for k in range(count[yy]):
            w = np.int64(weights[yy, k])
            row = src[first[yy] + k]
            for i in range(src.shape[1]):
                acc[i] += np.int64(row[i]) * w
        for i in range(src.shape[1]):
            out[yy, i] = min(max(acc[i] >> PRECISION_BITS, 0), 255)


def pillow_resize(rgb: np.ndarray, width: int, height: int, algo: Resample) -> np.ndarray:
    """uint8 RGB [h, w, 3] -> [height, width, 3]; a pass runs only if its size changes."""
    out = np.ascontiguousarray(rgb)
    if width != out.shape[1]:
        first, count, w = coefficients(out.shape[1], width, algo)
        dst = np.empty((out.shape[0], width, 3), np.uint8)
        _horizontal(out, first, count, w, dst)
        out = dst
    if height != out.shape[0]:
        first, count, w = coefficients(out.shape[0], height, algo)
        dst = np.empty((height, out.shape[1] * 3), np.uint8)
        _vertical(out.reshape(out.shape[0], -1), first, count, w, dst)
        out = dst.reshape(height, -1, 3)
    return out


def resample_rows_reference(src: np.ndarray, n_out: int, algo: Resample) -> np.ndarray:
    """The numpy twin of one horizontal pass: uint8 [rows, n_in, 3] -> [rows, n_out, 3]."""
    rows, n_in, _ = src.shape
    first, _, weights = coefficients(n_in, n_out, algo)
    index = np.minimum(first[:, None] + np.arange(weights.shape[1]), n_in - 1)  # [n_out, ksize]
    out = np.empty((rows, n_out, 3), np.uint8)
    block = max(1, ROW_BLOCK_BYTES // (4 * 3 * n_out))
    for r0 in range(0, rows, block):
        part = src[r0 : r0 + block]
        acc = np.full((part.shape[0], n_out, 3), 1 << (PRECISION_BITS - 1), np.int32)
        for k in range(weights.shape[1]):  # |acc| < 2^31: weights sum to 2^22, pixels are 8-bit
            acc += part[:, index[:, k], :].astype(np.int32) * weights[None, :, k, None]
        out[r0 : r0 + block] = np.clip(acc >> PRECISION_BITS, 0, 255)
    return out


def pillow_resize_reference(rgb: np.ndarray, width: int, height: int,
                            algo: Resample) -> np.ndarray:
    """The numpy twin of pillow_resize."""
    out = rgb
    if width != rgb.shape[1]:
        out = resample_rows_reference(out, width, algo)
    if height != rgb.shape[0]:
        out = resample_rows_reference(out.transpose(1, 0, 2), height, algo).transpose(1, 0, 2)
    return np.ascontiguousarray(out)
