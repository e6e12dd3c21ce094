"""Sampler: common_sampler's chain (logit bias, the configured samplers, then dist or mirostat)."""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from llamacpy.sampling import samplers as S
from llamacpy.sampling.candidates import F32, Candidates, top_indices
from llamacpy.sampling.params import SamplingParams
from llamacpy.sampling.penalties import Dry, Penalties, dry_breakers
from llamacpy.sampling.rng import LLAMA_DEFAULT_SEED
from llamacpy.sampling.stochastic import Dist, Mirostat, MirostatV2, Xtc

Step = Callable[[Candidates], None]


@dataclass(frozen=True)
class TokenProb:
    """One entry of an n_probs report: token id and probability (the caller adds the text)."""

    id: int
    p: float

    @property
    def logprob(self) -> float:
        return math.log(self.p) if self.p > 0 else -math.inf


class Sampler:
    """A token sampler with llama.cpp's semantics, built from SamplingParams.

    Call `prime(prompt)`, then per step `sample(logits)` and `accept(token)`: like llama.cpp's
    server, prompt and generated tokens both enter the penalties/DRY history. DRY needs the
    vocabulary: a llamacpy Tokenizer, or `pieces[t]` (token t's text, as llama's
    detokenize([t], special=True)) with `tokenize(text)` (add_special=False, parse_special=False).
    n_vocab is mirostat v1's (default: the tokenizer's, else the number of logits);
    suppress_tokens (tokenizer.ggml.suppress_tokens) are banned as common_sampler_init does.
    """

    def __init__(
        self,
        params: SamplingParams | None = None,
        tokenizer: Any = None,
        *,
        n_vocab: int | None = None,
        pieces: Sequence[bytes] | None = None,
        tokenize: Callable[[bytes], Sequence[int]] | None = None,
        suppress_tokens: Sequence[int] = (),
    ) -> None:
        self.params = params = params or SamplingParams()
        self.tokenizer = tokenizer
        self.n_vocab = n_vocab or (tokenizer.n_vocab if tokenizer is not None else None)
        self._pieces, self._tokenize = pieces, tokenize
        bias = [(int(t), float(b)) for t, b in params.logit_bias.items()]
        bias += [(int(t), -math.inf) for t in suppress_tokens]
        self.steps: list[Step] = [partial(S.logit_bias, bias=bias)] if bias else []
        self.steps += self._chain_steps()
        self._greedy_steps = self._fast_greedy_steps()
        self.prev: deque[int] = deque(maxlen=max(32, params.n_prev))
        self.cur: Candidates | None = None

    def _chain_steps(self) -> list[Step]:
        """common_sampler_init: mirostat replaces the configured chain after temperature."""
        p = self.params
        if p.mirostat == 1:
            miro = Mirostat(self.n_vocab, p.seed, p.mirostat_tau, p.mirostat_eta, 100)
            return [partial(S.temp, t=p.temperature), miro]
        if p.mirostat == 2:
            return [
                partial(S.temp, t=p.temperature),
                MirostatV2(p.seed, p.mirostat_tau, p.mirostat_eta),
            ]
        return [self._make(name) for name in p.samplers] + [Dist(p.seed)]

    def _make(self, name: str) -> Step:
        """One configured sampler, as llama_sampler_init_* builds it."""
        p, keep = self.params, self.params.min_keep
        if name == "penalties":
            return Penalties(
                p.repeat_last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
            )
        if name == "dry":
            return Dry(
                p.dry_multiplier,
                p.dry_base,
                p.dry_allowed_length,
                p.dry_penalty_last_n,
                self._dry_breakers(),
            )
        if name == "xtc":
            return Xtc(p.xtc_probability, p.xtc_threshold, keep, p.seed)
        simple = {
            "top_k": partial(S.top_k, k=p.top_k),
            "top_p": partial(S.top_p, p=p.top_p, min_keep=keep),
            "min_p": partial(S.min_p, p=p.min_p, min_keep=keep),
            "typ_p": partial(S.typical, p=p.typical_p, min_keep=keep),
            "top_n_sigma": partial(S.top_n_sigma, n=p.top_n_sigma),
            "temperature": partial(
                S.temp_ext, t=p.temperature, delta=p.dynatemp_range, exponent=p.dynatemp_exponent
            ),
        }
        if name not in simple:
            raise NotImplementedError(f"sampler {name!r} is not implemented")
        return simple[name]

    def _dry_breakers(self) -> dict[int, list[tuple[int, ...]]]:
        p = self.params
        if p.dry_multiplier == 0 or p.dry_base < 1 or p.dry_penalty_last_n <= 0:
            return {}
        if self._pieces is not None and self._tokenize is not None:
            return dry_breakers(self._pieces, self._tokenize, p.dry_sequence_breakers)
        if self.tokenizer is not None:
            return _tokenizer_breakers(self.tokenizer, p.dry_sequence_breakers)
        if any(p.dry_sequence_breakers):
            raise ValueError("DRY sequence breakers need the vocabulary: a tokenizer, or pieces")
        return {}

    def _fast_greedy_steps(self) -> list[Step] | None:
        """With temperature <= 0 the chain keeps only the top logit, so argmax after the
        logit-changing steps before it gives the same token; None when that does not hold."""
        p, names = self.params, self.params.samplers
        if p.mirostat or p.temperature > 0 or p.dynatemp_range > 0 or "temperature" not in names:
            return None
        # typical and XTC may drop the top token; infill and adaptive_p are not handled
        if (p.typical_p < 1 and "typ_p" in names) or "infill" in names or "adaptive_p" in names:
            return None
        if p.xtc_probability > 0 and p.xtc_threshold <= 0.5 and "xtc" in names:
            return None
        steps = self.steps[: len(self.steps) - len(names) - 1 + names.index("temperature")]
        return [
            s
            for s in steps
            if isinstance(s, (Penalties, Dry)) or getattr(s, "func", None) is S.logit_bias
        ]

    @property
    def seed(self) -> int:
        """llama_sampler_get_seed(chain): the seed in use by the last seeded sampler."""
        for step in reversed(self.steps):
            rng = getattr(step, "rng", None)
            if rng is not None and not isinstance(step, Xtc):
                return rng.seed_cur
        return LLAMA_DEFAULT_SEED

    def sample(self, logits: np.ndarray) -> int:
        """A token id for one row of logits (n_vocab,); `cur` keeps the final candidates."""
        if self._greedy_steps is not None and all(_inert(s) for s in self._greedy_steps):
            return self._argmax(logits)  # nothing changes the logits: skip the copy
        cur = Candidates.from_logits(logits)
        if self._greedy_steps is None:
            for step in self.steps:
                step(cur)
        else:
            self._sample_greedy(cur)
        assert cur.selected >= 0, "no token selected - check the sampling configuration"
        self.cur = cur
        return int(cur.ids[cur.selected])

    def _sample_greedy(self, cur: Candidates) -> None:
        for step in self._greedy_steps:
            step(cur)
        cur.take(np.array([int(np.argmax(cur.logits))]))
        cur.probs, cur.selected = np.ones(1, dtype=F32), 0
        self.steps[-1].rng.uniform_double()  # dist draws once per token in llama.cpp too

    def _argmax(self, logits: np.ndarray) -> int:
        """`_sample_greedy` when its steps change nothing: the top logit, read in place."""
        logits = np.asarray(logits).reshape(-1)
        top = int(np.argmax(logits))
        self.cur = Candidates(np.array([top], np.int32), logits[top : top + 1].astype(F32),
                              np.ones(1, dtype=F32), selected=0)
        self.steps[-1].rng.uniform_double()
        return top

    def prime(self, tokens: Iterable[int]) -> None:
        """Accept the prompt's tokens (the server's common_sampler_accept(..., false) loop)."""
        for token in tokens:
            self.accept(token)

    def accept(self, token: int) -> None:
        """common_sampler_accept: the token enters every sampler's history."""
        for step in self.steps:
            if hasattr(step, "accept"):
                step.accept(int(token))
        self.prev.append(int(token))

    def reset(self) -> None:
        """common_sampler_reset: clear histories, mirostat's mu, and re-seed the RNGs."""
        for step in self.steps:
            if hasattr(step, "reset"):
                step.reset()
        self.prev.clear()

    def probs(self, n: int | None = None) -> list[TokenProb]:
        """The post-sampling candidates by probability (the server's post_sampling_probs):
        at most n of them, stopping at the first zero probability."""
        cur = self.cur
        if cur is None or cur.probs is None:
            return []
        n = len(cur) if n is None else min(n, len(cur))
        top = top_indices(cur.probs, n)
        top = top[: _first_zero(cur.probs[top])]
        return [TokenProb(int(cur.ids[i]), float(cur.probs[i])) for i in top]

    def token_prob(self) -> float:
        """The post-sampling probability of the token just sampled."""
        cur = self.cur
        return float(cur.probs[cur.selected]) if cur is not None and cur.probs is not None else 1.0


def pre_sampling_probs(
    logits: np.ndarray, n: int, token: int | None = None
) -> tuple[float, list[TokenProb]]:
    """get_token_probabilities (tools/server): softmax of the raw logits, the n most likely,
    and the sampled token's probability — what the server's n_probs reports by default.

    llama.cpp sums after a partial sort, in an order it leaves unspecified, so this takes
    numpy's fast exp and pairwise sum: equal to float32 rounding, not bit for bit."""
    logits = np.asarray(logits, dtype=F32).reshape(-1)
    p = np.exp(logits - logits.max())
    p /= p.sum(dtype=F32)
    top = top_indices(logits, min(n, len(logits)))
    chosen = float(p[token]) if token is not None else math.nan
    return chosen, [TokenProb(int(i), float(p[i])) for i in top]


# tokenizer -> {"pieces": [...], "tables": {breakers tuple: table}}; llama.cpp rescans per
# request. The tables are bounded (least recently used go first): each request may send its own.
_DRY_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
DRY_TABLES_KEPT = 16


def _tokenizer_breakers(tokenizer: Any, breakers: Sequence[str]) -> dict:
    """dry_breakers for a llamacpy Tokenizer, cached per tokenizer and breaker list."""
    cache = _DRY_TABLES.setdefault(tokenizer, {"tables": OrderedDict()})
    tables, key = cache["tables"], tuple(breakers)
    if key in tables:
        tables.move_to_end(key)
        return tables[key]
    if "pieces" not in cache:
        n = tokenizer.n_vocab
        cache["pieces"] = [tokenizer.detokenize([t], False, True) for t in range(n)]
    tables[key] = dry_breakers(
        cache["pieces"], lambda text: tokenizer.tokenize(text, False, False), breakers
    )
    while len(tables) > DRY_TABLES_KEPT:
        tables.popitem(last=False)
    return tables[key]


def _first_zero(p: np.ndarray) -> int:
    zero = p == 0
    return int(np.argmax(zero)) if zero.any() else len(p)


def _inert(step: Step) -> bool:
    """Whether a step before greedy selection leaves the logits as they are this time."""
    if isinstance(step, Penalties):
        return step.disabled
    if isinstance(step, Dry):
        return step.idle
    return False  # logit bias
