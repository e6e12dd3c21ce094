"""Prompt-time kernels: Y[n_tokens, rows] = X[n_tokens, n] @ W[rows, n]^T, W read in place.

Large batches dequantize a tile of rows into a float32 scratch buffer (the numba decoders of
kernels/dequant.py, parallel over rows) and hand it to BLAS sgemm, tile by tile so the scratch
stays modest (llama.cpp's CPU backend instead converts X to the weight's vec_dot type; BLAS on
float32 is what numpy does best). Small batches decode each row once into an L1-resident buffer
and take its dot product with every token (the `multi_*` kernels); which path runs is chosen per
shape by `SMALL_BATCH`, measured with bench/bench_kernels.py.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..format.constants import GGMLType
from .dequant import (ROW_KERNELS, call_kernel, dq_bf16, dq_f16, dq_iq4_nl, dq_iq4_xs, dq_q2_k,
                      dq_q3_k, dq_q4_0, dq_q4_1, dq_q4_k, dq_q5_0, dq_q5_1, dq_q5_k, dq_q6_k,
                      dq_q8_0, ld2, output_array, row_length, weight_view)
from .matvec import matvec

MULTI_FASTMATH = {"contract", "reassoc"}  # reassoc lets LLVM vectorise the dot-product reductions
# float32 tile of dequantized rows handed to sgemm. Few, large tiles: with several threads each
# switch between numba's pool and OpenBLAS's (whose idle workers spin ~0.1 s) costs milliseconds.
SCRATCH_BYTES = 16 << 20
SMALL_BATCH = 8  # up to this many tokens the multi_* kernels beat dequantize + sgemm


@njit(inline="always")
def _dots(buf, X, Y, r):
    """Y[t, r] = buf[0] . X[t] for every token t, four tokens per pass over buf."""
    n_tok, n = X.shape
    t = 0
    while t + 4 <= n_tok:
        s0 = s1 = s2 = s3 = np.float32(0)
        for i in range(n):
            v = ld2(buf, 0, i)
            s0 += v * ld2(X, t, i)
            s1 += v * ld2(X, t + 1, i)
            s2 += v * ld2(X, t + 2, i)
            s3 += v * ld2(X, t + 3, i)
        Y[t, r], Y[t + 1, r], Y[t + 2, r], Y[t + 3, r] = s0, s1, s2, s3
        t += 4
    while t < n_tok:
        s = np.float32(0)
        for i in range(n):
            s += ld2(buf, 0, i) * ld2(X, t, i)
        Y[t, r] = s
        t += 1


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_f16(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_f16(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_bf16(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_bf16(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q4_0(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q4_0(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q4_1(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q4_1(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q5_0(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q5_0(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q5_1(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q5_1(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q8_0(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q8_0(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q2_k(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q2_k(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q3_k(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q3_k(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q4_k(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q4_k(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q5_k(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q5_k(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_q6_k(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_q6_k(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_iq4_nl(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_iq4_nl(w, r, buf, 0)
        _dots(buf, X, Y, r)


@njit(parallel=True, cache=True, fastmath=MULTI_FASTMATH)
def multi_iq4_xs(w, X, Y):
    for r in prange(w.shape[0]):
        buf = np.empty((1, X.shape[1]), np.float32)  # row r, decoded
        dq_iq4_xs(w, r, buf, 0)
        _dots(buf, X, Y, r)


MULTI_KERNELS = {
    GGMLType.F16: multi_f16,
    GGMLType.BF16: multi_bf16,
    GGMLType.Q4_0: multi_q4_0,
    GGMLType.Q4_1: multi_q4_1,
    GGMLType.Q5_0: multi_q5_0,
    GGMLType.Q5_1: multi_q5_1,
    GGMLType.Q8_0: multi_q8_0,
    GGMLType.Q2_K: multi_q2_k,
    GGMLType.Q3_K: multi_q3_k,
    GGMLType.Q4_K: multi_q4_k,
    GGMLType.Q5_K: multi_q5_k,
    GGMLType.Q6_K: multi_q6_k,
    GGMLType.IQ4_NL: multi_iq4_nl,
    GGMLType.IQ4_XS: multi_iq4_xs,
}


def matmul(w_blocks: np.ndarray, ggml_type: int, X: np.ndarray,
           out: np.ndarray | None = None) -> np.ndarray:
    """Y = X @ W^T, W uint8 [rows, row_bytes] blocks of `ggml_type`: float32 [n_tokens, rows]."""
    ggml_type = GGMLType(ggml_type)
    rows, n = w_blocks.shape[0], row_length(w_blocks.shape[1], ggml_type)
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[1] != n:
        raise ValueError(f"X has shape {X.shape}, expected (n_tokens, {n}) for a "
                         f"{ggml_type.name} matrix of {rows} x {n}")
    out = output_array(out, (X.shape[0], rows))
    if X.shape[0] == 1:
        matvec(w_blocks, ggml_type, X[0], out[0])
    elif ggml_type == GGMLType.F32:
        np.matmul(X, w_blocks.view(np.float32).T, out=out)
    elif X.shape[0] <= SMALL_BATCH and ggml_type in MULTI_KERNELS:
        call_kernel(MULTI_KERNELS[ggml_type], weight_view(w_blocks, ggml_type), X, out)
    else:
        _tiled(w_blocks, ggml_type, X, out)
    return out


def _tiled(w_blocks: np.ndarray, ggml_type: GGMLType, X: np.ndarray, out: np.ndarray) -> None:
    """Dequantize `tile` rows at a time into scratch and multiply with sgemm."""
    if ggml_type not in ROW_KERNELS:
        raise NotImplementedError(f"no CPU matmul kernel for tensor type {ggml_type.name}")
    rows, n = out.shape[1], X.shape[1]
    tile = min(rows, max(64, SCRATCH_BYTES // (4 * n) // 16 * 16))
    scratch = np.empty((tile, n), np.float32)  # [tile rows, n]
    ids = np.arange(rows, dtype=np.int64)
    w, kernel = weight_view(w_blocks, ggml_type), ROW_KERNELS[ggml_type]
    for r0 in range(0, rows, tile):
        r1 = min(rows, r0 + tile)
        part = scratch[: r1 - r0]
        call_kernel(kernel, w, ids[r0:r1], part)
        np.matmul(X, part.T, out=out[:, r0:r1])
