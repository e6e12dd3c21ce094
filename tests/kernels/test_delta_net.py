"""The gated delta rule and causal conv kernels (kernels/delta_net.py) against their numpy twins."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.kernels.delta_net import (conv1d, conv1d_reference, delta_rule_chunked,
                                        delta_rule_recurrent, delta_rule_reference,
                                        unit_lower_inverse, unit_lower_inverse_reference)


def l2(x: np.ndarray) -> np.ndarray:
    return (x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)).astype(np.float32)


def inputs(n: int, n_k: int, n_v: int, d: int, seed: int = 0, a_max: float = 8.0):
    """q, k (L2-normalised), v, g, beta as Qwen3.5 makes them; decay rates log-uniform up to
    a_max, so some heads forget within a token and some remember the whole sequence."""
    rng = np.random.default_rng(seed)
    q, k = l2(rng.standard_normal((n, n_k, d))), l2(rng.standard_normal((n, n_k, d)))
    v = rng.standard_normal((n, n_v, d)).astype(np.float32)
    a = np.exp(rng.uniform(np.log(0.01), np.log(a_max), n_v))
    g = (-a * np.log1p(np.exp(rng.standard_normal((n, n_v))))).astype(np.float32)
    beta = (1 / (1 + np.exp(-rng.standard_normal((n, n_v))))).astype(np.float32)
    state = (0.1 * rng.standard_normal((n_v, d, d))).astype(np.float32)
    return q, k, v, g, beta, state


@pytest.mark.parametrize("n, n_k, n_v, d", [(1, 2, 4, 32), (37, 2, 4, 32), (5, 16, 16, 128)])
def test_recurrent_matches_twin(n, n_k, n_v, d):
    q, k, v, g, beta, state = inputs(n, n_k, n_v, d)
    want_state = state.copy()
    want = delta_rule_reference(q, k, v, g, beta, want_state)
    states, out = state[None].copy(), np.empty_like(v)
    delta_rule_recurrent(q, k, v, g, beta, np.array([0]), np.array([n]), np.array([0]), states,
                         out)
    assert np.abs(out - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(states[0] - want_state).max() <= 1e-5 * np.abs(want_state).max()


def test_recurrent_segments_use_their_own_state():
    """Three segments of two sequences in one call, as the server batches them."""
    q, k, v, g, beta, state = inputs(9, 2, 4, 32, seed=1)
    states = np.stack([state, 2 * state])
    starts, stops, slots = np.array([0, 1, 4]), np.array([1, 4, 9]), np.array([1, 0, 1])
    got_states, out = states.copy(), np.empty_like(v)
    delta_rule_recurrent(q, k, v, g, beta, starts, stops, slots, got_states, out)
    want_states = states.copy()
    for a, b, slot in zip(starts, stops, slots):
        want = delta_rule_reference(q[a:b], k[a:b], v[a:b], g[a:b], beta[a:b], want_states[slot])
        assert np.allclose(out[a:b], want, atol=1e-6)
    assert np.allclose(got_states, want_states, atol=1e-6)


@pytest.mark.parametrize("n", [1, 50, 64, 150])  # inside one chunk, exactly one, several + part
@pytest.mark.parametrize("a_max", [8.0, 100.0])  # 100: whole chunks decay by e^-1000 and more
def test_chunked_matches_twin(n, a_max):
    q, k, v, g, beta, state = inputs(n, 2, 4, 32, seed=n, a_max=a_max)
    want_state = state.copy()
    want = delta_rule_reference(q, k, v, g, beta, want_state)
    got = delta_rule_chunked(q, k, v, g, beta, state, np.empty_like(v))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(state - want_state).max() <= 1e-5 * np.abs(want_state).max()


def test_chunked_real_head_size():
    q, k, v, g, beta, state = inputs(80, 16, 16, 128, seed=3)
    want_state = state.copy()
    want = delta_rule_reference(q, k, v, g, beta, want_state)
    got = delta_rule_chunked(q, k, v, g, beta, state, np.empty_like(v))
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert np.abs(state - want_state).max() <= 1e-5 * np.abs(want_state).max()


def test_unit_lower_inverse_matches_twin():
    a = (0.3 * np.random.default_rng(0).standard_normal((6, 64, 64))).astype(np.float32)
    got, want = unit_lower_inverse(a), unit_lower_inverse_reference(a)
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()
    assert np.array_equal(np.triu(got[0], 1), np.zeros((64, 64), np.float32))


def test_conv1d_matches_twin():
    """Segments shorter and longer than the kernel, two sequences, the state rolled in place."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((12, 40)).astype(np.float32)
    wt = rng.standard_normal((4, 40)).astype(np.float32)
    states = rng.standard_normal((2, 3, 40)).astype(np.float32)
    starts, stops, slots = np.array([0, 1, 3, 4]), np.array([1, 3, 4, 12]), np.array([1, 0, 1, 0])
    want_states = states.copy()
    want = conv1d_reference(x, starts, stops, slots, want_states, wt)
    got = conv1d(x, starts, stops, slots, states, wt, np.empty_like(x))
    assert np.allclose(got, want, rtol=1e-6, atol=1e-6)
    assert np.array_equal(states, want_states)
