"""Speculative decoding in the core, with stub models: the n-gram drafter (llama.cpp's
common_ngram_simple_draft), one batched verification step per draft, the cache trimmed back
after a rejection, greedy and seeded output identical with and without speculation, and sampled
output keeping the target's distribution (a chi-square test that rejects a biased one)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from llamacpy.engine.prompt import Prompt
from llamacpy.engine.scheduler import Scheduler
from llamacpy.engine.sequence import Request
from llamacpy.engine.speculative import (NgramSimple, SpecParams, Speculator,
                                         ngram_simple_draft, parse_spec_types)
from llamacpy.sampling import SamplingParams
from llamacpy.engine.context import Context
from tests.engine.stub import StubModel, stub_context, tokenizer

GREEDY = SamplingParams(temperature=0.0)


def reference_ngram_simple(tokens, sampled, n, m):
    """common_ngram_simple_draft transcribed loop for loop from common/ngram-map.cpp."""
    cur = len(tokens)
    if cur <= n + m + 1:
        return []
    pattern = tokens[cur - n + 1:] + [sampled]
    match = 0
    for j in range(cur - n - 1, 0, -1):
        if all(tokens[j + k] == pattern[k] for k in range(len(pattern))):
            match = j
            break
    if match == 0:
        return []
    copy = min(m, cur - (match + n))
    return [] if copy < n else tokens[match + n:match + n + copy]


def test_ngram_simple_matches_llama_cpp():
    rng = np.random.default_rng(0)
    for trial in range(300):
        n, m = int(rng.integers(1, 5)), int(rng.integers(1, 8))
        tokens = [int(t) for t in rng.integers(0, 4, int(rng.integers(0, 40)))]
        sampled = int(rng.integers(0, 4))
        assert ngram_simple_draft(tokens, sampled, n, m) == \
            reference_ngram_simple(tokens, sampled, n, m), (trial, tokens, sampled, n, m)
    # the most recent earlier occurrence wins, and what followed it is the draft
    hist = [9, 1, 2, 3, 4, 5, 1, 2, 3, 6, 7, 8, 1, 2]
    assert ngram_simple_draft(hist, 3, 2, 3) == [6, 7, 8]
    assert ngram_simple_draft(hist, 3, 3, 2) == []  # llama.cpp: fewer than size_n to copy


def test_spec_types_use_llama_cpp_names():
    assert parse_spec_types("ngram-simple,draft-simple") == ["ngram-simple", "draft-simple"]
    with pytest.raises(ValueError, match="not supported by llamacpy yet"):
        parse_spec_types("ngram-mod")
    with pytest.raises(ValueError, match="unknown"):
        parse_spec_types("ngram-fancy")


def repeating(period: list[int], noise_every: int = 0):
    """Greedy continuation that cycles through `period` (from the last token), with a
    different token every `noise_every` cells so some drafts are rejected."""

    def next_token(history: list[int]) -> int:
        if noise_every and len(history) % noise_every == 0:
            return 250 + len(history) % 7
        last = history[-1]
        return period[(period.index(last) + 1) % len(period)] if last in period else period[0]

    return next_token


def generate(next_token, speculator=None, params=GREEDY, prompt=None, n_predict=80, **kw):
    ctx, tok = stub_context(next_token, n_ctx=512)
    sched = Scheduler(ctx, tok, speculator=speculator)
    req = Request(Prompt(prompt or [1, 2, 3]), params, n_predict=n_predict, **kw)
    events = list(sched.generate(req))
    assert all(e["type"] != "error" for e in events), events
    return [e["token"] for e in events if e["type"] == "token"], events[-1], ctx.model


@pytest.mark.parametrize("noise", [0, 11, 5])
def test_greedy_identical_and_fewer_steps(noise):
    fn = repeating([40, 41, 42, 43, 44, 45, 46, 47], noise)
    plain, done_plain, m_plain = generate(fn)
    spec = Speculator([NgramSimple(size_n=2, size_m=8)])
    fast, done, m_spec = generate(fn, spec)
    assert fast == plain and done["stop_type"] == done_plain["stop_type"] == "limit"
    t = done["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"]
    assert t["predicted_n"] == len(plain) == 80
    assert len(m_spec.calls) < len(m_plain.calls)  # drafts were verified in batched steps
    if noise == 0:
        assert t["draft_n_accepted"] == t["draft_n"]
    else:
        assert t["draft_n_accepted"] < t["draft_n"]  # some rejected: the cache was trimmed
    assert "draft_n" not in done_plain["timings"]


def test_rejected_cells_are_trimmed():
    """After a rejected draft the cache holds exactly the accepted cells: the stub's next token
    depends on the whole history, so a stale cell would change the output."""
    fn = repeating([40, 41, 42, 43], noise_every=6)

    class Wrong:  # drafts a right token, then a wrong one
        n_max = 2

        def draft(self, seq, history, n_max):
            return [fn(history), 99][:n_max]

    plain, _, _ = generate(fn, n_predict=40)
    fast, done, model = generate(fn, Speculator([Wrong()]), n_predict=40)
    assert fast == plain
    assert done["timings"]["draft_n_accepted"] < done["timings"]["draft_n"]


def test_drafting_counts_as_generation_time():
    """predicted_ms is the generation's wall time, the drafts included (llama.cpp times the
    slot from its first token on): a drafter taking 20 ms a call shows in it."""
    import time

    fn = repeating([40, 41, 42, 43])

    class Slow:
        n_max = 2

        def draft(self, seq, history, n_max):
            time.sleep(0.02)
            return [fn(history)][:n_max]

    _, done, _ = generate(fn, Speculator([Slow()]), n_predict=20)
    t = done["timings"]  # every call drafted one token
    assert t["draft_n"] > 0 and t["predicted_ms"] >= 20 * t["draft_n"]


def test_limits_n_predict_n_min_and_stop():
    fn = repeating([40, 41, 42, 43, 44, 45])
    spec = Speculator([NgramSimple(size_n=2, size_m=8)])
    for n in (1, 2, 7, 13):
        tokens, done, _ = generate(fn, spec, n_predict=n)
        assert len(tokens) == n and done["timings"]["predicted_n"] == n
    # a request's n_max caps every draft; n_min drops the shorter ones
    capped = Speculator([NgramSimple(size_n=2, size_m=8)])
    generate(fn, capped, speculative=SpecParams(n_max=3), n_predict=40)
    stats = capped.stats
    assert len(stats.accepted_per_pos) == 3 and 2 * stats.n_steps < stats.n_draft <= 3 * stats.n_steps
    _, done, _ = generate(fn, spec, speculative=SpecParams(n_min=9), n_predict=40)
    assert "draft_n" not in done["timings"]  # ngram-simple drafts at most size_m = 8
    # EOS inside an accepted draft ends generation there, as without speculation
    eos = repeating([40, 41, 42, 43, 0])
    prompt = [40, 41, 42, 43, 0] * 3 + [40]
    plain, d0, _ = generate(eos, prompt=prompt)
    fast, d1, _ = generate(eos, spec, prompt=prompt)
    assert fast == plain and d1["stop_type"] == d0["stop_type"] == "eos"
    assert d1["timings"]["draft_n"] > len(fast)  # the draft ran past the EOS it ended at


def test_seeded_sampling_identical():
    """Each token takes one draw of the sampler's RNG, with or without speculation, so a seed
    gives the same text when the logits are the same."""
    model = distribution_model()
    for seed in range(20):
        params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
        plain = sample_run(model, None, params, 12)
        fast = sample_run(model, Speculator([GuessArgmax(model)]), params, 12)
        assert plain == fast, seed


# -- the distribution test ------------------------------------------------------------------

VOCAB = [300, 301, 302, 303]  # the tokens the distribution model ever gives mass to


def distribution_model():
    """Logits over VOCAB as a fixed function of the last token (a Markov chain)."""
    table = {t: np.log(np.array(p)) for t, p in zip(
        [1] + VOCAB, [[0.4, 0.3, 0.2, 0.1], [0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25],
                      [0.7, 0.1, 0.1, 0.1], [0.05, 0.15, 0.3, 0.5]])}
    return table


class DistModel(StubModel):
    def __init__(self, n_vocab, table):
        super().__init__(n_vocab, lambda h: 0)
        self.table = table

    def forward(self, batch, cache):
        rows = []
        for i in range(len(batch)):
            seq = int(batch.seq_ids[i])
            cache.cells[seq].append(int(batch.tokens[i]))
            if batch.logits[i]:
                logits = np.full(self.args.n_vocab, -np.inf, np.float32)
                logits[VOCAB] = self.table[int(batch.tokens[i])]
                rows.append(logits)
        return np.array(rows, np.float32).reshape(-1, self.args.n_vocab)


class GuessArgmax:
    """A deterministic drafter: the most likely chain under the model (often wrong)."""

    n_max = 3

    def __init__(self, table):
        self.table = table

    def draft(self, seq, history, n_max):
        out, last = [], history[-1]
        for _ in range(n_max):
            last = VOCAB[int(np.argmax(self.table[last]))]
            out.append(last)
        return out


def sample_run(table, speculator, params, n):
    tok = tokenizer()
    ctx = Context(DistModel(tok.n_vocab, table), n_ctx=64)
    sched = Scheduler(ctx, tok, speculator=speculator)
    req = Request(Prompt([1]), params, n_predict=n, ignore_eos=True)
    return tuple(e["token"] for e in sched.generate(req) if e["type"] == "token")


def chi_square_p(counts: dict, expected: dict, n: int) -> float:
    """p-value of Pearson's chi-square (Wilson-Hilferty normal approximation)."""
    stat = sum((counts.get(k, 0) - n * p) ** 2 / (n * p) for k, p in expected.items())
    df = len(expected) - 1
    z = ((stat / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_sampled_distribution_is_the_targets():
    """3-token outcomes over many seeds, with a drafter whose guesses are often wrong, against
    the exact probabilities of the chain: the chi-square must not reject them; the same test
    rejects the frequencies of the draft's guesses taken blindly (its power)."""
    table = distribution_model()
    probs = {t: np.exp(v) / np.exp(v).sum() for t, v in table.items()}
    expected = {}
    for seq in itertools.product(VOCAB, repeat=3):
        p, last = 1.0, 1
        for t in seq:
            p, last = p * probs[last][VOCAB.index(t)], t
        expected[seq] = p
    n = 2000
    counts, guessed = {}, {}
    spec = Speculator([GuessArgmax(table)])
    rng = np.random.default_rng(1)
    for seed in range(n):
        params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0,
                                seed=seed + 12345)
        out = sample_run(table, spec, params, 3)
        counts[out] = counts.get(out, 0) + 1
        # a broken verifier that kept each guess with probability 1/2 regardless of p
        first = out[0]
        blind = (first,) + tuple(GuessArgmax(table).draft(0, [first], 2)) \
            if rng.random() < 0.5 else out
        guessed[blind] = guessed.get(blind, 0) + 1
    assert spec.stats.n_draft > 0 and 0 < spec.stats.n_accepted < spec.stats.n_draft
    assert chi_square_p(counts, expected, n) > 1e-3
    assert chi_square_p(guessed, expected, n) < 1e-6


def test_a_drafter_failing_on_the_prompt_fails_only_its_request():
    """Speculator.begin runs a drafter over the decoded prompt inside the scheduler's step: an
    error there ends that request with an error event, and the next request runs."""
    fn = repeating([40, 41, 42, 43])

    class Broken:
        n_max = 2

        def begin(self, seq, tokens):
            raise RuntimeError("draft cache full")

        def draft(self, seq, history, n_max):
            return [fn(history)][:n_max]

    ctx, tok = stub_context(fn, n_ctx=512)
    sched = Scheduler(ctx, tok, speculator=Speculator([Broken()]))
    events = list(sched.generate(Request(Prompt([1, 2, 3]), GREEDY, n_predict=8)))
    assert events[-1]["type"] == "error" and "draft cache full" in events[-1]["message"]
    assert not any(s.busy for s in sched.slots)
    sched.speculator = Speculator([NgramSimple(size_n=2, size_m=8)])
    events = list(sched.generate(Request(Prompt([1, 2, 3]), GREEDY, n_predict=8)))
    assert events[-1]["type"] == "done" and events[-1]["timings"]["predicted_n"] == 8
