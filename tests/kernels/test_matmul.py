"""matmul (small-batch kernels and dequantize + sgemm tiles) against `X @ dequantize(W)^T`."""

from __future__ import annotations

import numpy as np
import pytest

import importlib

from llamacpy.format.constants import GGMLType
from llamacpy.kernels import matmul

from .test_matvec import (ALL_TYPES, assert_close, real_matrices, reference, synth_blocks,
                          synth_shape)

mm = importlib.import_module("llamacpy.kernels.matmul")  # the module: the package re-exports
# the function `matmul` under the same name


@pytest.mark.parametrize("name", ALL_TYPES)
@pytest.mark.parametrize("n_tokens", [2, 5, mm.SMALL_BATCH + 1, 33])
def test_matmul_synthetic(name, n_tokens):
    rows, n = synth_shape(name)
    w = synth_blocks(name, rows, n)
    X = np.random.default_rng(n_tokens).standard_normal((n_tokens, n)).astype(np.float32)
    Y = matmul(w, GGMLType[name], X)
    assert Y.shape == (n_tokens, rows)
    assert_close(Y, reference(w, name, n), X)


@pytest.mark.parametrize("name", ["F16", "BF16", "Q5_1"])
@pytest.mark.parametrize("n", [67, 203, 512])
def test_float_rows_every_few_token_count(name, n):
    """The float-row kernels' passes of four, two and one token, with and without a tail past
    the last full 8, 16 or 32 weights (a Q5_1 row is whole blocks: no tail). F16 and BF16 rows
    of whole vectors (512) take kernels/float_tiles.py: every token count 1 to 4 after whole
    groups of 4, and row groups cut short at each thread's end (29 rows in two parts)."""
    if name == "Q5_1" and n % 32:
        pytest.skip("a Q5_1 row is whole blocks of 32")
    rows = 29
    w = synth_blocks(name, rows, n)
    ref = reference(w, name, n)
    for n_tokens in range(1, 9):
        X = np.random.default_rng(n_tokens).standard_normal((n_tokens, n)).astype(np.float32)
        Y = np.empty((n_tokens, rows), np.float32)
        mm.MULTI_KERNELS[GGMLType[name]](mm.weight_view(w, GGMLType[name]), X, Y, 2)
        assert_close(Y, ref, X)


@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_float_tiles_leave_strided_outputs_to_float_rows(name):
    """A column-strided Y (a view) takes the float rows: the tiles store whole rows of Y."""
    w = synth_blocks(name, 20, 512, seed=3)
    X = np.random.default_rng(4).standard_normal((3, 512)).astype(np.float32)
    wide = np.full((3, 40), np.nan, np.float32)
    mm.MULTI_KERNELS[GGMLType[name]](mm.weight_view(w, GGMLType[name]), X, wide[:, ::2], 1)
    assert_close(wide[:, ::2], reference(w, name, 512), X)
    assert np.isnan(wide[:, 1::2]).all()


def test_matmul_several_tiles(monkeypatch):
    """Rows spread over several scratch tiles, the last one partial."""
    monkeypatch.setattr(mm, "SCRATCH_BYTES", 64 * 512 * 4)  # 64-row tiles
    w = synth_blocks("Q4_K", 150, 512, seed=7)
    X = np.random.default_rng(8).standard_normal((20, 512)).astype(np.float32)
    out = np.full((20, 150), np.nan, np.float32)
    assert matmul(w, GGMLType.Q4_K, X, out) is out
    assert_close(out, reference(w, "Q4_K", 512), X)


def test_matmul_one_token_is_matvec():
    w = synth_blocks("Q6_K", 5, 256)
    X = np.random.default_rng(9).standard_normal((1, 256)).astype(np.float32)
    assert_close(matmul(w, GGMLType.Q6_K, X), reference(w, "Q6_K", 256), X)


@pytest.mark.skipif(not mm.HAS_AVX512BW, reason="the byte-pair decode kernels need AVX-512BW")
@pytest.mark.parametrize("n_tokens", [2, 4])
def test_few_token_q4_k_quantizes_as_one_token_decode(n_tokens):
    """Q4_K rows of a few tokens give each token's one-row decode result to float rounding: both
    quantize the activations with one scale per 256. Heavy-tailed activations make the int16
    steps coarse, so a scale per 32 against one per 256 differs by ~1e-4 here (the kernels'
    errors against the exact product are test_matmul_synthetic's)."""
    from llamacpy.kernels.matvec import MATVEC_KERNELS

    w = synth_blocks("Q4_K", 64, 1536, seed=3)
    rng = np.random.default_rng(4)
    X = (rng.standard_normal((n_tokens, 1536)) * np.exp(2 * rng.standard_normal((n_tokens, 1536))))
    X = X.astype(np.float32)
    Y = np.empty((n_tokens, 64), np.float32)
    mm.multi_kernel(GGMLType.Q4_K, n_tokens)(mm.weight_view(w, GGMLType.Q4_K), X, Y,
                                             mm.row_chunks(64))
    for t in range(n_tokens):
        y = np.empty(64, np.float32)
        MATVEC_KERNELS[GGMLType.Q4_K](w, X[t].copy(), y)
        assert np.abs(Y[t] - y).max() < 1e-6 * np.abs(y).max()


def test_matmul_rejects_wrong_shape():
    with pytest.raises(ValueError, match="expected"):
        matmul(synth_blocks("Q8_0", 3, 64), GGMLType.Q8_0, np.zeros((2, 32), np.float32))


@pytest.mark.slow
@pytest.mark.parametrize("n_tokens", [3, 40])
def test_matmul_real_tensors(real_models, n_tokens):
    for label, t, rows in real_matrices(real_models, max_rows=512):
        w, n = t.blocks()[rows], t.ne[0]
        X = np.random.default_rng(10).standard_normal((n_tokens, n)).astype(np.float32)
        assert_close(matmul(w, t.ggml_type, X), reference(w, t.ggml_type.name, n), X)
