"""Matrices rewritten at load for faster kernels (Linear's `repack`), exact copies.

Q5_0 and IQ4_NL become Q8_0 for every kernel; Q6_K gets a second copy in bytes that the
multi-token kernel reads (`repack_q6_k_bytes`), while one-token decoding keeps the original.

Q5_0's q - 16 and IQ4_NL's grid values both fit int8, so each block becomes a Q8_0 block with the
same fp16 scale and `dequantize` gives identical floats. The numba kernel decodes each block's 32
int8 values in registers with the decode kernels' helpers (matvec.q5_0_bytes / iq4_nl_bytes) and
stores them with one 32-byte store, in parallel over rows; `repack_as_q8_0_reference` is its
numpy twin.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..format.constants import GGML_QUANT_SIZES, GGMLType
from ..quants.legacy import f16_field, high_bits, low_high_nibbles
from .dequant import IQ4_NL_GRID, call_kernel, ld2, st2
from .matvec import iq4_nl_bytes, q5_0_bytes
from .simd import store_w16
from .threading_layer import NOGIL

REPACKABLE = (GGMLType.Q5_0, GGMLType.IQ4_NL)


@njit(inline="always")
def _repack_rows(w, out, q5):
    size = 22 if q5 else 18
    for r in prange(w.shape[0]):
        for b in range(w.shape[1] // size):
            o, p = size * b, 34 * b
            st2(out, r, p, ld2(w, r, o))  # the fp16 scale
            st2(out, r, p + 1, ld2(w, r, o + 1))
            store_w16(out, r, p + 2, q5_0_bytes(w, r, o) if q5 else iq4_nl_bytes(w, r, o))


@njit(parallel=True, cache=True, nogil=NOGIL)
def repack_q5_0(w, out):  # w: uint8 [rows, 22 * nb] -> out: uint8 [rows, 34 * nb]
    _repack_rows(w, out, True)


@njit(parallel=True, cache=True, nogil=NOGIL)
def repack_iq4_nl(w, out):  # w: uint8 [rows, 18 * nb] -> out: uint8 [rows, 34 * nb]
    _repack_rows(w, out, False)


def _check(w_blocks: np.ndarray, ggml_type: int) -> GGMLType:
    ggml_type = GGMLType(ggml_type)
    if ggml_type not in REPACKABLE:
        raise ValueError(f"cannot repack {ggml_type.name} as Q8_0")
    if w_blocks.ndim != 2 or w_blocks.shape[1] % GGML_QUANT_SIZES[ggml_type][1]:
        raise ValueError(f"expected uint8 [rows, row bytes] {ggml_type.name} blocks, "
                         f"got {w_blocks.dtype} {w_blocks.shape}")
    return ggml_type


def repack_as_q8_0(w_blocks: np.ndarray, ggml_type: int) -> np.ndarray:
    """Q5_0 or IQ4_NL rows (uint8 [rows, row_bytes]) rewritten exactly as Q8_0 rows; a copy."""
    ggml_type = _check(w_blocks, ggml_type)
    size = GGML_QUANT_SIZES[ggml_type][1]
    out = np.empty((w_blocks.shape[0], w_blocks.shape[1] // size * 34), np.uint8)
    kernel = repack_q5_0 if ggml_type == GGMLType.Q5_0 else repack_iq4_nl
    call_kernel(kernel, np.ascontiguousarray(w_blocks), out)
    return read_only(out)


def repack_as_q8_0_reference(w_blocks: np.ndarray, ggml_type: int) -> np.ndarray:
    """The numpy twin of `repack_as_q8_0`."""
    ggml_type = _check(w_blocks, ggml_type)
    size = GGML_QUANT_SIZES[ggml_type][1]
    blocks = w_blocks.reshape(-1, size)
    out = np.empty((blocks.shape[0], 34), np.uint8)
    grid = IQ4_NL_GRID.astype(np.int8)
    for b0 in range(0, blocks.shape[0], 1 << 20):  # bounded temporaries for big embeddings
        part = blocks[b0 : b0 + (1 << 20)]
        if ggml_type == GGMLType.Q5_0:
            q = low_high_nibbles(part[:, 6:22]) | (high_bits(part[:, 2:6], 32) << 4)
            q = q.astype(np.int8) - np.int8(16)
        else:
            q = grid[low_high_nibbles(part[:, 2:18])]
        out[b0 : b0 + part.shape[0], :2] = part[:, :2]
        out[b0 : b0 + part.shape[0], 2:] = q.view(np.uint8)
    return out.reshape(w_blocks.shape[0], -1)


def repack_q6_k_bytes(w_blocks: np.ndarray) -> np.ndarray:
    """Q6_K rows (uint8 [rows, 210 * n_super]) rewritten for matmul.multi_q6_k_bytes, 40 bytes per
    32 weights: each block's quants q - 32 as int8 in weight order (32 * nb bytes), then each
    block's two 16-weight scales as int16 (4 * nb), then each block's super-block scale d as
    float32 (4 * nb). Sign extension and a multiply per half then replace Q6_K's bit unpacking
    (~16 vector operations per block, 1.4x slower at 4 tokens)."""
    if w_blocks.ndim != 2 or w_blocks.shape[1] % 210:
        raise ValueError(f"expected uint8 [rows, row bytes] Q6_K blocks, got {w_blocks.dtype} "
                         f"{w_blocks.shape}")
    rows, nsb = w_blocks.shape[0], w_blocks.shape[1] // 210
    nb = 8 * nsb
    out = np.empty((rows, 40 * nb), np.uint8)
    step = max(1, (1 << 20) // nsb)  # bounded temporaries for big matrices
    for r0 in range(0, rows, step):
        part = np.ascontiguousarray(w_blocks[r0 : r0 + step]).reshape(-1, 210)
        n = part.shape[0] // nsb  # rows in this part
        ql, qh = part[:, 0:128].reshape(-1, 2, 64), part[:, 128:192].reshape(-1, 2, 1, 32)
        low = np.stack([ql[:, :, 0:32] & 0x0F, ql[:, :, 32:64] & 0x0F,
                        ql[:, :, 0:32] >> 4, ql[:, :, 32:64] >> 4], axis=2)
        high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]) & 3
        q = (low | (high << 4)).astype(np.int8) - np.int8(32)  # [n * nsb, 2, 4, 32]: in order
        sc = part[:, 192:208].view(np.int8).astype(np.int16)  # sub-block j: weights 16j..
        d = np.repeat(f16_field(part, 208).astype(np.float32), 8)
        dst = out[r0 : r0 + n]
        dst[:, : 32 * nb] = q.reshape(n, -1).view(np.uint8)
        dst[:, 32 * nb : 36 * nb] = sc.reshape(n, -1).view(np.uint8)
        dst[:, 36 * nb :] = d.reshape(n, -1).view(np.uint8)
    return read_only(out)


def read_only(w: np.ndarray) -> np.ndarray:
    """A repacked matrix marked read-only, as the mapped file's matrices are: numba types an
    array's writability into a kernel's signature, so a writable Q8_0 repack would compile
    every Q8_0 kernel a second time (same machine code) beside the file's Q8_0 matrices."""
    w.setflags(write=False)
    return w
