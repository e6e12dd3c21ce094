"""A batch of tokens to decode, with their positions, sequence ids and which rows return logits
(llama.cpp: llama_batch). Batch metadata travels explicitly, never through globals.

A row is either a token id or, for image tokens (token < 0), a row of `embeddings` (llama.cpp:
llama_batch.embd). `positions` is the row's KV cell in its sequence (and the position causal
masks compare); M-RoPE models rotate by `mrope_positions`, which after an image differ from it.
"""

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
    causal: bool = True  # False: every row sees the whole segment (llama_set_causal_attn)

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
    embeddings: np.ndarray | None = None  # float32 [n, n_embd]: the input of rows with token < 0
    non_causal: np.ndarray | None = None  # bool [n]: rows that attend both ways in their segment

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
        def part(a):
            return None if a is None else a[start:stop]
        return Batch(self.tokens[start:stop], self.positions[start:stop],
                     self.seq_ids[start:stop], self.logits[start:stop],
                     part(self.mrope_positions), part(self.embeddings), part(self.non_causal))

    def mrope(self) -> np.ndarray:
        """M-RoPE positions int32 [n, 4]: the field, or for text tokens (p, p, p, 0) as llama.cpp
        builds them from the plain positions (llm_graph_input_pos::set_input)."""
        if self.mrope_positions is not None:
            return self.mrope_positions
        out = np.zeros((len(self), 4), np.int32)
        out[:, :3] = self.positions[:, None]
        return out

    def causal(self, row: int) -> bool:
        return self.non_causal is None or not self.non_causal[row]

    def segments(self) -> list[Segment]:
        """Split rows into runs of one sequence with consecutive positions (and one kind of
        attention: causal or not)."""
        out, start = [], 0
        for i in range(1, len(self) + 1):
            if (i == len(self) or self.seq_ids[i] != self.seq_ids[start]
                    or self.positions[i] != self.positions[i - 1] + 1
                    or self.causal(i) != self.causal(start)):
                out.append(Segment(int(self.seq_ids[start]), start, i, int(self.positions[start]),
                                   self.causal(start)))
                start = i
        return out


def concat(batches: list[Batch]) -> Batch:
    """One batch of the rows of `batches`, in order; optional fields are filled for the parts
    that lack them (text M-RoPE (p, p, p, 0), zero embeddings, causal)."""
    if len(batches) == 1:
        return batches[0]
    width = next((b.embeddings.shape[1] for b in batches if b.embeddings is not None), 0)

    def joined(field: str, fill) -> np.ndarray | None:
        if all(getattr(b, field) is None for b in batches):
            return None
        return np.concatenate([fill(b) if getattr(b, field) is None else getattr(b, field)
                               for b in batches])

    return Batch(np.concatenate([b.tokens for b in batches]),
                 np.concatenate([b.positions for b in batches]),
                 np.concatenate([b.seq_ids for b in batches]),
                 np.concatenate([b.logits for b in batches]),
                 joined("mrope_positions", Batch.mrope),
                 joined("embeddings", lambda b: np.zeros((len(b), width), np.float32)),
                 joined("non_causal", lambda b: np.zeros(len(b), bool)))
