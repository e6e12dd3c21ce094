"""Speculative decoding (llama.cpp: common/speculative.cpp and the server's draft verification).

A drafter guesses the next few tokens of a sequence; the target model decodes the sampled token
and the guesses in one batched step, with logits for every row. The sequence then samples row by
row with its own sampler and keeps a guess only while the token it samples equals it, so every
token still comes from the target's distribution (speculative sampling with a point-mass draft:
accept with probability p(d), else the residual, which is p without d, renormalized). The cells
of rejected guesses are trimmed from the cache (a recurrent state restores a snapshot).

Drafters: `NgramSimple` (--spec-type ngram-simple: the tokens that followed the last n-gram the
last time it occurred), `DraftModel` (-md: a small model with the target's vocabulary,
greedy, stopping below p_min) and `MtpDrafter` (--spec-type draft-mtp: the target's own MTP
block, engine/mtp_draft.py). Any object with `draft(seq, history, n_max)` works.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

# llama.cpp's --spec-type names (common_speculative_type_from_name), and the ones we run
SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash",
              "draft-dspark", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
              "ngram-cache")
SUPPORTED_TYPES = ("none", "draft-simple", "draft-mtp", "ngram-simple")
# ids a draft's output head covers beyond those the sequences hold (engine/draft_vocab.py):
# EAGLE-3's and FR-Spec's draft vocabularies for Llama 3's 128k
DEFAULT_DRAFT_VOCAB = 32768


class Drafter(Protocol):
    """Guesses up to n_max tokens to follow `history` (the sequence's cells and its sampled,
    not yet decoded, token)."""

    n_max: int  # the most it ever drafts (common_speculative_n_max)

    def draft(self, seq: int, history: list[int], n_max: int) -> list[int]: ...


@dataclass
class SpecParams:
    """Per-request limits (the server's speculative.n_max / n_min / p_min)."""

    n_max: int | None = None  # None: each drafter's own limit
    n_min: int = 0  # a shorter draft is dropped
    p_min: float | None = None  # a draft model stops below this probability; None: its own


@dataclass
class SpecStats:
    """Counters behind timings' draft_n / draft_n_accepted and the server's metrics."""

    n_draft: int = 0
    n_accepted: int = 0
    n_steps: int = 0  # verification steps
    accepted_per_pos: list[int] = field(default_factory=list)

    def drafted(self, n: int) -> None:
        """A verification step of an n-token draft begins."""
        self.n_draft += n
        self.n_steps += 1
        self.accepted_per_pos += [0] * (n - len(self.accepted_per_pos))

    def accepted(self, i: int) -> None:
        """The draft's guess at index i was taken."""
        self.n_accepted += 1
        self.accepted_per_pos[i] += 1


def parse_spec_types(value: str) -> list[str]:
    """--spec-type a,b: llama.cpp's names; ValueError for an unknown or unsupported one."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    for name in names:
        if name not in SPEC_TYPES:
            raise ValueError(f"unknown speculative decoding type '{name}' (known: "
                             f"{', '.join(SPEC_TYPES)})")
        if name not in SUPPORTED_TYPES:
            raise ValueError(f"--spec-type {name} is not supported by llamacpy yet "
                             f"(supported: {', '.join(SUPPORTED_TYPES)})")
    return names


def ngram_simple_draft(tokens: list[int], sampled: int, size_n: int, size_m: int) -> list[int]:
    """llama.cpp's common_ngram_simple_draft: find the last size_n tokens (ending with
    `sampled`) earlier in `tokens`, searching backwards, and propose up to size_m tokens that
    followed them; nothing when there is no match or fewer than size_n would follow."""
    cur = len(tokens)
    if cur <= size_n + size_m + 1:
        return []
    arr = np.asarray(tokens, np.int64)
    pattern = np.append(arr[cur - size_n + 1:], sampled)
    # candidates j = cur - size_n - 1 down to 1 (position 0 counts as no match, as in
    # llama.cpp), found in one numpy pass over the history instead of a Python loop per step
    starts = np.flatnonzero(arr[1:cur - size_n] == pattern[0]) + 1
    for j in starts[::-1]:
        if np.array_equal(arr[j:j + size_n], pattern):
            n = min(size_m, cur - (j + size_n))
            return [int(t) for t in arr[j + size_n:j + size_n + n]] if n >= size_n else []
    return []


class NgramSimple:
    """--spec-type ngram-simple (common_speculative_impl_ngram_simple): n-gram lookup in the
    sequence's own history; llama.cpp's defaults size_n 12, size_m 48."""

    spec_type = "ngram-simple"

    def __init__(self, size_n: int = 12, size_m: int = 48):
        if not 1 <= size_n <= 1024 or not 1 <= size_m <= 1024:
            raise ValueError("ngram sizes must be between 1 and 1024 inclusive")
        self.size_n, self.size_m, self.n_max = size_n, size_m, size_m

    def draft(self, seq: int, history: list[int], n_max: int) -> list[int]:
        return ngram_simple_draft(history[:-1], history[-1], self.size_n, self.size_m)[:n_max]


class Speculator:
    """The drafters a context uses, in llama.cpp's order of preference (the n-gram types before
    a draft model): the first that proposes anything wins, as in common_speculative_draft."""

    def __init__(self, drafters: list[Drafter], params: SpecParams | None = None):
        self.drafters = drafters
        self.params = params or SpecParams()
        self.stats = SpecStats()

    @property
    def n_max(self) -> int:
        return max(d.n_max for d in self.drafters)

    @property
    def types(self) -> list[str]:
        return [getattr(d, "spec_type", type(d).__name__) for d in self.drafters]

    def begin(self, seq: int, tokens: list[int]) -> None:
        """Sequence `seq` has decoded its prompt `tokens`: drafters with state of their own (a
        draft model's cache, an MTP block's) read it now, as part of the prompt (llama.cpp:
        common_speculative_process with each prompt batch), not at the first draft."""
        for drafter in self.drafters:
            begin = getattr(drafter, "begin", None)
            if begin is not None:
                begin(seq, tokens)

    def draft(self, seq: int, history: list[int], n_room: int, params: SpecParams) -> list[int]:
        """At most min(params.n_max, n_room) tokens, or none when fewer than params.n_min."""
        n_max = n_room if params.n_max is None else min(params.n_max, n_room)
        if n_max <= 0:
            return []
        for drafter in self.drafters:
            if getattr(drafter, "uses_p_min", False):  # a draft model: the request's p_min
                tokens = drafter.draft(seq, history, n_max, p_min=params.p_min)
            else:
                tokens = drafter.draft(seq, history, n_max)
            tokens = [int(t) for t in tokens][:n_max]
            if tokens:
                return tokens if len(tokens) >= max(params.n_min, 1) else []
        return []


def prompt_lookup_draft(input_ids: np.ndarray, max_ngram_size: int,
                        num_pred_tokens: int) -> np.ndarray:
    """llama-cpp-python's LlamaPromptLookupDecoding.find_candidate_pred_tokens: the longest
    n-gram (up to max_ngram_size) ending the input, its first earlier occurrence, and up to
    num_pred_tokens tokens that followed it."""
    n = input_ids.shape[0]
    for size in range(min(max_ngram_size, n - 1), 0, -1):
        windows = np.lib.stride_tricks.sliding_window_view(input_ids, (size,))
        for idx in np.flatnonzero(np.all(windows == input_ids[-size:], axis=1)):
            start, end = idx + size, min(idx + size + num_pred_tokens, n)
            if start < end:
                return input_ids[start:end]
    return np.array([], dtype=np.intc)


class CallableDrafter:
    """A llama-cpp-python draft model (LlamaDraftModel: `__call__(input_ids) -> draft`) as a
    drafter: it sees the sequence's tokens and the sampled one, as in llama_cpp.Llama.generate."""

    def __init__(self, fn, n_max: int = 1 << 16):
        self.fn, self.n_max = fn, n_max

    def draft(self, seq: int, history: list[int], n_max: int) -> list[int]:
        return [int(t) for t in self.fn(np.asarray(history, np.intc))][:n_max]


@dataclass
class SpecConfig:
    """The speculative-decoding flags (common_params_speculative) with llama.cpp's defaults."""

    types: list[str] = field(default_factory=list)  # --spec-type; [] / ["none"]: none
    draft_model: str | None = None  # -md
    n_max: int = 3  # --spec-draft-n-max
    n_min: int = 0  # --spec-draft-n-min
    p_min: float = 0.0  # --spec-draft-p-min
    n_ctx_draft: int = 0  # -cd (0: the target's context size)
    draft_vocab: int = DEFAULT_DRAFT_VOCAB  # --spec-draft-vocab (ours; 0: the whole vocabulary)
    # the draft model's Q5_0 / IQ4_NL weights as Q8_0 (--no-repack: as the file has them): its
    # one-token steps and two-token catch-ups run faster, for ~1.3x its file's memory
    repack_draft: bool = True
    ngram_size_n: int = 12  # --spec-ngram-simple-size-n
    ngram_size_m: int = 48  # --spec-ngram-simple-size-m

    def resolved_types(self) -> list[str]:
        """The types to run: a draft model alone means draft-simple, as llama.cpp infers it."""
        types = [t for t in self.types if t != "none"]
        if not types and self.draft_model:
            types = ["draft-simple"]
        if "draft-simple" in types and not self.draft_model:
            raise ValueError("--spec-type draft-simple needs a draft model (-md FILE)")
        if self.draft_model and "draft-simple" not in types:
            raise ValueError(f"-md is given but --spec-type {','.join(types)} does not use a "
                             f"draft model (add draft-simple)")
        return types
