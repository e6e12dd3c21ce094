"""The few-token K-quant kernels (kernels/kquant_tokens.py) against the one-token kernels they
extend, and matmul()'s choice of them."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from llamacpy.format.constants import GGMLType
from llamacpy.kernels import kquant_tokens, simd

from .test_integer_matvec import activations, representable_byte_pair_activations
from .test_matvec import reference, synth_blocks

mv = importlib.import_module("llamacpy.kernels.matvec")
mm = importlib.import_module("llamacpy.kernels.matmul")
KERNELS = {"Q4_K": (kquant_tokens.tokens_q4_k, mv.matvec_q4_k_zmm),
           "Q6_K": (kquant_tokens.tokens_q6_k, mv.matvec_q6_k_zmm)}


@pytest.mark.parametrize("name", KERNELS)
@pytest.mark.parametrize("n_tokens", [1, 2, 3, 4, 5, 6, 7, 9])
def test_each_token_is_its_one_token_decode_bit_for_bit(name, n_tokens):
    """Quads, a trailing pair and the padding of part-filled groups all give every token what the
    byte-pair matvec gives it alone (37 rows in 2 chunks: uneven chunk ends)."""
    tokens, one = KERNELS[name]
    n, rows = 768, 37
    w = synth_blocks(name, rows, n, seed=n_tokens)
    X = activations(n * n_tokens, 5 + n_tokens).reshape(n_tokens, n)
    Y = np.full((n_tokens, rows), np.nan, np.float32)
    tokens(w, X, Y, 2)
    for t in range(n_tokens):
        y = np.empty(rows, np.float32)
        one(w, X[t], y)
        assert np.array_equal(Y[t], y), t


@pytest.mark.parametrize("name", KERNELS)
def test_exact_in_representable_activations(name):
    """Against float64 W @ X of the reference dequantization, with activations that the byte
    pairs hold exactly: float32 rounding only."""
    tokens, _ = KERNELS[name]
    n, rows, T = 512, 19, 6
    w = synth_blocks(name, rows, n, seed=11)
    X = np.stack([representable_byte_pair_activations(n, 40 + t) for t in range(T)])
    Y = np.empty((T, rows), np.float32)
    tokens(w, X, Y, 1)
    W = reference(w, name, n)
    exact = X.astype(np.float64) @ W.T
    bound = np.abs(X.astype(np.float64)) @ np.abs(W).T
    assert np.all(np.abs(Y - exact) <= 2e-6 * bound)


def test_matmul_takes_them_for_a_few_tokens_where_the_cpu_has_avx512bw():
    for t, kernel in ((GGMLType.Q4_K, kquant_tokens.tokens_q4_k),
                      (GGMLType.Q6_K, kquant_tokens.tokens_q6_k)):
        picked = mm.multi_kernel(t, 2)
        assert (picked is kernel) == simd.HAS_AVX512BW, t
