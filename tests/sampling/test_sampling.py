"""Sampler behaviour that needs no reference: RNG, greedy, seeds, bias, params, stops, speed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llamacpy.sampling import (
    MT19937,
    Candidates,
    Dry,
    Sampler,
    SamplingParams,
    find_stop,
    pre_sampling_probs,
    sampler_names,
    top_k,
    top_p,
)
from llamacpy.sampling.candidates import expf, top_indices
from llamacpy.sampling.penalties import _repeat_counts


def logits_for(n: int, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).normal(size=n) * 3).astype(np.float32)


def test_mt19937_is_std_mt19937():
    """The C++ standard fixes the 10000th output of a default-constructed std::mt19937."""
    rng = MT19937(5489)
    assert int(rng.raw(10000)[-1]) == 4123659995


def test_uniform_draws_use_libstdcxx_canonical():
    rng, raw = MT19937(7), MT19937(7)
    lo, hi = raw.raw(2)
    assert rng.uniform_double() == (float(lo) + float(hi) * 2.0**32) / 2.0**64
    assert rng.uniform_float() == np.float32(raw.raw(1)[0]) / np.float32(2.0**32)


def test_expf_special_values():
    x = np.array([-np.inf, -104.0, -103.9, -87.0, 0.0, 1.0, 88.0, 89.0], dtype=np.float32)
    y = expf(x)
    assert y[0] == 0 and y[1] == 0 and y[2] > 0 and y[4] == 1 and np.isinf(y[-1])
    np.testing.assert_allclose(y[3:7], np.exp(x[3:7].astype(np.float64)), rtol=1e-7)


def test_top_indices_orders_ties_by_index():
    x = np.array([1, 3, 3, 2, 3, 0], dtype=np.float32)
    assert top_indices(x, 2).tolist() == [1, 2]
    assert top_indices(x, 4).tolist() == [1, 2, 4, 3]
    big = np.repeat(np.float32(1), 300_000)
    big[[5, 200_000]] = 2
    assert top_indices(big, 4).tolist() == [5, 200_000, 0, 1]


@pytest.mark.parametrize("repeat_penalty", [1.3, 1.0])
def test_greedy_is_argmax_and_keeps_rng_aligned(repeat_penalty):
    """temperature <= 0 takes the fast path (with no penalty, an argmax over the logits in place);
    it picks what the full chain picks and advances the dist RNG like llama.cpp's dist does."""
    params = SamplingParams(temperature=0.0, seed=3, repeat_penalty=repeat_penalty)
    fast, full = Sampler(params), Sampler(params)
    full._greedy_steps = None
    for i in range(5):
        logits = logits_for(5000, i)
        before = logits.copy()
        token = fast.sample(logits)
        assert np.array_equal(logits, before)
        assert token == full.sample(logits)
        assert fast.probs(3)[0].id == token and fast.probs(3)[0].p == 1.0
        fast.accept(token)
        full.accept(token)
    assert fast.steps[-1].rng.uniform_double() == full.steps[-1].rng.uniform_double()
    assert Sampler(SamplingParams(temperature=-1)).sample(logits_for(100, 9)) == int(
        np.argmax(logits_for(100, 9))
    )


def test_seeded_runs_repeat_and_reset_restarts():
    params = SamplingParams(seed=1234, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    a, b = Sampler(params), Sampler(params)
    rows = [logits_for(2000, i) for i in range(20)]
    first = [a.sample(r) for r in rows]
    assert first == [b.sample(r) for r in rows]
    assert len(set(first)) > 5
    a.reset()
    assert [a.sample(r) for r in rows] == first
    other = Sampler(SamplingParams(seed=99, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0))
    assert [other.sample(r) for r in rows] != first


def test_default_seed_is_random():
    rows = [logits_for(500, i) for i in range(30)]
    params = SamplingParams(temperature=2.0, top_k=0, min_p=0.0)
    runs = {tuple(Sampler(params).sample(r) for r in rows) for _ in range(3)}
    assert len(runs) > 1


def test_logit_bias_bans_and_boosts():
    logits = logits_for(1000, 0)
    best = int(np.argmax(logits))
    banned = Sampler(SamplingParams(temperature=0.0, logit_bias={best: -math.inf}))
    assert banned.sample(logits) != best
    boosted = Sampler(SamplingParams(temperature=0.0, logit_bias={17: 100.0}))
    assert boosted.sample(logits) == 17
    sampled = Sampler(
        SamplingParams(
            seed=5,
            temperature=5.0,
            top_k=0,
            min_p=0.0,
            top_p=1.0,
            logit_bias={t: -math.inf for t in range(999)},
        )
    )
    assert {sampled.sample(logits) for _ in range(20)} == {999}


def test_suppress_tokens_are_banned():
    logits = logits_for(100, 1)
    best = int(np.argmax(logits))
    assert Sampler(SamplingParams(temperature=0.0), suppress_tokens=[best]).sample(logits) != best


def test_noop_settings():
    cur = Candidates.from_logits(logits_for(50, 2))
    before = cur.logits.copy()
    top_k(cur, 0)
    top_p(cur, 1.0)
    assert len(cur) == 50 and not cur.sorted and np.array_equal(cur.logits, before)


def test_probs_reports_post_sampling_candidates():
    sampler = Sampler(SamplingParams(seed=2, top_k=5, top_p=1.0, min_p=0.0))
    token = sampler.sample(logits_for(1000, 3))
    probs = sampler.probs(10)
    assert len(probs) == 5 and math.isclose(sum(p.p for p in probs), 1.0, rel_tol=1e-6)
    assert [p.p for p in probs] == sorted((p.p for p in probs), reverse=True)
    assert sampler.token_prob() == next(p.p for p in probs if p.id == token)


def test_pre_sampling_probs():
    logits = logits_for(300, 4)
    p_token, top = pre_sampling_probs(logits, 3, token=7)
    ref = np.exp(logits.astype(np.float64) - logits.max())
    ref /= ref.sum()
    assert [t.id for t in top] == np.argsort(-logits)[:3].tolist()
    np.testing.assert_allclose([t.p for t in top], np.sort(ref)[::-1][:3], rtol=1e-5)
    assert math.isclose(p_token, ref[7], rel_tol=1e-5)


def test_dry_repeat_counts_example():
    """The worked example in llama_sampler_dry_apply's comments."""
    a, b, c, y = 1, 2, 3, 4
    context = [a, b, c, c, b, c, y, a, b, c]
    assert _repeat_counts(context[::-1], len(context)) == [0, 0, 3, 1, 0, 2, 0, 0, 0, 0]
    dry = Dry(multiplier=1.0, base=2.0, allowed_length=2, penalty_last_n=64)
    for token in context:
        dry.accept(token)
    cur = Candidates.from_logits(np.zeros(5, np.float32))
    dry(cur)
    assert cur.logits.tolist() == [0, 0, 0, -2.0, -1.0]  # c extends a 3-repeat, y a 2-repeat


def test_params_names_and_aliases():
    p = SamplingParams.from_dict(
        {
            "temp": 0.5,
            "typ_p": 0.9,
            "logprobs": 3,
            "seed": -1,
            "logit_bias": [[5, False], [6, 1.0], [6, 0.5]],
            "samplers": "kpt",
            "dry_base": 0.5,
            "unknown": 1,
        }
    )
    assert p.temp == p.temperature == 0.5 and p.typical_p == 0.9 and p.n_probs == 3
    assert p.seed == 0xFFFFFFFF and p.dry_base == 1.75
    assert p.logit_bias == {5: -math.inf, 6: 1.5}
    assert p.samplers == ["top_k", "top_p", "temperature"]
    assert sampler_names(["Top-K", "nucleus", "typ", "minp", "temp"]) == [
        "top_k",
        "top_p",
        "typ_p",
        "min_p",
        "temperature",
    ]
    with pytest.warns(UserWarning):
        assert sampler_names(["top_k", "bogus"]) == ["top_k"]
    with pytest.raises(ValueError):
        SamplingParams(repeat_penalty=0.0)


def test_params_from_model_metadata_then_request():
    """common_init_sampler_from_model: general.sampling.* over the defaults, the user's over it."""
    meta = {"general.sampling.temp": 1.0, "general.sampling.top_k": 64,
            "general.sampling.sequence": "top_k;top_p;temperature"}  # fmt: skip
    server = SamplingParams.from_gguf(meta, top_p=0.9)
    assert (server.temperature, server.top_k, server.top_p) == (1.0, 64, 0.9)
    assert server.samplers == ["top_k", "top_p", "temperature"]
    request = SamplingParams.from_dict({"top_k": 5, "dry_base": 0.2}, base=server)
    assert (request.top_k, request.temperature, request.dry_base) == (5, 1.0, 1.75)


def test_defaults_are_llama_cpp_defaults():
    p = SamplingParams()
    assert (p.top_k, p.top_p, p.min_p, p.typical_p, p.temperature) == (40, 0.95, 0.05, 1.0, 0.8)
    assert (p.repeat_last_n, p.repeat_penalty, p.dry_penalty_last_n, p.top_n_sigma) == (
        64,
        1.0,
        64,
        -1.0,
    )
    assert p.samplers == [
        "penalties",
        "dry",
        "top_n_sigma",
        "top_k",
        "typ_p",
        "top_p",
        "min_p",
        "xtc",
        "temperature",
    ]


@pytest.mark.parametrize(
    "text,stops,expected",
    [
        ("Hello world", ["world"], (6, False)),
        ("Hello wor", ["world"], (6, True)),
        ("Hello w", ["world", "Hello w"], (0, False)),
        ("abc", ["x"], (None, False)),
        ("abcab", ["abd", "bx"], (3, True)),
        ("a\n\nUser:", ["\nUser:", "User"], (2, False)),
        ("ends with U", ["User:"], (10, True)),
        (b"bytes too\xe2", [b"\xe2\x80\x9c"], (9, True)),
    ],
)
def test_find_stop(text, stops, expected):
    assert find_stop(text, stops) == expected


def test_find_stop_only_searches_the_new_tail():
    # with last_token_size, a full stop is looked for only where the last token could finish it
    assert find_stop("stop ... more", ["stop"], last_token_size=4) == (None, False)
    assert find_stop("... stop", ["stop"], last_token_size=2) == (4, False)
