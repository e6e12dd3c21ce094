"""The model's own multi-token-prediction block as a drafter (--spec-type draft-mtp; llama.cpp:
common_speculative_impl_draft_mtp for qwen35, one MTP head).

The block predicts the token after next from a token and the trunk's final hidden state at the
position before it. Its attention has a cache of its own, filled position by position with the
pairs (x_p, h_{p-1}) of every token the target has decoded (h_{-1} is zeros, as llama.cpp's first
pending row). Drafting starts from the sampled token and the target's hidden state of the last
decoded position, then chains on the block's own output hidden state, one token per step, greedy
over the top 10 (llama.cpp's draft sampler) and stopping below p_min.

llama.cpp fills the block's cache eagerly after each target batch; here it is filled when a draft
is asked for, from the target's hidden rows kept by position, so rejected guesses never need
undoing: the cache is trimmed back to the longest prefix that matches the sequence.
"""

from __future__ import annotations

import numpy as np

from ..memory.batch import Batch
from .draft_vocab import DEFAULT_DRAFT_VOCAB, DraftVocabulary, draft_head
from .sequence import common_prefix

TOP_K = 10  # the draft sampler's top-k (common_sampler with COMMON_SAMPLER_TYPE_TOP_K)
CHUNK = 512  # rows per forward of the block while it catches up on a prompt


class MtpDrafter:
    spec_type = "draft-mtp"
    uses_p_min = True

    def __init__(self, model, n_ctx_seq: int, n_seq: int, n_max: int = 3, n_min: int = 0,
                 p_min: float = 0.0, vocab: int = DEFAULT_DRAFT_VOCAB):
        blocks = getattr(model, "mtp", None)
        if not blocks:
            raise ValueError(f"--spec-type draft-mtp needs a model with an MTP block "
                             f"(nextn_predict_layers > 0); this {model.args.arch} model has none")
        if n_max < 0:
            raise ValueError("--spec-draft-n-max must not be negative")
        self.model, self.block = model, blocks[0]
        # the block's head (the target's own unless the block has one), over `vocab` ids
        self.head = draft_head(self.block.head(model), vocab)
        self.n_max, self.n_min, self.p_min = n_max, n_min, p_min
        self.n_ctx = n_ctx_seq
        self.cache = self.block.make_cache(n_ctx_seq, n_seq)
        # the target's h_nextn by (sequence, position); pages are touched only where written
        self.hidden = np.zeros((n_seq, n_ctx_seq, model.args.n_embd), np.float32)
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]  # what the cache holds
        model.hidden_sink = self.take_hidden

    def take_hidden(self, batch: Batch, h: np.ndarray) -> None:
        """The target's forward hands over every row's final hidden state."""
        self.hidden[batch.seq_ids, batch.positions] = h

    def begin(self, seq: int, tokens: list[int]) -> None:
        """Fill the block's cache from a decoded prompt, whose hidden rows the target has just
        handed over (a prompt with images is left to `draft`, which declines it)."""
        if len(tokens) >= 1 and min(tokens) >= 0 and len(tokens) + 1 < self.n_ctx:
            self._catch_up(seq, tokens)

    def draft(self, seq: int, history: list[int], n_max: int,
              p_min: float | None = None) -> list[int]:
        """Up to n_max guesses after history[-1] (sampled, not yet decoded by the target)."""
        p_min = self.p_min if p_min is None else p_min
        pos0 = len(history) - 1
        n_max = min(n_max, self.n_max, self.n_ctx - pos0 - 1)
        if n_max <= 0 or pos0 < 1 or min(history) < 0:  # images: no token to embed
            return []
        self._catch_up(seq, history[:pos0])
        if isinstance(self.head, DraftVocabulary):
            self.head.see(history)
        token, h, out = history[pos0], self.hidden[seq, pos0 - 1][None], []
        for pos in range(pos0, pos0 + n_max):
            h = self._forward(seq, [token], pos, h)
            token, p = self._top_candidate(h)
            if p < p_min:
                break
            out.append(token)
        self.cache.trim(seq, pos0)  # the guesses' cells: the target decides what stays
        return out if len(out) >= self.n_min else []

    def _catch_up(self, seq: int, tokens: list[int]) -> None:
        """Fill the block's cache with (x_p, h_{p-1}) for every position of `tokens` that it
        does not hold yet, after the longest prefix it holds."""
        held = self.tokens[seq]
        n = len(held)
        if tokens[:n] != held:  # one C-level comparison per step in the usual case
            n = common_prefix(held, tokens)
        n = self.cache.trim(seq, n)
        for start in range(n, len(tokens), CHUNK):
            stop = min(start + CHUNK, len(tokens))
            h = np.empty((stop - start, self.hidden.shape[2]), np.float32)
            h[0] = self.hidden[seq, start - 1] if start > 0 else 0.0
            h[1:] = self.hidden[seq, start:stop - 1]
            self._forward(seq, tokens[start:stop], start, h)
        self.tokens[seq] = list(tokens)

    def _top_candidate(self, h: np.ndarray) -> tuple[int, float]:
        """top_candidate of the head's logits for hidden state h [1, n_embd]; a draft vocabulary's
        among the ids it covers (argpartition over 200k -inf ties takes ~40 ms)."""
        logits = self.head(h)[0]
        if not isinstance(self.head, DraftVocabulary):
            return top_candidate(logits)
        ids = self.head.ids()
        i, p = top_candidate(logits[ids])
        return int(ids[i]), p

    def _forward(self, seq: int, tokens: list[int], pos0: int, h: np.ndarray) -> np.ndarray:
        batch = Batch.from_tokens(tokens, pos0, seq, all_logits=True)
        self.cache.check_room(seq, pos0, len(tokens))
        out = self.block.forward(self.model, batch, h, self.cache)
        self.cache.commit(seq, pos0 + len(tokens))
        return out


def top_candidate(logits: np.ndarray) -> tuple[int, float]:
    """The most likely token and its probability among the top TOP_K (softmax over them, as
    the draft sampler's cur_p->data[0].p)."""
    top = np.argpartition(logits, -TOP_K)[-TOP_K:] if logits.shape[0] > TOP_K \
        else np.arange(logits.shape[0])
    z = logits[top].astype(np.float64)
    best = int(np.argmax(z))
    p = 1.0 / np.exp(z - z[best]).sum()
    return int(top[best]), float(p)
