"""A batch of tokens to decode, with their positions, sequence ids and which rows return logits
(llama.cpp: llama_batch). Batch metadata travels explicitly, never through globals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Segment:
    """Consecutive batch rows [start, stop) of one sequence at consecutive positions."""

    seq: int
    start: int
    stop: int
    pos0: int  # position of row `start`

    @property
    def rows(self) -> slice:
        return slice(self.start, self.stop)


@dataclass
class Batch:
    tokens: np.ndarray  # int32 [n]
    positions: np.ndarray  # int32 [n]
    seq_ids: np.ndarray  # int32 [n]
    logits: np.ndarray  # bool [n]: rows whose logits are returned
    mrope_positions: np.ndarray | None = None  # int32 [n, 4]: M-RoPE (t, h, w, e); None: text

    @classmethod
    def from_tokens(cls, tokens, pos0: int = 0, seq: int = 0, all_logits: bool = False) -> Batch:
        """One sequence's tokens at positions pos0.. ; logits for the last row (or all)."""
        n = len(tokens)
        logits = np.ones(n, bool) if all_logits else np.arange(n) == n - 1
        return cls(np.asarray(tokens, np.int32), np.arange(pos0, pos0 + n, dtype=np.int32),
                   np.full(n, seq, np.int32), logits)

    def __len__(self) -> int:
        return len(self.tokens)

    def slice(self, start: int, stop: int) -> Batch:
        mrope = None if self.mrope_positions is None else self.mrope_positions[start:stop]
        return Batch(self.tokens[start:stop], self.positions[start:stop],
                     self.seq_ids[start:stop], self.logits[start:stop], mrope)

    def mrope(self) -> np.ndarray:
        """M-RoPE positions int32 [n, 4]: the field, or for text tokens (p, p, p, 0) as llama.cpp
        builds them from the plain positions (llm_graph_input_pos::set_input)."""
        if self.mrope_positions is not None:
            return self.mrope_positions
        out = np.zeros((len(self), 4), np.int32)
        out[:, :3] = self.positions[:, None]
        return out

    def segments(self) -> list[Segment]:
        """Split rows into runs of one sequence with consecutive positions."""
        out, start = [], 0
        for i in range(1, len(self) + 1):
            if (i == len(self) or self.seq_ids[i] != self.seq_ids[start]
                    or self.positions[i] != self.positions[i - 1] + 1):
                out.append(Segment(int(self.seq_ids[start]), start, i, int(self.positions[start])))
                start = i
        return out
