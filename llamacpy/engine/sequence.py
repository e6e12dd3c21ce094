"""One sequence's generation as a state machine the scheduler steps (llama.cpp: a server_slot
with its task): prompt prefill with prefix reuse, sampling with an optional token mask, stop
strings with held-back text, end of generation, the thinking budget, n_probs, timings and the
finish reason. It is the only place a generated token becomes text.

A Sequence tells its caller what happens through `emit(event)`, one dict per event:
  {"type": "token", "token", "text", "probs"[, "logits"][, "timings"]}: text is "" while a stop
      string may be starting; "logits" (float32 [n_vocab], before sampling) only with
      Request.return_logits, "timings" only with Request.timings_per_token
  {"type": "done", "text" (the tail held back until now), "stop_type" ("eos", "word", "limit"),
      "stopping_word", "probs", "id_slot", "timings", "n_prompt", "n_cached", "n_decoded",
      "truncated" (the context was shifted)}
  {"type": "error", "message", "kind"}: the sequence failed; its request alone fails
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..sampling import Sampler, SamplingParams, find_stop
from ..sampling.sampler import pre_sampling_probs
from ..tokenizer import StreamingDetokenizer, Tokenizer
from .context import Context
from ..memory.kv_shift import remove_cells
from .prompt import Prompt, rope_position, text_batch
from .speculative import SpecParams, SpecStats, Speculator

Emit = Callable[[dict], None]


class TokenMask(Protocol):
    """A constraint on the next token, such as a grammar: the tokens that may come next, told
    of every token taken; finished once nothing more may follow."""

    def allowed(self) -> np.ndarray | None:  # bool [n_vocab]; None: any token
        ...

    def accept(self, token: int) -> None: ...

    def is_finished(self) -> bool: ...


@dataclass
class Request:
    """What one generation asks for, once its prompt is tokenized."""

    prompt: Prompt  # one entry per KV cell: text tokens and images
    params: SamplingParams = field(default_factory=SamplingParams)
    n_predict: int = -1  # -1: until end of generation or a full context
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    n_probs: int = 0
    post_sampling_probs: bool = False
    id_slot: int = -1  # -1: the scheduler chooses
    cache_prompt: bool = True
    reasoning_budget: int = -1  # thinking tokens before the end of thinking is forced; -1: none
    think_end_tokens: list[int] = field(default_factory=list)
    starts_in_thinking: bool = False
    token_mask: TokenMask | None = None
    return_logits: bool = False
    timings_per_token: bool = False  # token events carry the timings so far
    speculative: SpecParams | None = None  # draft limits; None: the speculator's own
    n_keep: int = 0  # context shift keeps this many prompt tokens (after BOS); -1: the prompt


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    mismatch = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(mismatch[0]) if len(mismatch) else n


def release_text(pending: str, stop: list[str]) -> tuple[str, bool]:
    """The part of `pending` safe to emit, and whether a stop string was hit (cut before it)."""
    if not stop:
        return pending, False
    index, partial = find_stop(pending, stop)
    if index is not None:  # a full match ends here; a partial one may be starting: hold it
        return pending[:index], not partial
    return pending, False


class Slot:
    """One sequence of a context's KV cache and what its cells hold: one entry per cell (token
    ids; image cells hold the image's key) and where images moved the rope position past the
    cell count (`shifts`, M-RoPE models), so generated tokens get their true positions."""

    def __init__(self, ctx: Context, id: int = 0):
        self.ctx, self.id = ctx, id
        self.tokens: list[int] = []
        self.shifts: list[tuple[int, int]] = []  # (cell after an image, positions gained)
        self.seq: Sequence | None = None  # the generation running here
        self.last_used = 0.0

    @property
    def busy(self) -> bool:
        return self.seq is not None

    @property
    def n_pos(self) -> int:
        """The rope position of the next token."""
        return rope_position(len(self.tokens), self.shifts)

    def reuse(self, prompt: Prompt, cache_prompt: bool = True, n_cache_reuse: int = 0) -> int:
        """Keep the cached prefix `prompt` shares (never part of an image, never its last
        token, whose logits must be fresh) and forget the rest; returns the cells kept. With
        n_cache_reuse > 0, cached chunks of at least that many tokens that the prompt holds
        after the prefix are moved into place too (--cache-reuse)."""
        keep = common_prefix(self.tokens, prompt.tokens) if cache_prompt else 0
        if cache_prompt and n_cache_reuse > 0 and not prompt.images:
            keep = self.reuse_chunks(prompt.tokens[:-1], keep, n_cache_reuse)
        keep = prompt.snap(min(keep, len(prompt) - 1))
        keep = self.ctx.cache.trim(self.id, keep)  # a recurrent state may go back further
        self.tokens, self.shifts = self.tokens[:keep], prompt.shifts
        return keep

    def evaluate(self, tokens: list[int], all_logits: bool = False) -> np.ndarray:
        """Append text `tokens`; logits for the last (or every) new token."""
        self.shifts = [s for s in self.shifts if s[0] <= len(self.tokens)]
        logits = self.ctx.decode(text_batch(tokens, len(self.tokens), self.n_pos, self.id,
                                            all_logits))
        self.tokens.extend(int(t) for t in tokens)
        return logits

    def prefill(self, prompt: list[int] | Prompt) -> tuple[np.ndarray, int]:
        """Reuse the cached prefix and decode the rest at once; last logits and cells reused."""
        prompt = prompt if isinstance(prompt, Prompt) else Prompt([int(t) for t in prompt])
        keep = self.reuse(prompt)
        logits = self.ctx.decode(prompt.batch(keep, len(prompt), self.id))
        self.tokens = list(prompt.tokens)
        return logits[-1], keep

    def forget(self) -> None:
        self.tokens, self.shifts = [], []
        self.ctx.cache.clear(self.id)

    def reuse_chunks(self, tokens: list[int], n_past: int, n_min: int) -> int:
        """llama.cpp's cache reuse (server_context, n_cache_reuse): past the common prefix, each
        cached run of >= n_min tokens that matches the prompt where it has got to is shifted
        down into place, the cells before it dropped; returns the prompt tokens now cached."""
        head = n_past  # cells [0, head) hold tokens[:head]; self.tokens[head:] is still to match
        pos = head
        while pos < len(self.tokens) and head < len(tokens):
            n = common_prefix(self.tokens[pos:], tokens[head:])
            if n >= n_min:
                self.remove(head, pos)
                head = pos = head + n
            else:
                pos += 1
        return head

    def remove(self, p0: int, p1: int) -> None:
        """Forget cells [p0, p1) and move the later ones down (llama.cpp's seq_rm + seq_add:
        their keys are re-rotated to their new positions)."""
        remove_cells(self.ctx.cache, self.id, p0, p1, self.ctx.model.kv_rope)
        del self.tokens[p0:p1]


class Sequence:
    """One request's generation on a slot: `start`, then per step `rows` -> decode ->
    `decoded` (and `advance` with the logits of its last row) until `finished`."""

    def __init__(self, request: Request, tokenizer: Tokenizer, emit: Emit, n_ctx: int,
                 id: int = 0, speculator: Speculator | None = None, context_shift: bool = False,
                 n_cache_reuse: int = 0):
        self.request, self.tokenizer, self.emit, self.n_ctx, self.id = \
            request, tokenizer, emit, n_ctx, id
        self.speculator = speculator
        self.context_shift = context_shift  # a full context drops old tokens instead of ending
        self.n_cache_reuse = n_cache_reuse  # --cache-reuse: least chunk moved into place
        self.truncated = False  # the context was shifted (llama.cpp's slot.truncated)
        self.draft: list[int] = []  # guesses decoded after next_token, being verified
        self.spec = SpecStats()
        self.sampler = Sampler(request.params, tokenizer)  # a bad sampler fails here, unqueued
        self.slot: Slot | None = None
        self.cancelled = self.finished = False
        self.stop_type = ""  # "eos", "word", "limit" once finished normally
        self.n_prompt_done = self.n_cached = self.n_decoded = 0
        self.next_token = -1  # sampled, not yet decoded
        self.forced: deque[int] = deque()  # tokens to take instead of sampling
        self.n_thinking, self.thinking = 0, request.starts_in_thinking
        self.detok = StreamingDetokenizer(tokenizer, continuation=True)
        self.pending = ""  # text held back for a possible stop string
        self.t_prompt = self.t_gen = 0.0

    @property
    def prompt(self) -> Prompt:
        return self.request.prompt

    @property
    def generating(self) -> bool:
        return self.next_token >= 0

    # -- the scheduler's calls ----------------------------------------------------------------

    def start(self, slot: Slot) -> None:
        """Take `slot`, reusing the prefix its cells share with the prompt."""
        self.slot = slot
        slot.seq, slot.last_used = self, time.monotonic()
        self.n_prompt_done = self.n_cached = slot.reuse(self.prompt, self.request.cache_prompt,
                                                        self.n_cache_reuse)
        self.sampler.prime(self.prompt.text_tokens)  # image cells are not tokens

    def rows(self, budget: int):
        """(batch, cells it fills, rows of logits it returns) for this step: the token sampled
        last and any draft after it (a logits row each), or the next prompt chunk of at most
        `budget` rows (images are encoded on first use; a non-causal image is never cut, so it
        may overrun the budget)."""
        slot = self.slot
        if self.generating:
            n = len(slot.tokens)
            self.draft = self._make_draft(budget - 1)
            if self.draft:
                slot.ctx.cache.expect_rollback(slot.id)
            cells = [self.next_token] + self.draft
            batch = text_batch(cells, n, rope_position(n, slot.shifts), slot.id,
                               all_logits=True)
            return batch, cells, len(cells)
        prompt, done = self.prompt, self.n_prompt_done
        stop = prompt.chunk_end(done, min(len(prompt), done + budget))
        last = stop == len(prompt)
        return (prompt.batch(done, stop, slot.id, last_logits=last), prompt.tokens[done:stop],
                int(last))

    def decoded(self, cells: list[int], seconds: float) -> None:
        self.slot.tokens.extend(cells)
        if self.generating:
            self.t_gen += seconds
        else:
            self.t_prompt += seconds
            self.n_prompt_done += len(cells)
            if self.speculator is not None and self.n_prompt_done == len(self.prompt):
                t0 = time.perf_counter()  # the drafter's pass over the prompt is prompt time
                self.speculator.begin(self.slot.id, self.slot.tokens)
                self.t_prompt += time.perf_counter() - t0

    def verify(self, logits: np.ndarray) -> None:
        """`advance` row by row (logits [1 + len(draft), n_vocab]) while the sampled token equals
        the draft's next guess, then trim the cells of the guesses not taken (llama.cpp:
        common_sampler_sample_and_accept_n, then llama_memory_seq_rm)."""
        draft, self.draft = self.draft, []
        stats = [self.spec, self.speculator.stats] if draft else []
        for s in stats:  # before advance: a "done" event carries them
            s.drafted(len(draft))
        n_ok = 0
        for i, row in enumerate(logits):
            self.advance(row)
            if self.finished or i == len(draft) or self.next_token != draft[i]:
                break
            n_ok += 1
            for s in stats:
                s.accepted(i)
        if not draft:
            return
        keep = len(self.slot.tokens) - (len(draft) - n_ok)
        del self.slot.tokens[keep:]
        if self.slot.ctx.cache.trim(self.slot.id, keep) != keep:
            raise RuntimeError(f"the cache could not roll back to {keep} cells")

    def advance(self, logits: np.ndarray) -> None:
        """Sample (or take a forced token), emit its text, and decide whether to go on."""
        req = self.request
        # a grammar constrains the answer, not the thinking before it
        constrained = req.token_mask is not None and not self.thinking and not self.forced
        token = self._choose(logits, constrained)
        self.sampler.accept(token)
        if constrained:
            req.token_mask.accept(token)
        self.n_decoded += 1
        probs = self._probs(logits, token) if req.n_probs or req.post_sampling_probs else None
        if self.tokenizer.is_eog(token) and not req.ignore_eos:
            return self.finish("eos", probs)
        self._track_thinking(token)
        self.pending += self.detok.feed(token)
        released, hit = release_text(self.pending, req.stop)
        self.pending = self.pending[len(released):]
        event = {"type": "token", "token": token, "text": released, "probs": probs}
        if req.return_logits:
            event["logits"] = logits
        if req.timings_per_token:
            event["timings"] = self.timings()
        self.emit(event)
        if hit:
            word = next((s for s in req.stop if s in self.pending), "")
            return self.finish("word", stopping_word=word)
        if constrained and req.token_mask.is_finished():  # the grammar allows nothing more
            return self.finish("eos")
        if 0 <= req.n_predict <= self.n_decoded:
            return self.finish("limit")
        if len(self.slot.tokens) + 1 >= self.n_ctx:
            if not self.context_shift:
                return self.finish("limit")
            self.shift_context()
        self.next_token = token

    def shift_context(self) -> None:
        """The context is full: keep n_keep tokens (and BOS), drop half of the rest, go on
        (llama.cpp's server_context::pre_decode context shift)."""
        req, n = self.request, len(self.slot.tokens)
        n_keep = len(self.prompt) if req.n_keep < 0 else req.n_keep
        n_keep = min(self.n_ctx - 4, n_keep + int(self.tokenizer.add_bos))
        n_left = n - n_keep
        n_discard = min(max(n_left // 2, 0), max(0, n_left - 1))
        self.slot.remove(n_keep, n_keep + n_discard)
        self.truncated = True

    def finish(self, stop_type: str, probs: dict | None = None, stopping_word: str = "") -> None:
        tail = "" if stop_type == "word" else self.pending + self.detok.flush()
        self.finished, self.stop_type, self.next_token = True, stop_type, -1
        self.emit({"type": "done", "text": tail, "stop_type": stop_type, "probs": probs,
                   "stopping_word": stopping_word, "id_slot": self.slot.id,
                   "timings": self.timings(), "n_prompt": len(self.prompt),
                   "truncated": self.truncated,
                   "n_cached": self.n_cached, "n_decoded": self.n_decoded})

    def fail(self, message: str, kind: str = "server_error") -> None:
        if not self.finished:
            self.finished, self.next_token = True, -1
            self.emit({"type": "error", "message": message, "kind": kind})

    # -- pieces -------------------------------------------------------------------------------

    def _make_draft(self, n_budget: int) -> list[int]:
        """The speculator's guesses after next_token, within the batch budget, the context
        (llama.cpp leaves 2 cells) and the tokens still to predict (get_n_draft_max)."""
        if self.speculator is None or self.forced:
            return []
        n_room = min(n_budget, self.n_ctx - len(self.slot.tokens) - 2)
        if self.request.n_predict >= 0:
            n_room = min(n_room, self.request.n_predict - self.n_decoded - 1)
        history = self.slot.tokens + [self.next_token]
        params = self.request.speculative or self.speculator.params
        t0 = time.perf_counter()
        draft = self.speculator.draft(self.slot.id, history, n_room, params)
        self.t_gen += time.perf_counter() - t0  # drafting is generation time (predicted_ms)
        return draft

    def _choose(self, logits: np.ndarray, constrained: bool) -> int:
        if self.forced:
            return self.forced.popleft()
        allowed = self.request.token_mask.allowed() if constrained else None
        if allowed is not None:
            n = min(len(allowed), len(logits))  # rows past the tokenizer's vocabulary: never
            masked = np.full(len(logits), -np.inf, dtype=np.float32)
            masked[:n] = np.where(allowed[:n], logits[:n], -np.inf)
            logits = masked
        return self.sampler.sample(logits)

    def _track_thinking(self, token: int) -> None:
        """Count thinking tokens; past the budget, force the end-of-thinking tokens."""
        req = self.request
        piece = self.tokenizer.token_to_piece(token, special=True)
        if b"<think>" in piece:
            self.thinking = True
        elif b"</think>" in piece:
            self.thinking = False
        elif self.thinking:
            self.n_thinking += 1
            if 0 <= req.reasoning_budget <= self.n_thinking and not self.forced:
                self.forced.extend(req.think_end_tokens)
                self.thinking = False

    def _probs(self, logits: np.ndarray, token: int) -> dict:
        n = self.request.n_probs
        if self.request.post_sampling_probs:
            top = self.sampler.probs(n)
            return {"p": self.sampler.token_prob(), "top": [(t.id, t.p) for t in top]}
        p, top = pre_sampling_probs(logits, n, token)
        return {"p": p, "top": [(t.id, t.p) for t in top]}

    @property
    def t_image(self) -> float:
        """Seconds spent encoding this prompt's images (not part of t_prompt)."""
        return sum(im.t_encode for im in self.prompt.images)

    def timings(self) -> dict:
        """llama.cpp's timings object; image_ms (llamacpy's own) is the images' encoding."""
        n_prompt = self.n_prompt_done - self.n_cached
        tp, tg = self.t_prompt * 1000, self.t_gen * 1000
        n_gen = max(self.n_decoded - 1, 0)  # the first token came from the prompt's logits
        out = {"cache_n": self.n_cached, "prompt_n": n_prompt, "prompt_ms": tp,
                "image_ms": self.t_image * 1000,
                "prompt_per_token_ms": tp / n_prompt if n_prompt else 0.0,
                "prompt_per_second": n_prompt * 1000 / tp if tp else 0.0,
                "predicted_n": self.n_decoded, "predicted_ms": tg,
                "predicted_per_token_ms": tg / n_gen if n_gen else 0.0,
                "predicted_per_second": n_gen * 1000 / tg if tg else 0.0}
        if self.spec.n_draft:  # as llama.cpp's server, only when something was drafted
            out["draft_n"], out["draft_n_accepted"] = self.spec.n_draft, self.spec.n_accepted
        return out
