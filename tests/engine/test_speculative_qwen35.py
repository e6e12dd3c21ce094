"""Speculative decoding on Qwen3.5 (Gated DeltaNet layers: a recurrent state that cannot drop
its last tokens): a rejected draft rolls the conv and delta-rule states back to the snapshot
after the last accepted row, so greedy output is identical with and without speculation. The
model is the tiny random Qwen3.5 of tests/golden/qwen35 (the real stand-in is not needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.engine.context import Context
from llamacpy.engine.prompt import Prompt
from llamacpy.engine.scheduler import Scheduler
from llamacpy.engine.sequence import Request
from llamacpy.engine.speculative import NgramSimple, Speculator
from llamacpy.format import open_gguf
from llamacpy.models import load_model
from llamacpy.sampling import SamplingParams
from llamacpy.tokenizer import Tokenizer

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "qwen35"


@pytest.fixture(scope="module", params=["qwen35", "qwen35-mtp"])
def model(request):
    g = open_gguf(GOLDEN / f"{request.param}.gguf")
    yield load_model(g), Tokenizer.from_gguf(g)
    g.close()


class Oracle:
    """Drafts the true greedy continuation with every `wrong`-th guess changed: drafts are
    accepted up to a wrong guess, then rejected, at every offset."""

    def __init__(self, truth: list[int], prompt_len: int, n: int, wrong: int):
        self.truth, self.prompt_len, self.n_max, self.wrong = truth, prompt_len, n, wrong
        self.calls = 0

    def draft(self, seq, history, n_max):
        self.calls += 1
        done = len(history) - self.prompt_len  # generated so far, the sampled one included
        out = list(self.truth[done:done + n_max])
        if out and self.calls % self.wrong:
            k = self.calls % len(out)
            out[k] = (out[k] + 1) % 50
        return out


def run(model, tok, prompt, speculator, n=40, n_ubatch=512):
    ctx = Context(model, n_ctx=256, n_ubatch=n_ubatch, type_k="f32", type_v="f32")
    sched = Scheduler(ctx, tok, speculator=speculator)
    req = Request(Prompt(list(prompt)), SamplingParams(temperature=0.0), n_predict=n,
                  ignore_eos=True)
    events = list(sched.generate(req))
    assert events[-1]["type"] == "done", events[-1]
    return [e["token"] for e in events if e["type"] == "token"], events[-1]["timings"]


@pytest.mark.parametrize("n_ubatch", [512, 3])  # 3: a draft split across ubatches
def test_greedy_identical_with_rollback(model, n_ubatch):
    m, tok = model
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 200, 24)]
    plain, _ = run(m, tok, prompt, None)
    oracle = Oracle(plain, len(prompt), 5, wrong=3)
    spec = Speculator([oracle])
    fast, t = run(m, tok, prompt, spec, n_ubatch=n_ubatch)
    assert fast == plain
    assert 0 < t["draft_n_accepted"] < t["draft_n"]  # accepted and rejected guesses both
    assert any(0 < a < 5 for a in spec.stats.accepted_per_pos)


def test_greedy_identical_with_ngram_drafts(model):
    m, tok = model
    prompt = [int(t) for t in np.random.default_rng(1).integers(3, 200, 8)] * 4
    plain, _ = run(m, tok, prompt, None, n=60)
    fast, t = run(m, tok, prompt, Speculator([NgramSimple(1, 6)]), n=60)
    assert fast == plain and t["draft_n"] > 0


def test_rollback_without_snapshots_would_diverge(model):
    """The test's power: with the draft snapshots dropped, trim falls back to an older
    snapshot, and the engine refuses to go on rather than generate from a wrong state."""
    m, tok = model
    prompt = [int(t) for t in np.random.default_rng(0).integers(3, 200, 24)]
    plain, _ = run(m, tok, prompt, None)
    ctx = Context(m, n_ctx=256, type_k="f32", type_v="f32")
    ctx.cache.expect_rollback = lambda seq: None
    sched = Scheduler(ctx, tok, speculator=Speculator([Oracle(plain, len(prompt), 5, 3)]))
    req = Request(Prompt(list(prompt)), SamplingParams(temperature=0.0), n_predict=40,
                  ignore_eos=True)
    events = list(sched.generate(req))
    assert events[-1]["type"] == "error" and "roll back" in events[-1]["message"]
