"""History-based samplers: repetition/frequency/presence penalties and DRY (llama-sampler.cpp)."""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from llamacpy.sampling.candidates import F32, Candidates, logf

DRY_MAX_CHAR_LEN, DRY_MAX_SEQ_LEN = 40, 20  # llama_sampler_init_dry's limits
_FLOAT_MAX_LOG = F32(88.7228391)


class Penalties:
    """llama_sampler_penalties over the last `last_n` accepted tokens."""

    def __init__(
        self, last_n: int = 64, repeat: float = 1.0, freq: float = 0.0, present: float = 0.0
    ) -> None:
        self.last_n = max(last_n, 0)
        self.repeat, self.freq, self.present = F32(repeat), F32(freq), F32(present)
        self.reset()

    @property
    def disabled(self) -> bool:
        return self.last_n == 0 or (self.repeat == 1 and self.freq == 0 and self.present == 0)

    def reset(self) -> None:
        self.prev: deque[int] = deque(maxlen=self.last_n or None)
        self.counts: Counter[int] = Counter()

    def accept(self, token: int) -> None:
        """llama_sampler_penalties_accept: count the token, forget the one falling out."""
        if self.last_n == 0:
            return
        self.counts[token] += 1
        if len(self.prev) >= self.last_n:
            old = self.prev[0]
            self.counts[old] -= 1
            if self.counts[old] == 0:
                del self.counts[old]
        self.prev.append(token)

    def __call__(self, cur: Candidates) -> None:
        """llama_sampler_penalties_apply."""
        if self.disabled:
            return
        if self.counts:
            tokens = np.fromiter(self.counts.keys(), dtype=np.int64, count=len(self.counts))
            counts = np.fromiter(self.counts.values(), dtype=np.int64, count=len(self.counts))
            pos, mask = cur.positions(tokens)
            logit = cur.logits[pos]
            # multiply negative logits so a penalty never makes a token more likely
            logit = np.where(logit <= 0, logit * self.repeat, logit / self.repeat)
            counts = counts[mask].astype(F32)
            cur.logits[pos] = logit - (counts * self.freq + (counts > 0).astype(F32) * self.present)
        cur.sorted = False


def dry_breakers(
    pieces: Sequence[bytes],
    tokenize: Callable[[bytes], Sequence[int]],
    breakers: Iterable[str | bytes],
) -> dict[int, list[tuple[int, ...]]]:
    """Restart sequences as llama_sampler_init_dry builds them: head token -> tails.

    pieces[t] is token t's text as llama's detokenize([t], special=True) gives it; tokenize(text)
    is llama's tokenize(text, add_special=False, parse_special=False).
    """
    out: dict[int, list[tuple[int, ...]]] = {}
    texts = [b.encode() if isinstance(b, str) else bytes(b) for b in breakers]
    texts = [t[:DRY_MAX_CHAR_LEN] for t in texts if t]  # llama.cpp skips empty ones
    if not texts:
        return out
    blob = np.frombuffer(b"".join(pieces), dtype=np.uint8)  # every piece, back to back
    ends = np.cumsum(np.fromiter(map(len, pieces), dtype=np.int64, count=len(pieces)))
    for text in texts:
        # only tokens holding the breaker's first byte can match
        heads = np.unique(np.searchsorted(ends, np.flatnonzero(blob == text[0]), "right"))
        _overlapping_sequences(pieces, tokenize, text, heads.tolist(), out)
    return out


def _overlapping_sequences(pieces, tokenize, text: bytes, heads: list[int], out: dict) -> None:
    """get_overlapping_token_sequences: tokens containing text, or ending with a prefix of it
    (then the rest of text, tokenized, is the tail)."""
    first, tails = text[:1], {}
    for tid in heads:
        word = pieces[tid]
        if text in word:
            _add_tail(out, tid, ())
            continue
        pos = word.find(first)
        while pos != -1:
            if text.startswith(word[pos:]):
                rest = text[len(word) - pos :]
                if rest not in tails:  # at most len(text) different tails
                    tails[rest] = tuple(int(t) for t in tokenize(rest))[:DRY_MAX_SEQ_LEN]
                _add_tail(out, tid, tails[rest])
            pos = word.find(first, pos + 1)


def _add_tail(out: dict, head: int, tail: tuple[int, ...]) -> None:
    tails = out.setdefault(head, [])
    if tail not in tails:
        tails.append(tail)


class Dry:
    """llama_sampler_dry: penalise tokens that would extend a repeat of the recent context."""

    def __init__(
        self,
        multiplier: float = 0.0,
        base: float = 1.75,
        allowed_length: int = 2,
        penalty_last_n: int = 64,
        breakers: dict[int, list[tuple[int, ...]]] | None = None,
    ) -> None:
        self.multiplier, self.base = F32(multiplier), F32(base)
        self.allowed_length = allowed_length
        self.penalty_last_n = max(penalty_last_n, 0)
        self.breakers = breakers or {}
        self.enabled = self.multiplier != 0 and self.base >= 1 and self.penalty_last_n != 0
        self.reset()

    def reset(self) -> None:
        self.last_tokens: deque[int] = deque(maxlen=self.penalty_last_n or None)

    def accept(self, token: int) -> None:
        if self.enabled:
            self.last_tokens.append(token)

    @property
    def idle(self) -> bool:
        """Whether the next call leaves the logits alone (off, or too short a history)."""
        return not self.enabled or len(self.last_tokens) <= self.allowed_length

    def __call__(self, cur: Candidates) -> None:
        """llama_sampler_dry_apply."""
        if self.idle:
            return
        rev = list(reversed(self.last_tokens))  # rev[i] is ring_buffer.rat(i)
        rep_limit = self._rep_limit(rev)
        if rep_limit < self.allowed_length:
            return
        max_repeat = self._max_token_repeat(rev, _repeat_counts(rev, rep_limit))
        self._penalise(cur, max_repeat)
        cur.sorted = False

    def _rep_limit(self, rev: list[int]) -> int:
        """Step 1: the most recent restart sequence caps how far back a repeat may reach."""
        for i, token in enumerate(rev):
            longest = -1
            for tail in self.breakers.get(token, ()):
                n = len(tail)
                if longest < n <= i and all(tail[o] == rev[i - o - 1] for o in range(n)):
                    longest = n
            if longest >= 0:
                return i - longest
        return len(rev)

    def _max_token_repeat(self, rev: list[int], counts: list[int]) -> dict[int, int]:
        """Step 3: for each token that would continue a repeat, the longest such repeat."""
        n, best = len(rev), {}
        for i in range(n - 1):
            length = counts[i]
            if length >= self.allowed_length:
                token = rev[n - 2 - i]
                if best.get(token, -1) < length:
                    best[token] = length
        return best

    def _penalise(self, cur: Candidates, max_repeat: dict[int, int]) -> None:
        """Step 4: multiplier * base^(length - allowed), the exponent clamped against overflow."""
        max_exp = int(_FLOAT_MAX_LOG / logf(self.base)) if self.base > F32(1.000001) else 0
        tokens, penalties = [], []
        for token, length in max_repeat.items():
            if () in self.breakers.get(token, ()):
                continue  # single-token sequence breakers are never penalised
            exp = length - self.allowed_length
            exp = min(exp, max_exp) if max_exp > 0 else exp
            tokens.append(token)
            penalties.append(float(self.multiplier) * float(self.base) ** exp)  # C++ pow: double
        if tokens:
            pos, mask = cur.positions(np.array(tokens))
            cur.logits[pos] -= np.array(penalties, dtype=np.float64)[mask].astype(F32)


def _repeat_counts(rev: list[int], rep_limit: int) -> list[int]:
    """Step 2: the reverse Z-algorithm of llama_sampler_dry_apply, capped at rep_limit
    (capped values feed back into the Z-box, exactly as in llama.cpp)."""
    n = len(rev)
    last, counts, lt, rt = n - 1, [0] * n, 0, 0
    for k in range(1, n):
        if k > rt:
            m = 0
            while m + k < n and rev[m] == rev[m + k]:
                m += 1
            counts[last - k] = min(m, rep_limit)
            if m > 0:
                lt, rt = k, k + m - 1
        elif counts[last - (k - lt)] < rt - k + 1:
            counts[last - k] = min(counts[last - (k - lt)], rep_limit)
        else:
            i = rt + 1
            while i < n and rev[i] == rev[i - k]:
                i += 1
            counts[last - k] = min(i - k, rep_limit)
            lt, rt = k, i - 1
    return counts
