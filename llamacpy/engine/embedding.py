"""Embeddings: many sequences encoded per forward, pooled as llama.cpp pools them.

    emb = Embedder(model, pooling=None)   # None: the model's {arch}.pooling_type
    vectors = emb.embed([[101, 7592, 102], [101, 2088, 102]])   # raw, not normalised
    unit = normalize(vectors[0], 2)

An encoder (bert: `model.encoder`) runs each batch without a cache, every row seeing its whole
sequence; a decoder whose forward gives hidden states (llama, qwen2, qwen3: `hidden=True`) runs
its causal graph over a scratch KV cache cleared after each batch, as llama-cpp-python's
Llama.embed clears it. Sequences are packed into batches of up to n_ubatch tokens and n_seq_max
sequences (llama.cpp: a sequence to embed must fit one ubatch). Pooling matches
llm_graph_context::build_pooling: none (one vector per token), mean, cls (first token), last,
rank (the model's classifier on the first token).
"""

from __future__ import annotations

import inspect
import threading
from collections import deque
from concurrent.futures import Future

import numba
import numpy as np

from ..memory.batch import Batch, concat

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}  # enum llama_pooling_type
POOLING_NAMES = {v: k for k, v in POOLING.items()}
DECODER_SEQS = 4  # sequences per batch for a decoder: its scratch cache is n_seq x n_ubatch


class EmbeddingError(ValueError):
    """An input that cannot be embedded (empty, or longer than one ubatch); `kind` is the
    error type llama-server reports it with."""

    def __init__(self, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.kind = kind


def pooling_type(value) -> int | None:
    """A pooling name or llama_pooling_type number as the number; None or -1: unspecified."""
    if value is None or value == -1:
        return None
    if isinstance(value, str):
        if value not in POOLING:
            raise ValueError(f"unknown pooling type '{value}' (use {', '.join(POOLING)})")
        return POOLING[value]
    if int(value) not in POOLING_NAMES:
        raise ValueError(f"unknown pooling type {value}")
    return int(value)


def normalize(v: np.ndarray, embd_norm: int = 2) -> np.ndarray:
    """common_embd_normalize: -1 none, 0 max-abs scaled to int16 range, 1 taxicab,
    2 euclidean, >2 p-norm; sums in float64; a zero vector stays zero."""
    x = np.asarray(v, np.float32)
    if embd_norm == -1:
        return x.copy()
    a = np.abs(x.astype(np.float64))
    if embd_norm == 0:
        total = a.max(initial=0.0) / 32760.0
    elif embd_norm == 2:
        total = np.sqrt((a * a).sum())
    else:
        total = (a ** embd_norm).sum() ** (1.0 / embd_norm)
    scale = 1.0 / total if total > 0 else 0.0
    return x * np.float32(scale)


class Embedder:
    """Pooled embeddings of token sequences from one model (call from one thread at a time)."""

    def __init__(self, model, pooling: int | str | None = None, n_ubatch: int = 512,
                 n_seq_max: int = 64, n_threads: int | None = None):
        self.model, self.n_ubatch, self.n_threads = model, n_ubatch, n_threads
        a = model.args
        self.encoder = bool(getattr(model, "encoder", False))
        if not self.encoder and "hidden" not in inspect.signature(model.forward).parameters:
            raise ValueError(f"embeddings are not supported for the '{a.arch}' architecture "
                             f"(llamacpy embeds with bert, llama, qwen2 and qwen3 models)")
        chosen = pooling_type(pooling)
        self.pooling = a.extra.get("pooling", POOLING["none"]) if chosen is None else chosen
        if self.pooling == POOLING["rank"] and not getattr(model, "has_classifier", False):
            raise ValueError(f"rank pooling needs a reranker with a classifier head; this "
                             f"'{a.arch}' model has none")
        self.n_seq_max = n_seq_max if self.encoder else min(n_seq_max, DECODER_SEQS)
        self.cache = None if self.encoder else model.make_cache(n_ubatch, self.n_seq_max)

    @property
    def n_embd(self) -> int:
        return self.model.args.n_embd

    def check(self, tokens: list[int]) -> None:
        """llama.cpp's refusals for one input (server_context: embeddings cannot split)."""
        if not tokens:
            raise EmbeddingError("Input content cannot be empty")
        if len(tokens) > self.n_ubatch:
            raise EmbeddingError(f"input ({len(tokens)} tokens) is too large to process. "
                                 f"increase the physical batch size (current batch size: "
                                 f"{self.n_ubatch})", "server_error")
        n_ctx = self.model.args.n_ctx_train
        if self.encoder and len(tokens) > n_ctx:  # absolute positions end there
            raise EmbeddingError(f"input ({len(tokens)} tokens) is larger than the max context "
                                 f"size ({n_ctx} tokens). skipping", "server_error")
        n_vocab = self.model.args.n_vocab
        if any(not 0 <= t < n_vocab for t in tokens):
            raise EmbeddingError(f"invalid token id in input (the vocabulary is 0..{n_vocab - 1})")

    def embed(self, seqs: list[list[int]]) -> list[np.ndarray]:
        """Per sequence: float32 [n_embd] pooled (rank: [n_cls_out] scores), or [n_tokens,
        n_embd] with pooling none. Not normalised."""
        for tokens in seqs:
            self.check(tokens)
        if self.n_threads and self.n_threads != numba.get_num_threads():
            numba.set_num_threads(self.n_threads)
        out: list[np.ndarray] = []
        for group in pack([len(t) for t in seqs], self.n_ubatch, self.n_seq_max):
            part = [seqs[i] for i in group]
            out += self.pool(self.hidden(part), [len(t) for t in part])
        return out

    def hidden(self, seqs: list[list[int]]) -> np.ndarray:
        """float32 [total tokens, n_embd]: the sequences' final hidden states, in order."""
        batch = concat([Batch.from_tokens(t, seq=i, all_logits=True) for i, t in enumerate(seqs)])
        if self.encoder:
            return self.model.forward(batch, None)
        self.cache.clear()
        try:
            return self.model.forward(batch, self.cache, hidden=True)
        finally:
            self.cache.clear()

    def pool(self, hidden: np.ndarray, lengths: list[int]) -> list[np.ndarray]:
        parts = np.split(hidden, np.cumsum(lengths)[:-1])
        kind = POOLING_NAMES[self.pooling]
        if kind == "none":
            return [np.array(p) for p in parts]
        if kind == "mean":
            return [p.mean(axis=0, dtype=np.float64).astype(np.float32) for p in parts]
        if kind == "last":
            return [np.array(p[-1]) for p in parts]
        first = np.stack([p[0] for p in parts])
        return list(self.model.rank_head(first)) if kind == "rank" else list(first)


def pack(lengths: list[int], n_tokens: int, n_seqs: int) -> list[list[int]]:
    """Indices of consecutive inputs grouped so each group has at most n_tokens tokens and
    n_seqs sequences (llama-cpp-python's Llama.embed fills batches the same way)."""
    groups: list[list[int]] = []
    used = 0
    for i, n in enumerate(lengths):
        if not groups or used + n > n_tokens or len(groups[-1]) >= n_seqs:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += n
    return groups


class EmbeddingWorker:
    """The thread that owns an Embedder in a server: requests queue their sequences, and each
    round embeds every queued request's sequences together (so concurrent requests share
    batches). A failure fails the requests of its round, never the thread."""

    def __init__(self, embedder: Embedder, on_start=None):
        self.embedder = embedder
        self.jobs: deque[tuple[list[list[int]], Future]] = deque()
        self.cond = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self._run, args=(on_start,), daemon=True,
                                       name="llamacpy-embeddings")
        self.thread.start()

    def submit(self, seqs: list[list[int]]) -> Future:
        """A Future of embed(seqs); bad input fails at once with EmbeddingError."""
        for tokens in seqs:
            self.embedder.check(tokens)
        done: Future = Future()
        with self.cond:
            if self.stopping:
                raise RuntimeError("the embedding worker has stopped")
            self.jobs.append((seqs, done))
            self.cond.notify()
        return done

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify()

    def _run(self, on_start) -> None:
        if on_start is not None:
            on_start()  # the thread's kernel thread count (-t)
        while True:
            with self.cond:
                while not (self.jobs or self.stopping):
                    self.cond.wait()
                if self.stopping:
                    return
                jobs = list(self.jobs)
                self.jobs.clear()
            self._round(jobs)

    def _round(self, jobs: list[tuple[list[list[int]], Future]]) -> None:
        live = [(seqs, f) for seqs, f in jobs if f.set_running_or_notify_cancel()]
        try:
            vectors = self.embedder.embed([t for seqs, _ in live for t in seqs])
        except Exception as e:  # noqa: BLE001 - the round's requests fail, the worker goes on
            for _, f in live:
                f.set_exception(e)
            return
        start = 0
        for seqs, f in live:
            f.set_result(vectors[start:start + len(seqs)])
            start += len(seqs)
