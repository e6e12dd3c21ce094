"""A context: one model, its KV cache, and `decode(batch) -> logits` in micro-batches
(llama.cpp: llama_context, llama_decode splitting a batch into ubatches)."""

from __future__ import annotations

import numpy as np

from .batch import Batch
from .kv_cache import KVCache


class Context:
    """Runs `model.forward` over batches of up to n_ubatch rows; n_ctx is split among n_seq."""

    def __init__(self, model, n_ctx: int = 4096, n_seq: int = 1, n_ubatch: int = 512,
                 type_k: str = "f16", type_v: str = "f16"):
        if n_ctx < 1 or n_seq < 1 or n_ubatch < 1:
            raise ValueError("n_ctx, n_seq and n_ubatch must be positive")
        self.model = model
        self.n_ctx, self.n_seq, self.n_ubatch = n_ctx, n_seq, n_ubatch
        self.cache: KVCache = model.make_cache(n_ctx // n_seq, n_seq, type_k, type_v)

    @property
    def n_ctx_seq(self) -> int:
        return self.cache.n_ctx

    def decode(self, batch: Batch) -> np.ndarray:
        """Logits float32 [rows with batch.logits, n_vocab], in batch order."""
        for s in batch.segments():
            self.cache.check_room(s.seq, s.pos0, s.stop - s.start)
        outputs = []
        for start in range(0, len(batch), self.n_ubatch):
            ub = batch.slice(start, start + self.n_ubatch)
            logits = self.model.forward(ub, self.cache)
            for s in ub.segments():
                self.cache.commit(s.seq, s.pos0 + s.stop - s.start)
            if len(logits):
                outputs.append(logits)
        if not outputs:
            return np.empty((0, self.model.args.n_vocab), np.float32)
        return outputs[0] if len(outputs) == 1 else np.concatenate(outputs)
