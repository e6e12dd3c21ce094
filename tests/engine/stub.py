"""A stub model with scripted logits, for testing the sequence state machine and the scheduler
without a real model: the next token is a function of everything its sequence holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from llamacpy.engine.context import Context
from llamacpy.tokenizer import Tokenizer

TOKENIZER = "tests/golden/tiny_hf/llama.gguf"  # a real 320-token BPE vocabulary; EOS is 0
POISON = 7  # a prompt token whose decode raises, as a broken step would


@dataclass
class StubArgs:
    n_vocab: int
    n_ctx_train: int = 4096


class StubCache:
    """The KV cache's bookkeeping (check_room, commit, trim, clear) plus the tokens it holds."""

    def __init__(self, n_ctx: int, n_seq: int):
        self.n_ctx, self.n_seq = n_ctx, n_seq
        self.cells = [[] for _ in range(n_seq)]

    @property
    def n_past(self) -> list[int]:
        return [len(c) for c in self.cells]

    def check_room(self, seq: int, pos0: int, n: int) -> None:
        if pos0 != len(self.cells[seq]):
            raise ValueError(f"seq {seq}: writing at {pos0}, holds {len(self.cells[seq])}")
        if pos0 + n > self.n_ctx:
            raise ValueError("past the context")

    def commit(self, seq: int, n_past: int) -> None:
        assert n_past == len(self.cells[seq])

    def expect_rollback(self, seq: int) -> None:
        pass

    def trim(self, seq: int, n_keep: int) -> int:
        del self.cells[seq][n_keep:]
        return len(self.cells[seq])

    def clear(self, seq: int | None = None) -> None:
        for s in range(self.n_seq) if seq is None else [seq]:
            self.cells[s] = []


class StubModel:
    """`next_token(history)` scripts the logits: that token gets 10, the one after it 5."""

    def __init__(self, n_vocab: int, next_token: Callable[[list[int]], int]):
        self.args = StubArgs(n_vocab)
        self.next_token = next_token
        self.calls: list[int] = []  # rows per forward call

    def make_cache(self, n_ctx: int, n_seq: int, type_k: str, type_v: str) -> StubCache:
        return StubCache(n_ctx, n_seq)

    def forward(self, batch, cache: StubCache) -> np.ndarray:
        self.calls.append(len(batch))
        if POISON in batch.tokens:
            raise RuntimeError("poisoned batch")
        rows = []
        for i in range(len(batch)):
            seq = int(batch.seq_ids[i])
            cache.cells[seq].append(int(batch.tokens[i]))
            if batch.logits[i]:
                logits = np.zeros(self.args.n_vocab, np.float32)
                t = self.next_token(list(cache.cells[seq]))
                logits[(t + 1) % self.args.n_vocab] = 5.0
                logits[t] = 10.0
                rows.append(logits)
        return np.array(rows, np.float32).reshape(-1, self.args.n_vocab)


def tokenizer() -> Tokenizer:
    return Tokenizer.from_gguf(TOKENIZER)


def stub_context(next_token, n_ctx: int = 256, n_seq: int = 1, n_ubatch: int = 512):
    tok = tokenizer()
    model = StubModel(tok.n_vocab, next_token)
    return Context(model, n_ctx=n_ctx * n_seq, n_seq=n_seq, n_ubatch=n_ubatch), tok


def script(*continuations: tuple[list[int], list[int]]):
    """next_token from (prompt, continuation) pairs: after a prompt, its continuation token by
    token, then EOS (0); anything else continues with token 300."""

    def next_token(history: list[int]) -> int:
        for prompt, cont in continuations:
            n = len(prompt)
            if history[:n] == prompt and history[n:] == cont[: len(history) - n]:
                return cont[len(history) - n] if len(history) - n < len(cont) else 0
        return 300

    return next_token
