"""The prompt cache in host RAM (llama-server's --cache-ram MiB; llama.cpp: server_prompt_cache).

When a slot is about to lose most of what it holds to a new prompt (it keeps under half of its
cells), its prompt and memory are saved here first; then the cached prompt that keeps most of
itself and covers most of the new prompt, if it beats what the slot has, is loaded into the slot,
so its prefix is reused instead of decoded again. Entries fully contained in a newer one are
dropped, and the oldest go first when the limit is reached.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..memory.seq_state import SeqState, load_seq, save_seq, seq_nbytes
from .sequence import Slot, common_prefix

MIN_KEEP = 0.25  # a cached prompt that would keep less of itself is not loaded (don't trash it)


@dataclass
class CachedPrompt:
    tokens: list[int]
    shifts: list[tuple[int, int]]
    state: SeqState


class PromptCache:
    def __init__(self, limit_mib: int):
        self.limit = limit_mib * 2**20 if limit_mib > 0 else 0  # 0: no limit (-1 given)
        self.entries: list[CachedPrompt] = []  # oldest first

    @property
    def nbytes(self) -> int:
        return sum(e.state.nbytes for e in self.entries)

    @property
    def n_tokens(self) -> int:
        return sum(len(e.tokens) for e in self.entries)

    def swap(self, slot: Slot, tokens: list[int]) -> bool:
        """Before `slot` starts on prompt `tokens`: save what it holds if it would keep less
        than half, then load a better cached prompt (get_available_slot's update_cache)."""
        if slot.tokens and common_prefix(slot.tokens, tokens) / len(slot.tokens) >= 0.5:
            return False
        self.save(slot)
        return self.load(slot, tokens)

    def save(self, slot: Slot) -> bool:
        """Copy the slot's prompt and memory in (server_prompt_cache::alloc)."""
        tokens = slot.tokens
        if not tokens or any(common_prefix(e.tokens, tokens) == len(tokens)
                             for e in self.entries):
            return False  # nothing to save, or already held by an entry
        size = seq_nbytes(slot.ctx.cache, slot.id)
        if self.limit and size > self.limit:
            return False
        self.entries = [e for e in self.entries
                        if common_prefix(e.tokens, tokens) != len(e.tokens)]
        while self.entries and self.limit and self.nbytes + size > self.limit:
            self.entries.pop(0)
        self.entries.append(CachedPrompt(list(tokens), list(slot.shifts),
                                         save_seq(slot.ctx.cache, slot.id)))
        return True

    def load(self, slot: Slot, tokens: list[int]) -> bool:
        """Load the entry that keeps more of itself and covers more of `tokens` than the slot
        does (server_prompt_cache::load); it leaves the cache."""
        lcp = common_prefix(slot.tokens, tokens)
        keep_best = lcp / len(slot.tokens) if slot.tokens else -1.0
        sim_best, best = lcp / len(tokens), None
        for e in self.entries:
            n = common_prefix(e.tokens, tokens)
            keep, sim = n / len(e.tokens), n / len(tokens)
            if keep >= MIN_KEEP and keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, e
        if best is None:
            return False
        load_seq(slot.ctx.cache, slot.id, best.state)
        slot.tokens, slot.shifts = list(best.tokens), list(best.shifts)
        self.entries.remove(best)
        return True
