"""Writing keys and values into an fp16 KV cache: float32 rows converted in one kernel call per
layer (numpy's astype(float16) and fancy-index assignment cost ~10 us a call, four per layer)."""

from __future__ import annotations

from numba import njit

from .simd import f16_bits
from .threading_layer import NOGIL


@njit(inline="always")
def _store_row(cache, s, p, x, i):
    for h in range(x.shape[1]):
        for d in range(x.shape[2]):
            cache[s, p, h, d] = f16_bits(x[i, h, d])


@njit(cache=True, nogil=NOGIL)
def store_rows_f16(k_cache, v_cache, seqs, positions, k, v):
    """Row i of k, v float32 [n, n_head_kv, d] into uint16 (fp16 bits) caches [seq, pos, head, d]
    at sequence seqs[i], position positions[i]."""
    for i in range(k.shape[0]):
        _store_row(k_cache, seqs[i], positions[i], k, i)
        _store_row(v_cache, seqs[i], positions[i], v, i)
