"""Q5_0 and IQ4_NL matrices rewritten as Q8_0 at load (Linear's `repack_q8_0`), an exact copy.

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
from ..quants.legacy import high_bits, low_high_nibbles
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
    return out


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
