"""The KV cache: keys and values per layer (fp16 by default, f32 with -ctk/-ctv f32), one stream
of n_ctx positions per sequence (llama.cpp's non-unified cache: each slot owns n_ctx / n_seq cells).

A sequence's cells hold positions 0..n_past-1 in order, so prompt-prefix reuse is a trim.
"""

from __future__ import annotations

import numpy as np

from ..kernels.kv_store import store_rows_f16


class ContextFullError(ValueError):
    """A batch would write past the end of its sequence's context."""


# -ctk / -ctv cache types: the array dtype each is stored in (fp16 as its uint16 bit pattern)
CACHE_TYPES = {"f16": np.uint16, "f32": np.float32}


def cache_dtype(name: str) -> type:
    if name.lower() not in CACHE_TYPES:
        raise ValueError(f"KV cache type '{name}' is not supported by llamacpy yet "
                         f"(supported: {', '.join(CACHE_TYPES)})")
    return CACHE_TYPES[name.lower()]


class KVCache:
    def __init__(self, n_layer: int, n_seq: int, n_ctx: int, n_head_kv: int, d_k: int, d_v: int,
                 type_k: str = "f16", type_v: str = "f16"):
        self.n_seq, self.n_ctx = n_seq, n_ctx
        shape_k, shape_v = (n_seq, n_ctx, n_head_kv, d_k), (n_seq, n_ctx, n_head_kv, d_v)
        dk, dv = cache_dtype(type_k), cache_dtype(type_v)
        self.k = [np.zeros(shape_k, dk) for _ in range(n_layer)]  # [seq, pos, head, d_k]
        self.v = [np.zeros(shape_v, dv) for _ in range(n_layer)]  # [seq, pos, head, d_v]
        self.n_past = np.zeros(n_seq, np.int64)  # filled positions per sequence

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    def check_room(self, seq: int, pos0: int, n: int) -> None:
        if not 0 <= seq < self.n_seq:
            raise ValueError(f"sequence id {seq} out of range (n_seq = {self.n_seq})")
        if pos0 + n > self.n_ctx:
            raise ContextFullError(f"sequence {seq}: positions up to {pos0 + n} exceed the "
                                   f"context size {self.n_ctx}")
        if pos0 > self.n_past[seq]:
            raise ValueError(f"sequence {seq}: position {pos0} leaves a gap after "
                             f"{self.n_past[seq]} cached positions")

    def store(self, layer: int, seq: int, pos0: int, k: np.ndarray, v: np.ndarray) -> None:
        """Write float32 k [n, n_head_kv, d_k] and v at positions pos0.. of `seq`."""
        n = k.shape[0]
        self.store_rows(layer, np.full(n, seq), np.arange(pos0, pos0 + n), k, v)

    def store_rows(self, layer: int, seqs: np.ndarray, positions: np.ndarray, k: np.ndarray,
                   v: np.ndarray) -> None:
        """Row i of k [n, n_head_kv, d_k] and v at position positions[i] of sequence seqs[i]
        (the server's decode step: one row per sequence; `store`: a run of one sequence)."""
        if self.k[layer].dtype == np.uint16 and self.v[layer].dtype == np.uint16:
            store_rows_f16(self.k[layer], self.v[layer], seqs, positions,
                           np.asarray(k, np.float32), np.asarray(v, np.float32))
            return
        self.k[layer][seqs, positions] = to_cache(k, self.k[layer].dtype)
        self.v[layer][seqs, positions] = to_cache(v, self.v[layer].dtype)

    def commit(self, seq: int, n_past: int) -> None:
        """Record that `seq` now holds positions 0..n_past-1 (after all layers stored)."""
        self.n_past[seq] = max(self.n_past[seq], n_past)

    def expect_rollback(self, seq: int) -> None:
        """The next segment of `seq` is a speculative draft that may be trimmed back to any of
        its rows; trimming KV cells is free, so nothing to prepare (a recurrent state is not)."""

    def trim(self, seq: int, n_keep: int) -> int:
        """Forget positions >= n_keep of `seq` (llama_memory_seq_rm from n_keep to the end);
        returns the positions kept (a hybrid cache may keep fewer than asked)."""
        self.n_past[seq] = min(self.n_past[seq], max(0, n_keep))
        return int(self.n_past[seq])

    def clear(self, seq: int | None = None) -> None:
        if seq is None:
            self.n_past[:] = 0
        else:
            self.n_past[seq] = 0


def to_cache(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return x.astype(np.float16).view(np.uint16) if dtype == np.uint16 else x

