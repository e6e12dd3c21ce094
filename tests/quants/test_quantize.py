"""Quantization equals llama.cpp's `ggml_quantize_chunk(type, ..., imatrix=NULL)` byte for byte.

The golden file (tests/reference/make_quant_golden.py) carries its own inputs, so the golden test
runs anywhere; the live tests call libggml directly and skip where llama-cpp-python is missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.format import GGMLType
from llamacpy.quants import dequantize, get_quant, kquantize, quantize
from tests.conftest import REAL_MODELS
from tests.reference.ggml_lib import find_libggml, ggml_quantize
from tests.reference.make_quant_golden import TYPES, dequantized_rows

GOLDEN = np.load(Path(__file__).parent.parent / "golden" / "quantize_golden.npz")
F = np.float32

needs_libggml = pytest.mark.skipif(find_libggml() is None,
                                   reason="libggml-base.so (llama-cpp-python) not installed")


def assert_same_rows(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    bad = np.nonzero((ours != ref).any(axis=1))[0]
    assert bad.size == 0, f"{what}: {bad.size} of {len(ref)} rows differ, first {bad[:8]}"


def check_against_libggml(x: np.ndarray, name: str, what: str) -> None:
    t = GGMLType[name]
    assert_same_rows(quantize(x, t), ggml_quantize(x, t), f"{name} {what}")


@pytest.mark.parametrize("name", TYPES)
def test_golden(name):
    q = get_quant(GGMLType[name])
    keys = [k for k in GOLDEN.files if k.rsplit("_", 1)[0] == name]
    assert keys, f"no golden data for {name}"
    for key in keys:
        x = GOLDEN["x" + key.rsplit("_", 1)[1]]
        assert_same_rows(quantize(x, q.ggml_type), GOLDEN[key], key)


def mixed_rows(rng: np.random.Generator, n_rows: int, length: int) -> np.ndarray:
    """Rows with per-row scales over 5 decades, heavy tails, sparse and all-zero rows."""
    x = rng.standard_normal((n_rows, length)) * 10.0 ** rng.uniform(-3, 2, (n_rows, 1))
    x[::7] = rng.standard_t(1.5, (len(x[::7]), length))
    x[1::11] *= rng.random((len(x[1::11]), length)) < 0.05
    x[2::97] = 0
    x[3::13] = np.abs(x[3::13])
    return x.astype(np.float32)


@pytest.mark.llamacpp
@needs_libggml
@pytest.mark.parametrize("seed, length", [(1, 256), (2, 512), (3, 1120), (4, 576)])
@pytest.mark.parametrize("name", TYPES)
def test_random_rows_match_libggml(name, seed, length):
    if length % get_quant(GGMLType[name]).block_size:
        length = 1024
    rng = np.random.default_rng(seed)
    check_against_libggml(mixed_rows(rng, 2**20 // length, length), name, f"seed {seed}")


@pytest.mark.llamacpp
@needs_libggml
@pytest.mark.parametrize("model_name", REAL_MODELS)
def test_real_tensors_match_libggml(model_name, real_models):
    model = real_models[model_name]
    layer = next(n for n in model.tensors if n.startswith("blk.1.") and n.endswith("down.weight"))
    for tensor, n_rows in [("token_embd.weight", 2048), (layer, 512)]:
        x = dequantized_rows(model, tensor, 0, n_rows)
        for name in TYPES:
            block = get_quant(GGMLType[name]).block_size
            rows = x if x.shape[1] % block == 0 else x.reshape(-1, 256)
            check_against_libggml(rows, name, f"{model_name} {tensor}")


# relative RMS error of dequantize(quantize(x)) on normal data, about 1.3x what llama.cpp gets
ROUND_TRIP_ERROR = {"F16": 3e-4, "BF16": 2.2e-3, "Q4_0": 0.11, "Q4_1": 0.1, "Q5_0": 0.056,
                    "Q5_1": 0.05, "Q8_0": 0.007, "Q2_K": 0.38, "Q3_K": 0.2, "Q4_K": 0.093,
                    "Q5_K": 0.047, "Q6_K": 0.023, "IQ4_NL": 0.1, "IQ4_XS": 0.1}


@pytest.mark.parametrize("name", TYPES)
def test_round_trip_error(name):
    t = GGMLType[name]
    x = np.random.default_rng(7).standard_normal((64, 512)).astype(np.float32)
    y = dequantize(quantize(x, t), t, (512, 64))
    assert np.sqrt(np.mean((y - x) ** 2) / np.mean(x**2)) < ROUND_TRIP_ERROR[name]


def groups(n_groups: int, n: int, seed: int) -> np.ndarray:
    """float32 [n, n_groups] test columns, a few of them constant or all zero."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n_groups)) * 10.0 ** rng.uniform(-3, 1, n_groups)
    X[:, 0] = 0
    X[:, 1] = 0.25
    X[:, 2] = -0.25
    X[:, 3] = np.abs(X[:, 3])
    return X.astype(np.float32)


@pytest.mark.parametrize("nmax, rmin, nstep, use_mad, n",
                         [(3, -0.5, 15, True, 16), (15, -1.0, 20, False, 32),
                          (31, -0.5, 15, False, 32)])
def test_make_qkx2_quants_lanes_matches_plain_twin(nmax, rmin, nstep, use_mad, n):
    X = groups(200, n, nmax)
    W = np.abs(X) + np.sqrt(np.mean(X**2, axis=0))
    L = np.empty_like(X)
    scales, mins = np.empty(X.shape[1], F), np.empty(X.shape[1], F)
    kquantize.make_qkx2_quants_lanes(nmax, X, W, L, F(rmin), F(0.1), nstep, use_mad, scales, mins)
    Lk, Laux = np.empty(n, np.uint8), np.empty(n, np.uint8)
    for k in range(X.shape[1]):
        x, w = np.ascontiguousarray(X[:, k]), np.ascontiguousarray(W[:, k])
        s, m = kquantize.make_qkx2_quants(nmax, x, w, Lk, Laux, F(rmin), F(0.1), nstep, use_mad)
        assert (F(s), F(m)) == (scales[k], mins[k]) and np.array_equal(Lk, L[:, k]), f"column {k}"


def test_make_qx_quants_lanes_matches_plain_twin():
    X = groups(200, 16, 5)
    L = np.empty_like(X)
    scales = np.empty(X.shape[1], F)
    kquantize.make_qx_quants_lanes(32, X, L, scales)
    Lk = np.empty(16, np.int8)
    for k in range(X.shape[1]):
        s = kquantize.make_qx_quants_rmse1(32, np.ascontiguousarray(X[:, k]), Lk)
        assert F(s) == scales[k] and np.array_equal(Lk, L[:, k]), f"column {k}"


def test_iq4_nearest_matches_best_index_int8():
    levels = kquantize.IQ4_VALUES
    mids = (levels[1:] + levels[:-1]) / 2
    xs = np.concatenate([levels, mids, np.nextafter(mids, -np.inf), np.nextafter(mids, np.inf),
                         np.linspace(-140, 130, 2001), [-1e30, 1e30, 0.0, -0.0]]).astype(F)
    for x in xs:
        assert kquantize._iq4_nearest(x)[0] == kquantize.best_index_int8(levels, x), x
