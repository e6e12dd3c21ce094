"""The server's engine: one thread owns the model and runs every slot in one batched decode per
step (llama.cpp: server_context::update_slots).

Each step takes one token from every generating slot and prompt chunks from slots still reading
their prompt, decodes them together (the weights are read once for all slots), then samples each
slot's next token with its own sampler. Requests wait in a bounded queue until a slot is free and
join between steps; a cancelled request (client gone) frees its slot at the next step.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..memory.batch import Batch, concat
from ..engine.context import Context
from ..engine.generate import common_prefix, release_text
from ..engine.prompt import Prompt, rope_position, text_batch
from ..sampling import Sampler, SamplingParams
from ..sampling.sampler import pre_sampling_probs
from ..tokenizer import StreamingDetokenizer, Tokenizer


class EngineError(Exception):
    """A request the engine refuses; `kind` is llama.cpp's error type."""

    def __init__(self, message: str, kind: str = "invalid_request_error", **extra):
        super().__init__(message)
        self.kind, self.extra = kind, extra


@dataclass
class Task:
    """One completion request as the engine sees it."""

    prompt: Prompt  # one entry per KV cell: text tokens and images
    params: SamplingParams
    n_predict: int = -1
    stop: list[str] = field(default_factory=list)
    ignore_eos: bool = False
    n_probs: int = 0
    post_sampling_probs: bool = False
    id_slot: int = -1
    cache_prompt: bool = True
    reasoning_budget: int = -1  # thinking tokens before the end of thinking is forced; -1: none
    think_end_tokens: list[int] = field(default_factory=list)
    starts_in_thinking: bool = False
    emit: Callable[[dict], None] = print  # called from the engine thread with each event
    id: int = 0
    cancelled: bool = False


@dataclass
class Slot:
    id: int
    task: Task | None = None
    tokens: list[int] = field(default_factory=list)  # what this slot's KV cells hold
    shifts: list[tuple[int, int]] = field(default_factory=list)  # Prompt.shifts of its images
    n_prompt_done: int = 0  # prompt tokens in the cache for the current task
    n_cached: int = 0
    sampler: Sampler | None = None
    detok: StreamingDetokenizer | None = None
    pending: str = ""  # text held back for a possible stop string
    next_token: int = -1  # sampled, not yet decoded
    forced: deque = field(default_factory=deque)  # tokens to emit instead of sampling
    n_decoded: int = 0
    n_thinking: int = 0
    thinking: bool = False
    t_start: float = 0.0
    t_prompt: float = 0.0
    t_image: float = 0.0  # encoding this task's images (not part of t_prompt)
    t_gen: float = 0.0
    last_used: float = 0.0

    @property
    def busy(self) -> bool:
        return self.task is not None


@dataclass
class Metrics:
    """Counters behind /metrics (llama.cpp's server_metrics)."""

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


class Engine:
    """Owns the Context; `submit` from any thread, `run` in the engine thread."""

    def __init__(self, model, tokenizer: Tokenizer, n_ctx: int, n_parallel: int,
                 n_batch: int = 2048, n_ubatch: int = 512, max_queue: int = 256,
                 type_k: str = "f16", type_v: str = "f16"):
        self.model, self.tokenizer = model, tokenizer
        self.ctx = Context(model, n_ctx=n_ctx, n_seq=n_parallel, n_ubatch=n_ubatch,
                           type_k=type_k, type_v=type_v)
        self.n_batch, self.max_queue = n_batch, max_queue
        self.slots = [Slot(i) for i in range(n_parallel)]
        self.queue: deque[Task] = deque()
        self.cond = threading.Condition()
        self.metrics = Metrics()
        self.ids = itertools.count(1)
        self.stopping = False

    @property
    def n_ctx_slot(self) -> int:
        return self.ctx.n_ctx_seq

    # -- called from request handlers ---------------------------------------------------------

    def submit(self, task: Task) -> None:
        if len(task.prompt) >= self.n_ctx_slot:
            raise EngineError(
                f"request ({len(task.prompt)} tokens) exceeds the available context size "
                f"({self.n_ctx_slot} tokens), try increasing it", "exceed_context_size_error",
                n_prompt_tokens=len(task.prompt), n_ctx=self.n_ctx_slot)
        if not task.prompt:
            raise EngineError("the prompt is empty")
        with self.cond:
            if len(self.queue) >= self.max_queue:
                raise EngineError("the server is busy: too many requests are waiting",
                                  "unavailable_error")
            task.id = next(self.ids)
            self.queue.append(task)
            self.cond.notify()

    def cancel(self, task: Task) -> None:
        task.cancelled = True
        with self.cond:
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()

    def n_deferred(self) -> int:
        return len(self.queue)

    # -- the engine thread --------------------------------------------------------------------

    def run(self) -> None:
        while True:
            with self.cond:
                while not self.stopping and not self.queue and not any(s.busy for s in self.slots):
                    self.cond.wait()
                if self.stopping:
                    return
                self._assign_waiting()
            self.step()

    def _assign_waiting(self) -> None:
        while self.queue:
            task = self.queue[0]
            if task.cancelled:
                self.queue.popleft()
                continue
            slot = self._pick_slot(task)
            if slot is None:
                return
            self.queue.popleft()
            self._start(slot, task)

    def _pick_slot(self, task: Task) -> Slot | None:
        """The requested slot, else the idle slot sharing the longest prompt prefix (llama.cpp's
        slot similarity), else the least recently used idle slot."""
        idle = [s for s in self.slots if not s.busy]
        if task.id_slot >= 0:
            chosen = [s for s in idle if s.id == task.id_slot]
            return chosen[0] if chosen else None
        if not idle:
            return None
        cells = task.prompt.tokens
        best = max(idle, key=lambda s: (common_prefix(s.tokens, cells), -s.last_used))
        if common_prefix(best.tokens, cells) > 0:
            return best
        return min(idle, key=lambda s: s.last_used)

    def _start(self, slot: Slot, task: Task) -> None:
        prompt = task.prompt
        keep = common_prefix(slot.tokens, prompt.tokens) if task.cache_prompt else 0
        keep = min(keep, len(prompt) - 1)  # re-read the last token for fresh logits
        keep = prompt.snap(keep)  # never keep part of an image
        keep = self.ctx.cache.trim(slot.id, keep)  # a recurrent state may go back further
        slot.tokens, slot.shifts = slot.tokens[:keep], prompt.shifts
        slot.task, slot.n_prompt_done, slot.n_cached = task, keep, keep
        slot.sampler = Sampler(task.params, self.tokenizer)
        slot.sampler.prime(prompt.text_tokens)  # image cells are not tokens
        slot.detok = StreamingDetokenizer(self.tokenizer, continuation=True)
        slot.pending, slot.next_token, slot.forced = "", -1, deque()
        slot.n_decoded, slot.n_thinking, slot.thinking = 0, 0, task.starts_in_thinking
        slot.t_start, slot.t_prompt, slot.t_image, slot.t_gen = time.perf_counter(), 0.0, 0.0, 0.0
        self.metrics.n_prompt_cached += keep

    def step(self) -> None:
        """One batched decode over every busy slot, then sampling and events."""
        for slot in self.slots:
            if slot.busy and slot.task.cancelled:
                self._release(slot)
        batch, parts = self._build_batch()
        if batch is None:
            return
        t0 = time.perf_counter()
        try:
            logits = self.ctx.decode(batch)
        except Exception as e:  # noqa: BLE001 - never let one bad step kill the server
            for slot, _, _ in parts:
                self._fail(slot, f"decode failed: {e}")
            return
        dt = time.perf_counter() - t0
        self.metrics.n_decode += 1
        self.metrics.n_busy_slots += len(parts)
        for slot, cells, has_logits in parts:
            slot.tokens.extend(cells)
            if slot.next_token >= 0:
                slot.t_gen += dt
            else:
                slot.t_prompt += dt
                slot.n_prompt_done += len(cells)
            if has_logits:
                self._advance(slot, logits[self._logit_row(parts, slot)])

    def _build_batch(self) -> tuple[Batch | None, list[tuple[Slot, list[int], bool]]]:
        """Generating slots first (one token each), then prompt chunks within n_batch rows;
        parts: (slot, the cells its rows fill, whether its last row returns logits)."""
        batches, parts, budget = [], [], self.n_batch
        for slot in self.slots:
            if slot.busy and slot.next_token >= 0 and budget > 0:
                n = len(slot.tokens)
                batches.append(text_batch([slot.next_token], n, rope_position(n, slot.shifts),
                                          slot.id))
                parts.append((slot, [slot.next_token], True))
                budget -= 1
        for slot in self.slots:
            if not slot.busy or slot.next_token >= 0 or budget <= 0:
                continue
            try:
                batch, cells, last = self._prompt_chunk(slot, budget)
            except Exception as e:  # noqa: BLE001 - an image that fails to encode ends its task
                self._fail(slot, f"failed to encode image: {e}")
                continue
            batches.append(batch)
            parts.append((slot, cells, last))
            budget -= len(cells)
        return (concat(batches) if batches else None), parts

    def _prompt_chunk(self, slot: Slot, budget: int) -> tuple[Batch, list[int], bool]:
        """The slot's next prompt rows (images encoded on first use); a non-causal image is
        never cut (it may overrun the budget, as it must fit one llama.cpp ubatch)."""
        prompt, done = slot.task.prompt, slot.n_prompt_done
        stop = prompt.chunk_end(done, min(len(prompt), done + budget))
        last = stop == len(prompt)
        batch = prompt.batch(done, stop, slot.id, last_logits=last)
        slot.t_image = sum(im.t_encode for im in prompt.images)
        return batch, prompt.tokens[done:stop], last

    @staticmethod
    def _logit_row(parts, slot: Slot) -> int:
        return [p[0] for p in parts if p[2]].index(slot)

    def _advance(self, slot: Slot, logits: np.ndarray) -> None:
        """Sample (or take a forced token), emit its text, and decide whether the task ends."""
        task = slot.task
        if slot.forced:
            token = slot.forced.popleft()
        else:
            token = slot.sampler.sample(logits)
        slot.sampler.accept(token)
        slot.n_decoded += 1
        probs = self._probs(slot, logits, token) if task.n_probs or task.post_sampling_probs else None
        if self.tokenizer.is_eog(token) and not task.ignore_eos:
            return self._finish(slot, "eos", probs)
        self._track_thinking(slot, token)
        slot.pending += slot.detok.feed(token)
        released, hit = release_text(slot.pending, task.stop)
        slot.pending = slot.pending[len(released):]
        task.emit({"type": "token", "token": token, "text": released, "probs": probs})
        if hit:
            return self._finish(slot, "word", None, stopping_word=self._stop_word(slot))
        if task.n_predict >= 0 and slot.n_decoded >= task.n_predict:
            return self._finish(slot, "limit", None)
        if len(slot.tokens) + 1 >= self.n_ctx_slot:
            return self._finish(slot, "limit", None)
        slot.next_token = token

    def _track_thinking(self, slot: Slot, token: int) -> None:
        """Count thinking tokens; past the budget, force the end-of-thinking tokens."""
        task = slot.task
        piece = self.tokenizer.token_to_piece(token, special=True)
        if b"<think>" in piece:
            slot.thinking = True
        elif b"</think>" in piece:
            slot.thinking = False
        elif slot.thinking:
            slot.n_thinking += 1
            if 0 <= task.reasoning_budget <= slot.n_thinking and not slot.forced:
                slot.forced.extend(task.think_end_tokens)
                slot.thinking = False

    def _stop_word(self, slot: Slot) -> str:
        return next((s for s in slot.task.stop if s in slot.pending), "")

    def _probs(self, slot: Slot, logits: np.ndarray, token: int) -> dict:
        n = slot.task.n_probs
        if slot.task.post_sampling_probs:
            top = slot.sampler.probs(n)
            return {"p": slot.sampler.token_prob(), "top": [(t.id, t.p) for t in top]}
        p, top = pre_sampling_probs(logits, n, token)
        return {"p": p, "top": [(t.id, t.p) for t in top]}

    def _finish(self, slot: Slot, stop_type: str, probs, stopping_word: str = "") -> None:
        task = slot.task
        tail = "" if stop_type == "word" else slot.pending + slot.detok.flush()
        n_prompt = len(task.prompt)
        m = self.metrics
        m.n_prompt_tokens += n_prompt - slot.n_cached
        m.t_prompt += slot.t_prompt
        m.n_predicted += slot.n_decoded
        m.t_predicted += slot.t_gen
        m.n_tokens_max = max(m.n_tokens_max, n_prompt + slot.n_decoded)
        m.bucket_prompt[0] += n_prompt - slot.n_cached
        m.bucket_prompt[1] += slot.t_prompt
        m.bucket_predict[0] += slot.n_decoded
        m.bucket_predict[1] += slot.t_gen
        task.emit({"type": "done", "text": tail, "stop_type": stop_type, "probs": probs,
                   "stopping_word": stopping_word, "id_slot": slot.id,
                   "timings": self._timings(slot), "n_prompt": n_prompt,
                   "n_cached": slot.n_cached, "n_decoded": slot.n_decoded})
        self._release(slot)

    def _fail(self, slot: Slot, message: str) -> None:
        slot.task.emit({"type": "error", "message": message, "kind": "server_error"})
        slot.tokens = []
        self.ctx.cache.clear(slot.id)
        self._release(slot)

    def _release(self, slot: Slot) -> None:
        slot.task, slot.next_token, slot.last_used = None, -1, time.monotonic()
        # the last sampled token was never decoded: the cache holds exactly slot.tokens
        self.ctx.cache.trim(slot.id, len(slot.tokens))

    def _timings(self, slot: Slot) -> dict:
        n_prompt = slot.n_prompt_done - slot.n_cached
        tp, tg = slot.t_prompt * 1000, slot.t_gen * 1000
        n_gen = max(slot.n_decoded - 1, 0)  # the first token came from the prompt's logits
        # image_ms (llamacpy's own): encoding the request's images; prompt_ms excludes it
        return {"cache_n": slot.n_cached, "prompt_n": n_prompt, "prompt_ms": tp,
                "image_ms": slot.t_image * 1000,
                "prompt_per_token_ms": tp / n_prompt if n_prompt else 0.0,
                "prompt_per_second": n_prompt * 1000 / tp if tp else 0.0,
                "predicted_n": slot.n_decoded, "predicted_ms": tg,
                "predicted_per_token_ms": tg / n_gen if n_gen else 0.0,
                "predicted_per_second": n_gen * 1000 / tg if tg else 0.0}

    def slots_info(self) -> list[dict]:
        return [{"id": s.id, "id_task": s.task.id if s.task else -1, "n_ctx": self.n_ctx_slot,
                 "is_processing": s.busy, "n_cached_tokens": len(s.tokens),
                 "next_token": {"n_decoded": s.n_decoded}} for s in self.slots]
