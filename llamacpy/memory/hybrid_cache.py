"""The memory of hybrid models (Qwen3.5): the KV cache of the attention layers and, per sequence,
the recurrent state of the linear-attention layers (llama.cpp: llama_memory_hybrid, a
llama_kv_cache beside a llama_memory_recurrent). Same interface as KVCache, so Context and the
server use it unchanged.

A recurrent state holds the whole past in a fixed size and cannot forget its last tokens, so
prompt-prefix reuse restores a snapshot instead of trimming (llama.cpp's server: context
checkpoints). While a batch runs, the model fills the snapshots `plan_snapshots` hands it: after
the last token of every segment of two or more tokens (a prompt chunk) and SNAPSHOT_TAIL tokens
before it, so a prompt sent again, which re-reads its last token, or one that differs only in its
last few tokens restores a state near its end. `trim(seq, n_keep)` goes back to the latest
snapshot at or before n_keep and returns the position it really kept.

A speculative draft being verified (`expect_rollback`) is snapshotted after every row instead, so
rejected guesses roll back exactly, without decoding the accepted ones again; those snapshots are
kept apart from the prompt's and live until the next trim.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .batch import Segment
from .kv_cache import KVCache, cell_layout

# snapshot a prompt chunk this many tokens before its end too (llama.cpp server-context.cpp:
# checkpoint_offsets = {4 + n_ubatch, 4})
SNAPSHOT_TAIL = 4
MAX_SNAPSHOTS = 8  # per sequence; the oldest goes first


@dataclass
class Snapshot:
    """The recurrent state of every linear-attention layer after positions 0..pos-1.

    A `live` snapshot (a prompt chunk's end) has no ssm copy yet: its delta-rule state is the
    sequence's own, which nothing changes before HybridCache copies it (`materialize`), so a
    prompt's peak memory holds one state copy fewer."""

    pos: int
    conv: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> float32 [K - 1, C]
    ssm: dict[int, np.ndarray] = field(default_factory=dict)  # layer -> float32 [H_v, d_v, d_k]
    live: bool = False

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.conv.values()) + sum(a.nbytes for a in self.ssm.values())


class HybridCache(KVCache):
    """KV for the layers where `recurrent` is False; conv and delta-rule states for the others.

    conv_shape: (K - 1, channels), the last K - 1 inputs of the causal convolution;
    ssm_shape: (n_v_heads, d_v, d_k), the delta-rule state stored transposed as ggml does.
    """

    def __init__(self, recurrent: list[bool], n_seq: int, n_ctx: int, n_head_kv: int, d_k: int,
                 d_v: int, conv_shape: tuple[int, int], ssm_shape: tuple[int, int, int],
                 type_k: str = "f16", type_v: str = "f16", max_snapshots: int = MAX_SNAPSHOTS):
        super().__init__(0, n_seq, n_ctx, n_head_kv, d_k, d_v, type_k, type_v)
        shape_k, shape_v, dk, dv = cell_layout(type_k, type_v, n_seq, n_ctx, n_head_kv, d_k, d_v)
        self.k = [None if r else np.zeros(shape_k, dk) for r in recurrent]  # [seq, pos, head, d]
        self.v = [None if r else np.zeros(shape_v, dv) for r in recurrent]
        self.conv = [np.zeros((n_seq, *conv_shape), np.float32) if r else None
                     for r in recurrent]  # [seq, K - 1, C]
        self.ssm = [np.zeros((n_seq, *ssm_shape), np.float32) if r else None
                    for r in recurrent]  # [seq, H_v, d_v, d_k]
        self.recurrent_layers = [il for il, r in enumerate(recurrent) if r]
        self.max_snapshots = max_snapshots
        self.snapshots: list[list[Snapshot]] = [[] for _ in range(n_seq)]  # by position
        self.pending: list[list[Snapshot]] = [[] for _ in range(n_seq)]  # being filled
        self.rollback = [False] * n_seq  # a draft is being decoded: snapshot every row
        self.draft_snapshots: list[list[Snapshot]] = [[] for _ in range(n_seq)]

    @property
    def nbytes(self) -> int:
        arrays = [a for a in self.k + self.v + self.conv + self.ssm if a is not None]
        held = self.snapshots + self.draft_snapshots
        return sum(a.nbytes for a in arrays) + sum(s.nbytes for ss in held for s in ss)

    def expect_rollback(self, seq: int) -> None:
        """`seq` now decodes a draft to verify: until the next trim it may go back to any row
        (the flag outlives one ubatch, should the draft be split across two)."""
        self.rollback[seq], self.draft_snapshots[seq] = True, []

    def check_room(self, seq: int, pos0: int, n: int) -> None:
        super().check_room(seq, pos0, n)
        if pos0 != self.n_past[seq]:
            raise ValueError(f"sequence {seq}: position {pos0} rewrites cached positions "
                             f"(n_past = {self.n_past[seq]}); a recurrent state must be "
                             f"trimmed back first")

    def plan_snapshots(self, segments: list[Segment]) -> dict[int, list[Snapshot]]:
        """Empty snapshots for the model to fill while it runs this ubatch, by sequence; they
        count once commit() confirms the ubatch."""
        plan = {}
        for s in segments:
            self.materialize(s.seq)  # this ubatch changes the state a live snapshot stands for
            n = s.stop - s.start
            if self.rollback[s.seq]:
                points = list(range(s.pos0 + 1, s.pos0 + n + 1))
            else:
                points = sorted({p for p in (s.pos0 + n - SNAPSHOT_TAIL, s.pos0 + n)
                                 if n >= 2 and p > s.pos0})
            end, rollback = s.pos0 + n, self.rollback[s.seq]
            plan[s.seq] = self.pending[s.seq] = [Snapshot(p, live=p == end and not rollback)
                                                 for p in points]
        return plan

    def materialize(self, seq: int) -> None:
        """Copy the live state into `seq`'s live snapshot, before anything changes that state.
        A live snapshot is always at n_past: every commit after it comes through
        plan_snapshots, which calls this first."""
        for snap in self.snapshots[seq]:
            if snap.live:
                snap.ssm = {il: self.ssm[il][seq].copy() for il in self.recurrent_layers}
                snap.live = False

    def commit(self, seq: int, n_past: int) -> None:
        super().commit(seq, n_past)
        done = [s for s in self.pending[seq] if s.pos <= n_past]
        self.pending[seq] = []
        if self.rollback[seq]:
            self.draft_snapshots[seq] += done
        elif done:
            keep = [s for s in self.snapshots[seq] if s.pos not in {d.pos for d in done}]
            self.snapshots[seq] = sorted(keep + done, key=lambda s: s.pos)[-self.max_snapshots:]

    def trim(self, seq: int, n_keep: int) -> int:
        """Keep at most n_keep positions of `seq`: the recurrent state goes back to the latest
        snapshot at or before n_keep (or to empty). Returns the positions really kept."""
        drafted, self.draft_snapshots[seq] = self.draft_snapshots[seq], []
        self.rollback[seq] = False
        if n_keep >= self.n_past[seq]:
            return int(self.n_past[seq])
        usable = [s for s in self.snapshots[seq] if s.pos <= n_keep]
        usable += [s for s in drafted if s.pos == n_keep]  # a draft rolled back exactly
        self.snapshots[seq], self.pending[seq] = usable[-self.max_snapshots:], []
        if usable:
            self._restore(seq, usable[-1])
            self.n_past[seq] = usable[-1].pos
        else:
            self._reset(seq)
            self.n_past[seq] = 0
        return int(self.n_past[seq])

    def clear(self, seq: int | None = None) -> None:
        for s in range(self.n_seq) if seq is None else [seq]:
            self._reset(s)
            self.snapshots[s], self.pending[s], self.draft_snapshots[s] = [], [], []
            self.rollback[s] = False
        super().clear(seq)

    def _restore(self, seq: int, snap: Snapshot) -> None:
        if snap.live:  # at n_past: the state is already the snapshot's
            return
        for il in self.recurrent_layers:
            self.conv[il][seq] = snap.conv[il]
            self.ssm[il][seq] = snap.ssm[il]

    def _reset(self, seq: int) -> None:
        for il in self.recurrent_layers:
            self.conv[il][seq] = 0
            self.ssm[il][seq] = 0
