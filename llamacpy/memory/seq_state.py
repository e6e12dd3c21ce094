"""One sequence's memory copied out and back (llama.cpp: llama_state_seq_get_data /
llama_state_seq_set_data): the KV rows of its cached cells in every layer, whatever their cache
type, and for a hybrid cache its recurrent state and snapshots. The server's prompt cache in host
RAM (--cache-ram) keeps idle slots' prompts as these."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .hybrid_cache import HybridCache, Snapshot
from .kv_cache import KVCache


@dataclass
class SeqState:
    n_past: int
    k: list[np.ndarray | None]  # per layer: the cells' rows [n_past, head, d_k or block bytes]
    v: list[np.ndarray | None]
    conv: list[np.ndarray | None] = field(default_factory=list)  # hybrid: per layer [K - 1, C]
    ssm: list[np.ndarray | None] = field(default_factory=list)  # hybrid: [H_v, d_v, d_k]
    snapshots: list[Snapshot] = field(default_factory=list)  # hybrid: by position

    @property
    def nbytes(self) -> int:
        arrays = [a for a in self.k + self.v + self.conv + self.ssm if a is not None]
        return sum(a.nbytes for a in arrays) + sum(s.nbytes for s in self.snapshots)


def seq_nbytes(cache: KVCache, seq: int) -> int:
    """The bytes save_seq would copy, without copying them."""
    n = int(cache.n_past[seq])
    out = sum(a[seq, :n].nbytes for a in cache.k + cache.v if a is not None)
    if isinstance(cache, HybridCache):
        out += sum(a[seq].nbytes for a in cache.conv + cache.ssm if a is not None)
        live = sum(s.live for s in cache.snapshots[seq])  # copied when saved: count them too
        out += sum(s.nbytes for s in cache.snapshots[seq])
        out += live * sum(a[seq].nbytes for a in cache.ssm if a is not None)
    return out


def save_seq(cache: KVCache, seq: int) -> SeqState:
    """A copy of `seq`'s cached cells (and recurrent state)."""
    n = int(cache.n_past[seq])

    def rows(arrays):
        return [None if a is None else a[seq, :n].copy() for a in arrays]

    state = SeqState(n, rows(cache.k), rows(cache.v))
    if isinstance(cache, HybridCache):
        state.conv = [None if a is None else a[seq].copy() for a in cache.conv]
        state.ssm = [None if a is None else a[seq].copy() for a in cache.ssm]
        cache.materialize(seq)  # the state kept here must not depend on the cache's
        state.snapshots = list(cache.snapshots[seq])  # filled once, never written again
    return state


def load_seq(cache: KVCache, seq: int, state: SeqState) -> None:
    """Put `state` back as `seq`'s memory (whatever it held is forgotten)."""
    cache.clear(seq)
    n = state.n_past
    for arrays, saved in ((cache.k, state.k), (cache.v, state.v)):
        for a, s in zip(arrays, saved):
            if a is not None:
                a[seq, :n] = s
    if isinstance(cache, HybridCache):
        for arrays, saved in ((cache.conv, state.conv), (cache.ssm, state.ssm)):
            for a, s in zip(arrays, saved):
                if a is not None:
                    a[seq] = s
        cache.snapshots[seq] = list(state.snapshots)
    cache.n_past[seq] = n
