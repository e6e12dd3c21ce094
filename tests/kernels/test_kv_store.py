"""The fp16 KV cache store kernels against numpy's astype(float16), bit for bit."""

from __future__ import annotations

import numpy as np

from llamacpy.memory.kv_cache import KVCache


def rows(n: int, seed: int) -> np.ndarray:
    """float32 [n, 2 heads, 40]: normal values at scales from fp16 subnormals to past its range,
    with NaN and both infinities."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2, 40)) * 10.0 ** rng.integers(-8, 6, (n, 2, 1))
    x[0, 0, :3] = [np.nan, np.inf, -np.inf]
    x[-1, 1, 5] = 65519.0  # rounds to 65504, the largest fp16; 65520 would round to inf
    return x.astype(np.float32)


def fp16_bits(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return x.astype(np.float16).view(np.uint16)


def test_store_rows_matches_numpy():
    cache = KVCache(n_layer=2, n_seq=4, n_ctx=16, n_head_kv=2, d_k=40, d_v=40)
    k, v = rows(3, 0), rows(3, 1)
    seqs, positions = np.array([2, 0, 3]), np.array([7, 0, 15])
    cache.store_rows(1, seqs, positions, k, v)
    assert np.array_equal(cache.k[1][seqs, positions], fp16_bits(k))
    assert np.array_equal(cache.v[1][seqs, positions], fp16_bits(v))
    untouched = np.ones((4, 16), bool)
    untouched[seqs, positions] = False
    assert not cache.k[1][untouched].any() and not cache.k[0].any()


def test_store_span_matches_numpy():
    cache = KVCache(n_layer=1, n_seq=2, n_ctx=16, n_head_kv=2, d_k=40, d_v=40)
    k, v = rows(5, 2), rows(5, 3)
    cache.store(0, 1, 4, k, v)
    assert np.array_equal(cache.k[0][1, 4:9], fp16_bits(k))
    assert np.array_equal(cache.v[0][1, 4:9], fp16_bits(v))
    assert not cache.k[0][0].any() and not cache.k[0][1, :4].any() and not cache.k[0][1, 9:].any()


def test_f32_cache_stores_as_is():
    cache = KVCache(1, 2, 8, 2, 40, 40, type_k="f32", type_v="f32")
    k, v = rows(2, 4), rows(2, 5)
    cache.store_rows(0, np.array([1, 0]), np.array([3, 2]), k, v)
    assert np.array_equal(cache.k[0][[1, 0], [3, 2]], k, equal_nan=True)
