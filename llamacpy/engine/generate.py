"""Token-by-token generation for one sequence: decode, sample, detokenize, stop.

Shared by the Python API (llamacpy.Llama), llama-cli and (one slot at a time) the server. Stop
strings hold text back while a partial match is pending, as llama.cpp's server does.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..sampling import Sampler, find_stop
from ..tokenizer import StreamingDetokenizer, Tokenizer
from .context import Context
from .prompt import Prompt, rope_position, text_batch


@dataclass
class Step:
    """One generated token and the text it releases (may be empty while a stop is pending)."""

    token: int
    text: str
    logits: np.ndarray  # float32 [n_vocab], before sampling


@dataclass
class GenerationStats:
    n_prompt: int = 0
    n_cached: int = 0  # prompt tokens reused from the cache
    n_generated: int = 0
    t_prompt: float = 0.0  # prompt decoding, without image encoding
    t_image: float = 0.0  # image encoding
    t_generate: float = 0.0
    finish_reason: str = "length"  # "stop" on EOG or a stop string
    text: str = ""
    tokens: list[int] = field(default_factory=list)


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    mismatch = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(mismatch[0]) if len(mismatch) else n


class SequenceState:
    """What the cache holds for one sequence, for prompt-prefix reuse: one entry per cell (token
    ids; image cells hold the image's key) and where images moved the rope position past the
    cell count (`shifts`, M-RoPE models), so generated tokens get their true positions."""

    def __init__(self, ctx: Context, seq: int = 0):
        self.ctx, self.seq = ctx, seq
        self.tokens: list[int] = []
        self.shifts: list[tuple[int, int]] = []  # (cell after an image, positions gained)

    @property
    def n_pos(self) -> int:
        """The rope position of the next token."""
        return rope_position(len(self.tokens), self.shifts)

    def evaluate(self, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Append text `tokens` to the sequence; logits for the last (or every) new token."""
        # the tokens list may have been cut by the caller: forget images no longer held
        self.shifts = [s for s in self.shifts if s[0] <= len(self.tokens)]
        batch = text_batch(tokens, len(self.tokens), self.n_pos, self.seq, all_logits)
        logits = self.ctx.decode(batch)
        self.tokens.extend(int(t) for t in tokens)
        return logits

    def prefill(self, prompt: list[int] | Prompt) -> tuple[np.ndarray, int]:
        """Reuse the cached prefix, evaluate the rest; returns last logits and cells reused.

        At least the last prompt token is always re-evaluated so its logits are fresh; a reused
        prefix never ends inside an image.
        """
        prompt = prompt if isinstance(prompt, Prompt) else Prompt([int(t) for t in prompt])
        keep = prompt.snap(min(common_prefix(self.tokens, prompt.tokens), len(prompt) - 1))
        keep = self.ctx.cache.trim(self.seq, keep)  # a recurrent state may go back further
        logits = self.ctx.decode(prompt.batch(keep, len(prompt), self.seq))
        self.tokens, self.shifts = list(prompt.tokens), prompt.shifts
        return logits[-1], keep


def generate(state: SequenceState, tokenizer: Tokenizer, sampler: Sampler,
             prompt: list[int] | Prompt,
             max_tokens: int, stop: list[str] | None = None, ignore_eos: bool = False,
             stats: GenerationStats | None = None) -> Iterator[Step]:
    """Yield generated tokens with their released text until EOG, a stop string or max_tokens."""
    stats = stats if stats is not None else GenerationStats()
    stop = [s for s in (stop or []) if s]
    t0 = time.perf_counter()
    logits, stats.n_cached = state.prefill(prompt)
    stats.n_prompt, stats.t_prompt = len(prompt), time.perf_counter() - t0
    if isinstance(prompt, Prompt):  # encoding is part of prefill; report it on its own
        stats.t_image = sum(im.t_encode for im in prompt.images)
        stats.t_prompt -= stats.t_image
    detok, pending = StreamingDetokenizer(tokenizer, continuation=True), ""
    t1 = time.perf_counter()
    for i in range(max_tokens):
        token = sampler.sample(logits)
        sampler.accept(token)
        stats.n_generated += 1
        stats.tokens.append(token)
        if tokenizer.is_eog(token) and not ignore_eos:
            stats.finish_reason = "stop"
            break
        pending += detok.feed(token)
        released, hit = release_text(pending, stop)
        pending = pending[len(released):]
        stats.text += released
        yield Step(token, released, logits)
        if hit:
            stats.finish_reason = "stop"
            break
        if i + 1 < max_tokens:
            logits = state.evaluate([token])[-1]
    else:
        stats.finish_reason = "length"
    if stats.finish_reason == "length" or not stop:
        tail = pending + detok.flush()
        if tail:
            stats.text += tail
            yield Step(-1, tail, logits)
    stats.t_generate = time.perf_counter() - t1


def release_text(pending: str, stop: list[str]) -> tuple[str, bool]:
    """The part of `pending` safe to emit, and whether a stop string was hit (cut before it)."""
    if not stop:
        return pending, False
    index, partial = find_stop(pending, stop)
    if index is not None and not partial:
        return pending[:index], True
    if index is not None:  # a stop string may be starting: hold back from there
        return pending[:index], False
    return pending, False
