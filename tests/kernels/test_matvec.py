"""matvec kernels and the row decoders against their numpy twin `dequantize(W) @ x` (float64)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from llamacpy.format.constants import GGML_QUANT_SIZES, GGMLType
from llamacpy.kernels import dequantize_rows, get_threads, matvec, set_threads
from llamacpy.kernels.repack import repack_as_q8_0, repack_as_q8_0_reference
from llamacpy.ops import Linear, get_rows
from llamacpy.quants import dequantize

ALL_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
             "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
# byte offsets of the fp16 scale/min fields in each block (ggml-common.h block_* structs)
FP16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
               "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
               "IQ4_NL": [0], "IQ4_XS": [0]}
REL_TOL = 1e-4  # max |y - ref| per row, relative to (|W| @ |x|) of that row


def synth_blocks(name: str, rows: int, n: int, seed: int = 0) -> np.ndarray:
    """uint8 [rows, row_bytes]: random quant bytes with sane fp16 scales (small, positive)."""
    rng = np.random.default_rng(seed)
    if name in ("F32", "F16"):
        x = rng.standard_normal((rows, n))
        return x.astype("<f4" if name == "F32" else "<f2").view(np.uint8)
    if name == "BF16":
        bits = rng.standard_normal((rows, n)).astype(np.float32).view(np.uint32) >> 16
        return bits.astype("<u2").view(np.uint8)
    block, size = GGML_QUANT_SIZES[GGMLType[name]]
    b = rng.integers(0, 256, (rows, n // block, size), dtype=np.uint8)
    for f in FP16_FIELDS[name]:
        scale = rng.uniform(1e-3, 5e-2, (rows, n // block)).astype("<f2")
        b[:, :, f : f + 2] = scale.view(np.uint8).reshape(rows, n // block, 2)
    return b.reshape(rows, -1)


def reference(w: np.ndarray, name: str, n: int) -> np.ndarray:
    """The numpy twin: float64 [rows, n]."""
    return dequantize(w, GGMLType[name], (n, w.shape[0])).astype(np.float64)


def assert_close(y: np.ndarray, W: np.ndarray, x: np.ndarray) -> None:
    ref = W @ x.astype(np.float64).T
    bound = REL_TOL * (np.abs(W) @ np.abs(x.astype(np.float64)).T) + 1e-30
    err = np.abs(y.T.astype(np.float64) - ref) / bound
    assert err.max() <= 1.0, f"error {err.max() * REL_TOL:.2e} of |W||x| (worst row {err.argmax()})"


def synth_shape(name: str) -> tuple[int, int]:
    """An odd row count; a row length that is 2 super-blocks, or not a multiple of 32 for floats."""
    return (37, 67) if name in ("F32", "F16", "BF16") else (37, 512)


@pytest.fixture
def threads():
    before = get_threads()
    yield set_threads
    set_threads(before)


@pytest.mark.parametrize("name", ALL_TYPES)
def test_matvec_synthetic(name, threads):
    rows, n = synth_shape(name)
    w = synth_blocks(name, rows, n)
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    W = reference(w, name, n)
    for t in (1, 2):
        threads(t)
        assert_close(matvec(w, GGMLType[name], x), W, x)


@pytest.mark.parametrize("name", ALL_TYPES)
def test_dequantize_rows_bit_exact(name):
    """The numba decoders give exactly the numpy twin's floats (get_rows, matmul scratch)."""
    rows, n = synth_shape(name)
    w = synth_blocks(name, rows, n, seed=2)
    ids = np.array([5, 0, 36, 5, 17])
    got = dequantize_rows(w, GGMLType[name], ids)
    assert np.array_equal(got, reference(w, name, n)[ids].astype(np.float32))


def test_dequantize_rows_rejects_bad_ids():
    w = synth_blocks("Q8_0", 4, 64)
    with pytest.raises(IndexError):
        dequantize_rows(w, GGMLType.Q8_0, [4])
    with pytest.raises(IndexError):
        dequantize_rows(w, GGMLType.Q8_0, [-1])


def test_matvec_rejects_wrong_length():
    with pytest.raises(ValueError, match="expected"):
        matvec(synth_blocks("Q4_0", 3, 64), GGMLType.Q4_0, np.zeros(32, np.float32))


@pytest.mark.parametrize("name", ["Q5_0", "IQ4_NL"])
def test_repack_as_q8_0_is_exact(name):
    w = synth_blocks(name, 9, 256, seed=3)
    repacked = repack_as_q8_0(w, GGMLType[name])
    assert np.array_equal(repacked, repack_as_q8_0_reference(w, GGMLType[name]))
    assert np.array_equal(reference(w, name, 256), reference(repacked, "Q8_0", 256))
    assert np.array_equal(repack_as_q8_0(w[:, :0], GGMLType[name]), np.empty((9, 0), np.uint8))
    with pytest.raises(ValueError, match="cannot repack"):
        repack_as_q8_0(w, GGMLType.Q4_0)


@pytest.mark.slow
def test_repack_as_q8_0_matches_numpy_twin_on_real_tensors(real_models):
    """The numba repack is byte-identical to the numpy one on every Q5_0 matrix of Qwen2.5-Coder
    (its token embedding too, in row slices)."""
    f = real_models["qwen2.5-coder-0.5b"]
    for t in f.tensors.values():
        if t.ggml_type == GGMLType.Q5_0 and len(t.ne) == 2:
            w = t.blocks()[:4096]
            assert np.array_equal(repack_as_q8_0(w, t.ggml_type),
                                  repack_as_q8_0_reference(w, t.ggml_type)), t.name


def real_matrices(real_models, max_rows: int = 1024):
    """(label, tensor, row slice) for the first 2-D tensor of each type in each catalogue model."""
    out = []
    for model, f in real_models.items():
        seen = set()
        for t in f.tensors.values():
            if len(t.ne) == 2 and t.ggml_type not in seen:
                seen.add(t.ggml_type)
                out.append((f"{model}:{t.name}", t, slice(0, min(max_rows, t.ne[1]))))
    return out


@pytest.mark.slow
def test_matvec_real_tensors(real_models, threads):
    """Every weight type the catalogue models carry (Q8_0, Q5_0, Q4_K, Q6_K, Q4_1, ...)."""
    types = set()
    for label, t, rows in real_matrices(real_models):
        w = t.blocks()[rows]
        n = t.ne[0]
        W = reference(w, t.ggml_type.name, n)
        x = np.random.default_rng(4).standard_normal(n).astype(np.float32)
        for k in (1, 2):
            threads(k)
            assert_close(matvec(w, t.ggml_type, x), W, x)
        types.add(t.ggml_type.name)
    assert {"Q8_0", "Q5_0", "Q4_K", "Q6_K", "Q4_1"} <= types


@pytest.mark.slow
def test_linear_and_get_rows_on_real_model(real_models):
    f = real_models["qwen2.5-coder-0.5b"]
    lin = Linear(f.tensor("blk.0.ffn_gate.weight"))  # Q5_0, 896 -> 4864
    assert (lin.in_features, lin.out_features) == (896, 4864)
    W = reference(lin.weight, lin.ggml_type.name, 896)
    x = np.random.default_rng(5).standard_normal((2, 3, 896)).astype(np.float32)
    y = lin(x)
    assert y.shape == (2, 3, 4864)
    assert_close(y.reshape(6, -1), W, x.reshape(6, -1))
    assert_close(lin(x[0, 0]), W, x[0, 0])
    repacked = Linear(f.tensor("blk.0.ffn_gate.weight"), repack_q8_0=True)
    assert repacked.ggml_type == GGMLType.Q8_0
    assert_close(repacked(x[0, 0]), W, x[0, 0])
    emb = f.tensor("token_embd.weight")
    ids = [0, 151935, 42, 42]
    ref = dequantize(emb.blocks()[ids], emb.ggml_type, (emb.ne[0], len(ids)))
    assert np.array_equal(get_rows(emb, ids), ref)


FIRST_CALL = textwrap.dedent("""
    import sys
    import numpy as np
    from numba.core.registry import CPUDispatcher
    from llamacpy.format.constants import GGMLType
    from llamacpy.kernels import matvec
    w = np.zeros((64, 144 * 4), np.uint8)
    matvec(w, GGMLType.Q4_K, np.ones(1024, np.float32))
    kernels = {id(d): d for m in list(sys.modules.values())
               if getattr(m, "__name__", "").startswith("llamacpy.kernels")
               for d in vars(m).values() if isinstance(d, CPUDispatcher)}.values()
    hits = sum(sum(d.stats.cache_hits.values()) for d in kernels)
    misses = sum(sum(d.stats.cache_misses.values()) for d in kernels)
    print(hits, misses)
""")


@pytest.mark.slow
def test_second_process_loads_kernels_from_cache():
    """A fresh process finds the compiled kernels in numba's cache: its first matvec compiles
    nothing (counted by numba's dispatcher stats, not timed: the machine may be busy)."""
    env = dict(os.environ)
    run = lambda: subprocess.run([sys.executable, "-c", FIRST_CALL], capture_output=True,
                                 text=True, env=env, check=True).stdout.split()
    run()  # compiles into the cache unless an earlier run did
    hits, misses = map(int, run())
    assert hits > 0 and misses == 0, f"cache hits {hits}, misses (compiled) {misses}"
