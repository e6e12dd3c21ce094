"""The AVX-512 VNNI prompt kernel (kernels/vnni.py) against `X @ dequantize(W)^T` in float64:
every type it takes, row counts off the 32-row tile, token counts off the 6-token tile, rows
longer than one K chunk, and weights spread over several panels."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from llamacpy.format.constants import GGMLType
from llamacpy.kernels import vnni

from .test_matvec import assert_close, reference, synth_blocks

mm = importlib.import_module("llamacpy.kernels.matmul")
pytestmark = pytest.mark.skipif(not vnni.HAS_VNNI, reason="this CPU has no AVX-512 VNNI")
TYPES = [t.name for t in vnni.UNPACKERS]


def _run(name, rows, n, n_tok, seed=0):
    w = synth_blocks(name, rows, n, seed=seed)
    X = np.random.default_rng(seed + 1).standard_normal((n_tok, n)).astype(np.float32)
    out = np.full((n_tok, rows), np.nan, np.float32)
    vnni.vnni_matmul(w, GGMLType[name], X, out)
    assert_close(out, reference(w, name, n), X)
    return w, X, out


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("rows,n_tok", [(37, 7), (64, 30), (5, 1)])
def test_types_and_tile_edges(name, rows, n_tok):
    _run(name, rows, 512, n_tok)


@pytest.mark.parametrize("name", ["Q4_K", "Q6_K", "Q8_0"])
def test_rows_longer_than_a_k_chunk(name):
    _run(name, 40, 3 * vnni.KC + 256, 13)  # three full chunks and a partial one


def test_several_panels_the_last_partial(monkeypatch):
    monkeypatch.setattr(vnni, "PANEL_BYTES", 2 * 512 * 64)  # 64-row panels
    _run("Q4_K", 150, 512, 9)


def test_activation_outliers():
    """One huge activation per block does not swamp the others' precision beyond int16's."""
    w = synth_blocks("Q6_K", 33, 512, seed=3)
    X = np.random.default_rng(4).standard_normal((12, 512)).astype(np.float32)
    X[:, ::32] *= 1000
    out = np.empty((12, 33), np.float32)
    vnni.vnni_matmul(w, GGMLType.Q6_K, X, out)
    assert_close(out, reference(w, "Q6_K", 512), X)


def test_matmul_takes_this_path_for_prompts():
    if not vnni.vnni_enabled():
        pytest.skip("LLAMACPY_VNNI=0")
    w, X, out = _run("Q4_K", 48, 512, 40)
    np.testing.assert_array_equal(mm.matmul(w, GGMLType.Q4_K, X), out)
