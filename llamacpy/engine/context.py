"""A context: one model, its KV cache, and `decode(batch) -> logits` in micro-batches
(llama.cpp: llama_context, llama_decode splitting a batch into ubatches)."""

from __future__ import annotations

import numba
import numpy as np

from ..kernels import get_threads, set_threads
from ..kernels.compiler_pages import release_if_loaded, trim_heap
from ..memory.batch import Batch
from ..memory.kv_cache import KVCache


TRIM_HEAP_TOKENS = 64  # batches this long trim the heap (~2 ms against >= 100 ms of decoding)


class Context:
    """Runs `model.forward` over batches of up to n_ubatch rows; n_ctx is split among n_seq.

    n_threads (-t) runs single-token steps and n_threads_batch (-tb) every ubatch of more than
    one row, as llama.cpp's graph_compute picks them; None leaves the calling thread's count."""

    def __init__(self, model, n_ctx: int = 4096, n_seq: int = 1, n_ubatch: int = 512,
                 type_k: str = "f16", type_v: str = "f16", n_threads: int | None = None,
                 n_threads_batch: int | None = None):
        if n_ctx < 1 or n_seq < 1 or n_ubatch < 1:
            raise ValueError("n_ctx, n_seq and n_ubatch must be positive")
        self.model = model
        self.n_ctx, self.n_seq, self.n_ubatch = n_ctx, n_seq, n_ubatch
        self.cache: KVCache = model.make_cache(n_ctx // n_seq, n_seq, type_k, type_v)
        self.use_threads(n_threads, n_threads_batch)
        release_if_loaded()  # what importing numba and loading the model mapped of LLVM

    def use_threads(self, n_threads: int | None, n_threads_batch: int | None) -> None:
        """Thread counts for decode (values <= 0 or None: unset). With n_threads_batch set, BLAS
        (the sgemm of prompt batches) uses it, and numba's count (per thread) switches at each
        ubatch; an unset n_threads is the count in effect now."""
        cap = numba.config.NUMBA_NUM_THREADS
        t = min(n_threads, cap) if n_threads and n_threads > 0 else None
        tb = min(n_threads_batch, cap) if n_threads_batch and n_threads_batch > 0 else None
        if tb is not None:
            t = t or get_threads()
            set_threads(tb)
        self.n_threads, self.n_threads_batch = t, tb or t

    def thread_counts(self) -> tuple[int, int]:
        """(n_threads, n_threads_batch) that decode runs with."""
        t = self.n_threads or get_threads()
        return t, self.n_threads_batch or t

    @property
    def n_ctx_seq(self) -> int:
        return self.cache.n_ctx

    def decode(self, batch: Batch) -> np.ndarray:
        """Logits float32 [rows with batch.logits, n_vocab], in batch order."""
        for seq, pos0, n in runs(batch):
            self.cache.check_room(seq, pos0, n)
        outputs = []
        for start, stop in ubatch_bounds(batch, self.n_ubatch):
            ub = batch.slice(start, stop)
            threads = self.n_threads_batch if stop - start > 1 else self.n_threads
            if threads and threads != numba.get_num_threads():
                numba.set_num_threads(threads)
            logits = self.model.forward(ub, self.cache)
            for s in ub.segments():
                self.cache.commit(s.seq, s.pos0 + s.stop - s.start)
            if len(logits):
                outputs.append(logits)
        if len(batch) >= TRIM_HEAP_TOKENS:  # a prompt's freed buffers back to the OS
            trim_heap()
        if not outputs:
            return np.empty((0, self.model.args.n_vocab), np.float32)
        return outputs[0] if len(outputs) == 1 else np.concatenate(outputs)


def ubatch_bounds(batch: Batch, n_ubatch: int) -> list[tuple[int, int]]:
    """Row ranges of at most n_ubatch rows, except that a non-causal segment (an image whose
    tokens see each other) is never cut: its ubatch grows to hold it (llama.cpp needs
    n_ubatch >= the image's tokens for the same reason)."""
    whole = [s for s in batch.segments() if not s.causal]
    bounds, start = [], 0
    while start < len(batch):
        stop = min(start + n_ubatch, len(batch))
        for s in whole:
            if s.start < stop < s.stop:
                stop = s.stop if s.start <= start else s.start
        bounds.append((start, stop))
        start = stop
    return bounds


def runs(batch: Batch) -> list[tuple[int, int, int]]:
    """(seq, first position, rows) of each run of consecutive positions of one sequence,
    across segments that only differ in their attention."""
    out: list[list[int]] = []
    for s in batch.segments():
        if out and out[-1][0] == s.seq and out[-1][1] + out[-1][2] == s.pos0:
            out[-1][2] += s.stop - s.start
        else:
            out.append([s.seq, s.pos0, s.stop - s.start])
    return [tuple(r) for r in out]
