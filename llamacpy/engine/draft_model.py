"""A draft model (-md, --spec-type draft-simple; llama.cpp: common_speculative_impl_draft_simple):
a small model with the target's vocabulary guesses greedily, one token at a time, on its own
context with one slot per target slot; each call reuses the prefix its slot already holds, so
only the tokens accepted since the last call (and the new sampled one) are decoded again.
"""

from __future__ import annotations

import numpy as np

from ..tokenizer import Tokenizer
from .context import Context
from .draft_vocab import DEFAULT_DRAFT_VOCAB, DraftVocabulary, draft_head
from .sequence import Slot

# common/speculative.cpp: SPEC_VOCAB_MAX_SIZE_DIFFERENCE, SPEC_VOCAB_CHECK_START_TOKEN_ID
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def check_compatible(target: Tokenizer, draft: Tokenizer) -> None:
    """common_speculative_are_compatible: the same vocabulary type, BOS/EOS use and ids, sizes
    within 128, and the same token texts; ValueError says what differs."""
    t, d = target.vocab, draft.vocab
    if t.type != d.type:
        raise ValueError(f"draft model vocab type must match target model to use speculation "
                         f"(draft {d.type}, target {t.type})")
    if t.add_bos != d.add_bos or (t.add_bos and target.bos != draft.bos):
        raise ValueError(f"draft model bos tokens must match target model to use speculation "
                         f"(add: {d.add_bos} - {t.add_bos}, id: {draft.bos} - {target.bos})")
    if t.add_eos != d.add_eos or (t.add_eos and target.eos != draft.eos):
        raise ValueError(f"draft model eos tokens must match target model to use speculation "
                         f"(add: {d.add_eos} - {t.add_eos}, id: {draft.eos} - {target.eos})")
    if abs(t.n_vocab - d.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise ValueError(f"draft model vocab must closely match target model to use "
                         f"speculation (target {t.n_vocab} tokens, draft {d.n_vocab})")
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(t.n_vocab, d.n_vocab)):
        if t.tokens[i] != d.tokens[i]:
            raise ValueError(f"draft model vocab must match target model to use speculation: "
                             f"token {i} is {d.tokens[i]!r} in the draft, {t.tokens[i]!r} in "
                             f"the target")


class DraftModel:
    """Greedy drafts of at most n_max tokens from a draft context, stopping at a token whose
    probability is below p_min (llama.cpp: --spec-draft-n-max 3, --spec-draft-p-min 0.0). With
    `vocab` > 0 the draft model's output head covers the first `vocab` ids and those the
    histories hold (engine/draft_vocab.py); the context's model is the drafter's own."""

    spec_type = "draft-simple"
    uses_p_min = True

    def __init__(self, ctx: Context, n_max: int = 3, n_min: int = 0, p_min: float = 0.0,
                 vocab: int = DEFAULT_DRAFT_VOCAB):
        if n_max < 0:
            raise ValueError("--spec-draft-n-max must not be negative")
        self.ctx, self.n_max, self.n_min, self.p_min = ctx, n_max, n_min, p_min
        self.slots = [Slot(ctx, i) for i in range(ctx.n_seq)]
        ctx.model.output = self.head = draft_head(ctx.model.output, vocab)

    def begin(self, seq: int, tokens: list[int]) -> None:
        """Read a decoded prompt into the draft's cache, so that the first draft decodes only
        the sampled token (a prompt with images, or longer than the draft's context, is left to
        `draft`, which declines it)."""
        if not tokens or min(tokens) < 0 or len(tokens) + 2 >= self.ctx.n_ctx_seq:
            return
        self.slots[seq].prefill(tokens)

    def draft(self, seq: int, history: list[int], n_max: int,
              p_min: float | None = None) -> list[int]:
        slot, p_min = self.slots[seq], self.p_min if p_min is None else p_min
        n_max = min(n_max, self.n_max, self.ctx.n_ctx_seq - len(history) - 1)
        if n_max <= 0 or any(t < 0 for t in history):  # images: the draft cannot read them
            return []
        if isinstance(self.head, DraftVocabulary):
            self.head.see(history)
        logits, _ = slot.prefill(history)
        out: list[int] = []
        while True:
            token = int(np.argmax(logits))
            if p_min > 0 and top_probability(logits, token) < p_min:  # p_min 0: skip the softmax
                break
            out.append(token)
            if len(out) >= n_max:
                break
            logits = slot.evaluate([token])[-1]
        return out if len(out) >= self.n_min else []


def top_probability(logits: np.ndarray, token: int) -> float:
    """The softmax probability of `token` (the draft sampler's cur_p->data[0].p)."""
    z = logits - logits[token]
    return float(1.0 / np.exp(z, dtype=np.float64).sum())


def build_speculator(cfg, target: Tokenizer, n_ctx: int, n_seq: int,
                     n_threads: int | None = None, n_threads_batch: int | None = None,
                     target_model=None):
    """The Speculator a SpecConfig asks for, in llama.cpp's order (n-gram before a draft
    model, then the MTP block of `target_model`), or None; a draft model with another
    vocabulary, or draft-mtp on a model without an MTP block, is a ValueError."""
    from ..format import open_gguf
    from ..models import load_model
    from .mtp_draft import MtpDrafter
    from .speculative import NgramSimple, Speculator

    drafters = []
    for kind in ("ngram-simple", "draft-simple", "draft-mtp"):
        if kind not in cfg.resolved_types():
            continue
        if kind == "ngram-simple":
            drafters.append(NgramSimple(cfg.ngram_size_n, cfg.ngram_size_m))
            continue
        if kind == "draft-mtp":
            if target_model is None:
                raise ValueError("--spec-type draft-mtp needs the target model")
            drafters.append(MtpDrafter(target_model, n_ctx // n_seq, n_seq, cfg.n_max,
                                       cfg.n_min, cfg.p_min, cfg.draft_vocab))
            continue
        gguf = open_gguf(cfg.draft_model)
        check_compatible(target, Tokenizer.from_gguf(gguf))
        ctx = Context(load_model(gguf, repack=cfg.repack_draft), n_ctx=cfg.n_ctx_draft or n_ctx,
                      n_seq=n_seq, n_threads=n_threads, n_threads_batch=n_threads_batch)
        drafters.append(DraftModel(ctx, cfg.n_max, cfg.n_min, cfg.p_min, cfg.draft_vocab))
    return Speculator(drafters) if drafters else None
