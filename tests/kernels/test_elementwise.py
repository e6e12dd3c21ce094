"""Rope and activation kernels (kernels/elementwise.py) against their numpy twins in ops/."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.ops.activations import (gelu_tanh, gelu_tanh_reference, silu, silu_reference,
                                       silu_times)
from llamacpy.ops.rope import (ROPE_NEOX, ROPE_NORM, RopeConfig, apply_rope, apply_rope_reference,
                               rope_cos_sin)


@pytest.mark.parametrize("mode", [ROPE_NEOX, ROPE_NORM])
@pytest.mark.parametrize("n_rot", [64, 32])  # all of a 64-wide head, or only its first half
def test_rope_bit_identical_to_numpy_twin(mode, n_rot):
    rng = np.random.default_rng(n_rot)
    x = rng.standard_normal((3, 5, 64)).astype(np.float32)
    cos, sin = rope_cos_sin(RopeConfig(n_rot=n_rot, freq_base=10000.0, mode=mode),
                            np.array([0, 7, 30000]))
    ref = apply_rope_reference(x.copy(), cos, sin, mode)
    got = x.copy()
    assert apply_rope(got, cos, sin, mode) is got  # in place
    assert np.array_equal(got, ref)


def exact(name: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 values in the cancellation-free logistic form x / (1 + exp(-z)), and z."""
    x = x.astype(np.float64)
    z = x if name == "silu" else 2 * np.sqrt(2 / np.pi) * x * (1 + 0.044715 * x * x)
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-z)), z


@pytest.mark.parametrize("name, fn, twin", [("silu", silu, silu_reference),
                                            ("gelu", gelu_tanh, gelu_tanh_reference)])
def test_activations(name, fn, twin):
    x = np.concatenate([np.linspace(-30, 30, 4001, dtype=np.float32),
                        np.array([-200, 200, 0, -0.0, 1e-30, np.inf, -np.inf], np.float32)])
    x = x.reshape(1, -1)[:, :-1]  # 2-D and a length that is not a multiple of 8
    got, (ref, z) = fn(x), exact(name, x)
    assert got.shape == x.shape and got.dtype == np.float32
    finite = np.isfinite(ref)
    ulp = np.spacing(np.abs(ref[finite]).astype(np.float32)).astype(np.float64)
    # exp(-z) inherits z's float32 rounding times |z|; below 1e-30 float32 runs out of range
    bound = np.maximum((4 + 4 * np.abs(z[finite])) * ulp, 1e-30)
    assert (np.abs(got[finite] - ref[finite]) <= bound).all()
    assert np.array_equal(got[~finite], ref[~finite].astype(np.float32), equal_nan=True)
    # the twin agrees wherever its own float32 rounding does not dominate (GELU's 1 + tanh)
    assert np.allclose(got, twin(x), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("name, fn, kind", [("silu", silu, 0), ("gelu", gelu_tanh, 1)])
def test_gated_product_is_the_activation_times_up(name, fn, kind):
    """gated_1d(g, u) is act(g) * u with the activation's own float operations, bit for bit, on
    a length whose tail is not a multiple of 8, and within the activation's bound of float64."""
    from llamacpy.kernels.elementwise import gated_1d

    rng = np.random.default_rng(5)
    g = (rng.standard_normal(1003) * 6).astype(np.float32)
    u = rng.standard_normal(1003).astype(np.float32)
    got = g.copy()
    gated_1d(got, u, kind)
    assert np.array_equal(got, fn(g) * u)
    ref = exact(name, g)[0] * u.astype(np.float64)
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_silu_in_place_and_silu_times_match_the_out_of_place_forms():
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((7, 130)) * 6).astype(np.float32)
    y = rng.standard_normal((7, 130)).astype(np.float32)
    expected = silu(x)
    assert np.allclose(expected, silu_reference(x), rtol=1e-5, atol=1e-6)
    same = x.copy()
    assert silu(same, out=same) is not None and np.array_equal(same, expected)  # in place
    z = x.copy()
    assert np.array_equal(silu_times(z, y), expected * y) and np.array_equal(z, expected * y)
