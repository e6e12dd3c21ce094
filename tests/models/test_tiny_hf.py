"""Tiny random-weight transformers models of every architecture, converted by llama.cpp's
convert_hf_to_gguf.py, against transformers' float32 logits (tests/golden/tiny_hf, made by
tests/reference/tiny_hf/make_tiny_models.py; no torch needed here).

Every position must agree to 1e-3 in every decode mode: the whole sequence as one batch, one token
at a time, and micro-batches smaller than the sequence. That holds in float32 throughout, so
`test_matches_transformers` runs the engine with an f32 KV cache (llama.cpp's -ctk f32 -ctv f32).
The default fp16 cache itself moves these logits by 1e-3 to 4e-3, and one cached value rounding the
other way than in transformers moves them by up to ~2e-3, so the default engine is compared with
transformers run with K and V rounded to fp16, at a coarser bound.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.memory.batch import Batch
from llamacpy.engine.context import Context
from llamacpy.format import GGUFError, TensorToWrite, open_gguf, write_gguf
from llamacpy.models import load_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tiny_hf"
MODELS = ["llama", "llama-rope-llama3", "llama-rope-linear", "qwen2", "qwen3", "gemma3"]
TOL = 1e-3  # max |ours - transformers| over every logit, float32 weights and cache
# fp16 K/V: a value that rounds differently here and in transformers (their float32 K and V
# differ in the last bits) moves a logit by ~2^-11 of its size; measured with 1-ulp noise on
# every matmul: up to 2.1e-3. Masking, position or rope errors move them by 0.4 to 5.
FP16_CACHE_TOL = 1e-2


@pytest.fixture(scope="module", params=MODELS)
def tiny(request):
    """(name, model, tokens int32 [n], reference npz)."""
    g = open_gguf(GOLDEN / f"{request.param}.gguf")
    ref = np.load(GOLDEN / f"{request.param}.npz")
    yield request.param, load_model(g), ref["tokens"], ref
    g.close()


def decode_all(model, tokens: np.ndarray, kv: str, n_ubatch: int = 512) -> np.ndarray:
    ctx = Context(model, n_ctx=64, n_ubatch=n_ubatch, type_k=kv, type_v=kv)
    return ctx.decode(Batch.from_tokens(tokens, all_logits=True))


def decode_one_by_one(model, tokens: np.ndarray, kv: str) -> np.ndarray:
    ctx = Context(model, n_ctx=64, type_k=kv, type_v=kv)
    return np.concatenate([ctx.decode(Batch.from_tokens(tokens[i : i + 1], pos0=i))
                           for i in range(len(tokens))])


def decode_beside_others(model, tokens: np.ndarray, kv: str) -> np.ndarray:
    """Token by token with two other sequences in every batch, as the server's slots decode
    (one row per sequence, rows not in sequence order); the logits of the sequence under test."""
    ctx = Context(model, n_ctx=3 * 64, n_seq=3, type_k=kv, type_v=kv)
    others = np.roll(tokens, 3), tokens[::-1].copy()
    rows = []
    for i in range(len(tokens)):
        batch = Batch(np.array([others[0][i], tokens[i], others[1][i]], np.int32),
                      np.full(3, i, np.int32), np.array([2, 0, 1], np.int32), np.ones(3, bool))
        rows.append(ctx.decode(batch)[1:2])
    return np.concatenate(rows)


MODES = {
    "one-batch": decode_all,
    "token-by-token": decode_one_by_one,
    "beside-other-sequences": decode_beside_others,
    "ubatch-5": lambda m, t, kv: decode_all(m, t, kv, n_ubatch=5),
    # the BLAS attention path with a cache behind
    "ubatch-16": lambda m, t, kv: decode_all(m, t, kv, n_ubatch=16),
}


def assert_close(ours: np.ndarray, want: np.ndarray, tol: float, what: str) -> None:
    assert ours.shape == want.shape and ours.dtype == np.float32
    err = np.abs(ours - want).max(axis=1)  # per position
    bad = np.flatnonzero(err > tol)
    assert not len(bad), f"{what}: positions {bad.tolist()} differ by up to {err.max():.2e}"


@pytest.mark.parametrize("mode", MODES)
def test_matches_transformers(tiny, mode):
    name, model, tokens, ref = tiny
    assert_close(MODES[mode](model, tokens, "f32"), ref["logits"], TOL, f"{name} {mode}")


@pytest.mark.parametrize("mode", MODES)
def test_fp16_cache_matches_transformers_kv_f16(tiny, mode):
    """The default engine: fp16 cache."""
    name, model, tokens, ref = tiny
    assert_close(MODES[mode](model, tokens, "f16"), ref["logits_kv_f16"], FP16_CACHE_TOL,
                 f"{name} {mode} fp16 cache")


def copy_gguf(src: Path, dst: Path, change) -> None:
    """dst = src with its metadata dict passed through change(metadata) first."""
    with open_gguf(src) as g:
        metadata, types = dict(g.metadata), dict(g.value_types)
        change(metadata)
        tensors = [TensorToWrite(t.name, t.ggml_type, t.ne, lambda t=t: t.data)
                   for t in g.tensors.values()]
        write_gguf(dst, metadata, tensors, {k: v for k, v in types.items() if k in metadata})


def test_missing_required_key_is_named(tmp_path):
    key = "llama.attention.layer_norm_rms_epsilon"
    path = tmp_path / "no-eps.gguf"
    copy_gguf(GOLDEN / "llama.gguf", path, lambda m: m.pop(key))
    with open_gguf(path) as g, pytest.raises(GGUFError, match=key.replace(".", r"\.")):
        load_model(g)


def test_unknown_architecture(tmp_path):
    path = tmp_path / "unknown-arch.gguf"
    copy_gguf(GOLDEN / "llama.gguf", path, lambda m: m.update({"general.architecture": "zeta"}))
    with open_gguf(path) as g, pytest.raises(GGUFError, match="unknown model architecture 'zeta'"):
        load_model(g)
