"""A drafter's output head over part of the vocabulary (--spec-draft-vocab; FR-Spec, EAGLE-3's
draft vocabulary): the first N token ids, which BPE and SentencePiece vocabularies order roughly
by frequency, and every id the sequences have held. The head is a large share of a small draft
model's step (Qwen2.5-Coder-0.5B: 136M of its 494M weights), and a draft only proposes: the
target verifies every token, so the output is the same whatever the draft's head leaves out.
"""

from __future__ import annotations

import numpy as np

from ..kernels.matmul import matmul
from .speculative import DEFAULT_DRAFT_VOCAB  # noqa: F401 (the drafters' default)


class DraftVocabulary:
    """Logits of `head` (a Linear: weight, ggml_type, in/out features) for ids < n_first and the
    ids `see` has been shown; -inf elsewhere, so a greedy draft never proposes them."""

    def __init__(self, head, n_first: int):
        if n_first < 0:
            raise ValueError("--spec-draft-vocab must not be negative")
        self.head = head
        self.n_vocab = head.out_features
        self.n_first = min(n_first, self.n_vocab)
        self.first_rows = head.weight[: self.n_first]  # a view: the rows are contiguous
        self.seen = np.zeros(self.n_vocab, bool)
        self.extra_ids = np.empty(0, np.int64)  # ids >= n_first seen so far
        self.extra_rows = head.weight[:0].copy()
        self._ids: np.ndarray | None = None

    def see(self, tokens) -> None:
        """Add the ids in `tokens` past the first n_first to the head (their rows copied once)."""
        ids = np.asarray(tokens, np.int64)
        ids = ids[(ids >= self.n_first) & (ids < self.n_vocab)]
        new = np.unique(ids[~self.seen[ids]])
        if len(new):
            self.seen[new] = True
            self.extra_ids = np.concatenate([self.extra_ids, new])
            self.extra_rows = np.concatenate([self.extra_rows, self.head.weight[new]])

    def ids(self) -> np.ndarray:
        """The ids covered, int64: 0..n_first - 1, then those seen since."""
        if self._ids is None or len(self._ids) != self.n_first + len(self.extra_ids):
            self._ids = np.concatenate([np.arange(self.n_first), self.extra_ids])
        return self._ids

    def __call__(self, h: np.ndarray) -> np.ndarray:
        """h float32 [rows, in_features] -> logits float32 [rows, n_vocab]."""
        h = np.ascontiguousarray(h, np.float32).reshape(-1, self.head.in_features)
        logits = np.full((h.shape[0], self.n_vocab), -np.inf, np.float32)
        ggml_type = self.head.ggml_type
        logits[:, : self.n_first] = matmul(self.first_rows, ggml_type, h)
        if len(self.extra_ids):
            logits[:, self.extra_ids] = matmul(self.extra_rows, ggml_type, h)
        return logits


def draft_head(head, n_first: int):
    """`head` itself where n_first is 0 or covers the vocabulary, else its DraftVocabulary."""
    if n_first == 0 or n_first >= head.out_features:
        return head
    return DraftVocabulary(head, n_first)
