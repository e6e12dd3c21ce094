"""Attention kernels (SIMD decode kernel, its scalar fallback, the BLAS path) against the float64
numpy twin `attend_reference`, and the vectorised exp they use against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from llamacpy.kernels import get_threads, set_threads, simd
from llamacpy.kernels.attention import (attend, attend_cached, attend_cached_scalar,
                                        attend_prompt, attend_reference, attend_seqs)
from llamacpy.kernels.dequant import call_kernel

# (n_head, n_head_kv, d_k, d_v): Gemma 3 270M, Qwen2.5 0.5B, SmolLM2 135M (four query heads per
# pass, the last four partial for the latter two); two query heads per KV head, MHA and values
# not a multiple of 16 wide (one head per pass); a head size not a multiple of 8 (scalar kernel)
SHAPES = [(4, 1, 256, 256), (14, 2, 64, 64), (9, 3, 64, 64), (4, 2, 64, 64), (2, 2, 40, 24),
          (8, 2, 24, 24), (2, 1, 12, 20)]


def cache(n_ctx, n_kv, d, dtype, rng):
    x = rng.standard_normal((n_ctx, n_kv, d)).astype(np.float32)
    return x.astype(np.float16).view(np.uint16) if dtype == "f16" else x


def run(kernel, q, k, v, pos, n_swa, scale, *extra):
    out = np.full((q.shape[0], q.shape[1], v.shape[2]), np.nan, np.float32)
    if kernel is attend_prompt:
        attend_prompt(q, k, v, pos, n_swa, scale, out)
    else:
        call_kernel(kernel, q, k, v, pos, n_swa, np.float32(scale), out, *extra)
    return out


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", ["f16", "f32"])
@pytest.mark.parametrize("n_swa", [0, 5])
def test_kernels_match_reference(shape, dtype, n_swa):
    n_head, n_kv, d_k, d_v = shape
    rng = np.random.default_rng(d_k + n_swa)
    k, v = cache(40, n_kv, d_k, dtype, rng), cache(40, n_kv, d_v, dtype, rng)
    # a token seeing 1 key, others seeing fewer and more than 8 (the eight-key passes' tails)
    pos = np.array([0, 6, 17, 38], np.int32)
    q = 3 * rng.standard_normal((len(pos), n_head, d_k)).astype(np.float32)
    scale = 1 / np.sqrt(d_k)
    ref = attend_reference(q, k, v, pos, n_swa, scale)
    runs = [(attend_cached_scalar,), (attend_prompt,)]
    if d_k % 8 == 0 and d_v % 8 == 0:  # by KV head (four query heads at a time), by query head
        runs += [(attend_cached, False), (attend_cached, True)]
    before = get_threads()
    try:
        for threads in (1, 2):
            set_threads(threads)
            for kernel, *extra in runs:
                got = run(kernel, q, k, v, pos, n_swa, scale, *extra)
                assert np.abs(got - ref).max() < 2e-6 * np.abs(ref).max() + 1e-6, (kernel, extra)
    finally:
        set_threads(before)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("n_swa", [0, 5])
def test_one_row_per_sequence_matches_each_alone(shape, n_swa):
    """attend_seqs (the server's decode step: one query row in each of several sequences) gives
    each row what the reference gives it over its own sequence's cache."""
    n_head, n_kv, d_k, d_v = shape
    rng = np.random.default_rng(d_k + 7 * n_swa)
    k_all = np.stack([cache(30, n_kv, d_k, "f16", rng) for _ in range(4)])
    v_all = np.stack([cache(30, n_kv, d_v, "f16", rng) for _ in range(4)])
    seqs, pos = np.array([2, 0, 3], np.int32), np.array([29, 0, 11], np.int32)
    q = 3 * rng.standard_normal((3, n_head, d_k)).astype(np.float32)
    out = np.full((3, n_head, d_v), np.nan, np.float32)
    if not attend_seqs(q, k_all, v_all, seqs, pos, n_swa, 0.125, out):
        assert d_k % 8 or d_v % 8  # only the scalar kernel's head sizes are refused
        return
    for i, s in enumerate(seqs):
        ref = attend_reference(q[i : i + 1], k_all[s], v_all[s], pos[i : i + 1], n_swa, 0.125)
        assert np.abs(out[i] - ref[0]).max() < 2e-6 * np.abs(ref).max() + 1e-6


def test_dispatch_covers_all_head_sizes():
    rng = np.random.default_rng(0)
    for n_head, n_kv, d_k, d_v in SHAPES:
        k, v = cache(20, n_kv, d_k, "f16", rng), cache(20, n_kv, d_v, "f16", rng)
        pos = np.array([19], np.int32)
        q = rng.standard_normal((1, n_head, d_k)).astype(np.float32)
        out = np.empty((1, n_head, d_v), np.float32)
        attend(q, k, v, pos, 0, 0.1, out)
        assert np.allclose(out, attend_reference(q, k, v, pos, 0, 0.1), atol=1e-6)


def test_a_first_prompt_loads_the_one_token_kernel(monkeypatch):
    """attend() sends a process's first prompt's first row through the decode kernel as well, so
    that kernel loads before the weights are resident (kernels/compiler_pages.py), once per cache
    type and thread count; the prompt's result is the BLAS path's alone, bit for bit."""
    from llamacpy.kernels import attention

    rng = np.random.default_rng(3)
    k, v = cache(40, 2, 64, "f16", rng), cache(40, 2, 64, "f16", rng)
    pos = np.arange(20, 40, dtype=np.int32)
    q = rng.standard_normal((20, 14, 64)).astype(np.float32)
    rows, real = [], attention.attend_cached
    monkeypatch.setattr(attention, "_one_token_loaded", set())
    monkeypatch.setattr(attention, "attend_cached",
                        lambda q, *args: rows.append(len(q)) or real(q, *args))
    out = attend(q, k, v, pos, 0, 0.125, np.full((20, 14, 64), np.nan, np.float32))
    assert rows == [1]
    assert np.array_equal(out, run(attend_prompt, q, k, v, pos, 0, 0.125))
    attend(q, k, v, pos, 0, 0.125, out)
    assert rows == [1]


@njit(cache=False)
def _exp(x, out):
    for i in range(0, x.shape[0], 8):
        e = simd.f32x8_exp(simd.load_f32(x, i))
        for k in range(8):
            out[i + k] = simd.lane(e, k)


def test_vector_exp():
    x = np.concatenate([np.linspace(-87.3, 88.3, 200_000, dtype=np.float32),
                        np.array([-1e4, -88, 0, -0.0, 89, 1e4, np.inf, -np.inf, np.nan, 1e-30,
                                  -1e-30, 1, 2, -2, 10, -10], np.float32)])
    x = np.concatenate([x, np.zeros(-len(x) % 8, np.float32)])
    out = np.empty_like(x)
    _exp(x, out)
    with np.errstate(over="ignore"):
        ref = np.exp(x.astype(np.float64))
    normal = (x >= -87.3) & (x <= 88.3)
    ulp = np.spacing(ref[normal].astype(np.float32)).astype(np.float64)
    assert (np.abs(out[normal] - ref[normal]) <= 2 * ulp).all()
    assert (out[x < -87.3] == 0).all() and (out[x > 88.72] == np.inf).all()
    assert np.isnan(out[np.isnan(x)]).all()
