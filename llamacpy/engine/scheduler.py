"""The scheduler: slots, a waiting queue, and one batched decode per step over every running
sequence (llama.cpp: server_context::update_slots). llama-server, `Llama` and llama-cli all
generate through it.

Each step takes one token from every generating sequence and prompt chunks from sequences still
reading their prompt, decodes them together (the weights are read once for all of them), then
lets each sequence sample its next token. Requests wait in a bounded queue until a slot is free;
a request waiting for a busy slot never holds back the ones behind it. A cancelled sequence
frees its slot at the next step. A failure in one sequence fails only that sequence.

Two ways to drive it: `run()` in an engine thread (the server: `submit` from any thread), or
`generate(request)` in the caller's thread (the Python API and llama-cli).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..memory.batch import concat
from ..memory.kv_shift import can_shift, shift_refusal
from ..tokenizer import Tokenizer
from .context import Context
from .prompt_cache import PromptCache
from .sequence import Emit, Request, Sequence, Slot, common_prefix
from .speculative import Speculator


class EngineError(Exception):
    """A request the scheduler refuses; `kind` is llama.cpp's error type."""

    def __init__(self, message: str, kind: str = "invalid_request_error", **extra):
        super().__init__(message)
        self.kind, self.extra = kind, extra


@dataclass
class Metrics:
    """Counters behind the server's /metrics (llama.cpp's server_metrics)."""

    t_start: float = field(default_factory=time.time)
    n_prompt_tokens: int = 0
    n_prompt_cached: int = 0
    t_prompt: float = 0.0
    n_predicted: int = 0
    t_predicted: float = 0.0
    n_decode: int = 0
    n_busy_slots: int = 0
    n_tokens_max: int = 0
    bucket_prompt: list[float] = field(default_factory=lambda: [0, 0.0])  # tokens, seconds
    bucket_predict: list[float] = field(default_factory=lambda: [0, 0.0])

    def record(self, seq: Sequence) -> None:
        n_new = len(seq.prompt) - seq.n_cached
        self.n_prompt_tokens += n_new
        self.t_prompt += seq.t_prompt
        self.n_predicted += seq.n_decoded
        self.t_predicted += seq.t_gen
        self.n_tokens_max = max(self.n_tokens_max, len(seq.prompt) + seq.n_decoded)
        self.bucket_prompt[0] += n_new
        self.bucket_prompt[1] += seq.t_prompt
        self.bucket_predict[0] += seq.n_decoded
        self.bucket_predict[1] += seq.t_gen


class Scheduler:
    """Owns a Context with one slot per KV-cache sequence; with a speculator, generating
    sequences verify drafts in the same batched step."""

    def __init__(self, ctx: Context, tokenizer: Tokenizer, n_batch: int = 2048,
                 max_queue: int = 256, speculator: Speculator | None = None,
                 context_shift: bool = False, n_cache_reuse: int = 0, cache_ram_mib: int = 0):
        for name, asked in (("--context-shift", context_shift), ("--cache-reuse", n_cache_reuse)):
            if asked and not can_shift(ctx.cache):
                raise ValueError(f"{name} is not supported with this model and cache: "
                                 f"{shift_refusal(ctx.cache)}")
        self.ctx, self.tokenizer, self.speculator = ctx, tokenizer, speculator
        self.context_shift, self.n_cache_reuse = context_shift, n_cache_reuse
        # --cache-ram: idle slots' prompts kept in host RAM (0: off, -1: no limit)
        self.prompt_cache = PromptCache(cache_ram_mib) if cache_ram_mib else None
        self.n_batch, self.max_queue = n_batch, max_queue
        self.slots = [Slot(ctx, i) for i in range(ctx.n_seq)]
        self.waiting: deque[Sequence] = deque()
        self.cond = threading.Condition()
        self.metrics = Metrics()
        self.ids = itertools.count(1)
        self.stopping = False
        self.failure: str | None = None  # why run() stopped, if it died

    @property
    def n_ctx_slot(self) -> int:
        return self.ctx.n_ctx_seq

    @property
    def n_deferred(self) -> int:
        return len(self.waiting)

    # -- any thread ---------------------------------------------------------------------------

    def submit(self, request: Request, emit: Emit) -> Sequence:
        """Check and queue a request; EngineError says why one is refused."""
        self.check(request)
        try:
            seq = Sequence(request, self.tokenizer, emit, self.n_ctx_slot,
                           speculator=self.speculator, context_shift=self.context_shift,
                           n_cache_reuse=self.n_cache_reuse)
        except (ValueError, NotImplementedError) as e:  # the sampler refused its settings
            raise EngineError(str(e)) from None
        with self.cond:
            if self.failure is not None:
                raise EngineError(f"the engine has stopped: {self.failure}", "unavailable_error")
            if len(self.waiting) >= self.max_queue:
                raise EngineError("the server is busy: too many requests are waiting",
                                  "unavailable_error")
            seq.id = next(self.ids)
            self.waiting.append(seq)
            self.cond.notify()
        return seq

    def check(self, request: Request) -> None:
        n = len(request.prompt)
        if n == 0:
            raise EngineError("the prompt is empty")
        if n >= self.n_ctx_slot:
            raise EngineError(
                f"request ({n} tokens) exceeds the available context size "
                f"({self.n_ctx_slot} tokens), try increasing it", "exceed_context_size_error",
                n_prompt_tokens=n, n_ctx=self.n_ctx_slot)
        if not -1 <= request.id_slot < len(self.slots):
            raise EngineError(f"id_slot {request.id_slot} is out of range: this server has "
                              f"{len(self.slots)} slot(s)")
        n_vocab = self.tokenizer.n_vocab
        if any(t >= n_vocab for t in request.prompt.tokens):
            raise EngineError(f"the prompt holds a token id outside the vocabulary (0..{n_vocab - 1})")

    def cancel(self, seq: Sequence) -> None:
        seq.cancelled = True
        with self.cond:
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()

    # -- the engine thread --------------------------------------------------------------------

    def run(self) -> None:
        """Step until stop(); if anything escapes, fail every request and record why."""
        try:
            while True:
                with self.cond:
                    while not (self.stopping or self.waiting or any(s.busy for s in self.slots)):
                        self.cond.wait()
                    if self.stopping:
                        return
                self.step()
        except BaseException as e:
            self.failure = f"{type(e).__name__}: {e}"
            self._fail_all(f"the engine has stopped: {self.failure}")
            raise

    def _fail_all(self, message: str) -> None:
        with self.cond:
            pending = list(self.waiting) + [s.seq for s in self.slots if s.busy]
            self.waiting.clear()
        for seq in pending:
            _quietly(seq.fail, message, "unavailable_error")

    def step(self) -> bool:
        """Admit waiting requests, then one batched decode over every busy slot, sampling and
        events; False when there was nothing to do."""
        self._reap()
        self._admit()
        batch, parts = self._build_batch()
        if batch is None:
            return False
        t0 = time.perf_counter()
        try:
            logits = self.ctx.decode(batch)
        except Exception as e:  # noqa: BLE001 - a bad step fails its sequences, not the server
            for seq, _, _ in parts:
                self._fail(seq, f"decode failed: {type(e).__name__}: {e}")
            return True
        dt = time.perf_counter() - t0
        self.metrics.n_decode += 1
        self.metrics.n_busy_slots += len(parts)
        row = 0
        for seq, cells, n_logits in parts:
            # a finished prompt is read by the drafters here: a failure there is this request's
            self._guarded(seq, seq.decoded, cells, dt)
            if n_logits and not seq.finished:
                self._guarded(seq, seq.verify, logits[row:row + n_logits])
            row += n_logits
            if seq.finished and seq.slot.seq is seq:  # not yet released by _fail
                self._release(seq.slot)
        return True

    def _reap(self) -> None:
        for slot in self.slots:
            if slot.busy and slot.seq.cancelled:
                self._release(slot)

    def _admit(self) -> None:
        """Start every waiting request that has a slot, in order (no head-of-line blocking:
        one waiting for a busy slot lets the others by)."""
        with self.cond:
            for seq in list(self.waiting):
                slot = None if seq.cancelled else self._pick_slot(seq)
                if seq.cancelled or slot is not None:
                    self.waiting.remove(seq)
                if slot is not None:
                    self._guarded(seq, self._start, seq, slot)
                    if seq.finished:
                        self._release(slot)
                    else:
                        self.metrics.n_prompt_cached += seq.n_cached

    def _start(self, seq: Sequence, slot: Slot) -> None:
        """Start `seq` on `slot`, first swapping prompts with the RAM cache (--cache-ram)."""
        if self.prompt_cache is not None and seq.request.cache_prompt:
            self.prompt_cache.swap(slot, seq.prompt.tokens)
        seq.start(slot)

    def _pick_slot(self, seq: Sequence) -> Slot | None:
        """The requested slot, else the idle slot sharing the longest prompt prefix (llama.cpp's
        slot similarity), else the least recently used idle slot."""
        idle = [s for s in self.slots if not s.busy]
        if seq.request.id_slot >= 0:
            return next((s for s in idle if s.id == seq.request.id_slot), None)
        if not idle:
            return None
        cells = seq.prompt.tokens
        best = max(idle, key=lambda s: (common_prefix(s.tokens, cells), -s.last_used))
        if common_prefix(best.tokens, cells) > 0:
            return best
        return min(idle, key=lambda s: s.last_used)

    def _build_batch(self):
        """Generating sequences first (one row each), then prompt chunks within n_batch rows;
        parts: (sequence, the cells its rows fill, whether its last row gives logits)."""
        busy = [s.seq for s in self.slots if s.busy]
        order = [q for q in busy if q.generating] + [q for q in busy if not q.generating]
        batches, parts, budget = [], [], self.n_batch
        for seq in order:
            if budget <= 0:
                break
            try:
                batch, cells, last = seq.rows(budget)
            except Exception as e:  # noqa: BLE001 - e.g. an image that fails to encode
                self._fail(seq, f"failed to prepare the prompt: {type(e).__name__}: {e}")
                continue
            batches.append(batch)
            parts.append((seq, cells, last))
            budget -= len(cells)
        return (concat(batches) if batches else None), parts

    def _guarded(self, seq: Sequence, fn, *args) -> None:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - one sequence's failure is its request's alone
            self._fail(seq, f"{type(e).__name__}: {e}")

    def _fail(self, seq: Sequence, message: str) -> None:
        _quietly(seq.fail, message)
        if seq.slot is not None:
            seq.slot.forget()  # what its cells hold is no longer known
            self._release(seq.slot)

    def _release(self, slot: Slot) -> None:
        seq = slot.seq
        if seq is not None and seq.stop_type:
            self.metrics.record(seq)
        slot.seq, slot.last_used = None, time.monotonic()
        # the last sampled token was never decoded: the cache holds exactly slot.tokens
        self.ctx.cache.trim(slot.id, len(slot.tokens))

    # -- the caller's thread ------------------------------------------------------------------

    def generate(self, request: Request) -> Iterator[dict]:
        """Run one request to its end in this thread, yielding its events; closing the
        iterator early cancels it. Do not mix with a running `run()` thread."""
        events: deque[dict] = deque()
        seq = self.submit(request, events.append)
        try:
            while True:
                while events:
                    event = events.popleft()
                    yield event
                    if event["type"] in ("done", "error"):
                        return
                if not self.step() and seq.slot is None and not seq.finished:
                    raise RuntimeError("the request could not be scheduled")
        finally:
            if not seq.finished:
                seq.cancelled = True
                self._reap()
                with self.cond:
                    if seq in self.waiting:
                        self.waiting.remove(seq)

    def slots_info(self) -> list[dict]:
        return [{"id": s.id, "id_task": s.seq.id if s.seq else -1, "n_ctx": self.n_ctx_slot,
                 "is_processing": s.busy, "n_cached_tokens": len(s.tokens),
                 "next_token": {"n_decoded": s.seq.n_decoded if s.seq else 0}}
                for s in self.slots]


def _quietly(fn, *args) -> None:
    """Tell a sequence's caller something, even if its emit callback itself fails."""
    try:
        fn(*args)
    except Exception:  # noqa: BLE001
        pass
