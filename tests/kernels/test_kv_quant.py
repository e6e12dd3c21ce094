"""Quantized KV cache (-ctk / -ctv): the store kernels write the bytes ggml's quantizers write
(quants/'s bit-exact ports of ggml-quants.c, and gguf-py's Q8_0), the in-register loaders read
the values of the numpy dequantizers, and attention on the blocks equals attention on their
dequantized values, for every type, for one sequence and several, in the hybrid (Qwen3.5) cache
too; the -fa rule of llama_init_from_model."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import quants as gguf_quants
from numba import njit

from llamacpy.kernels import get_threads, set_threads
from llamacpy.kernels.attention import (attend, attend_blas_tiled, attend_cached,
                                        attend_cached_q, attend_reference, attend_seqs)
from llamacpy.kernels.dequant import call_kernel
from llamacpy.kernels.kv_quant import BLOCK_BYTES, KV_TYPES, TAGS, dequantize_cells, row8
from llamacpy.kernels.simd import store_f32
from llamacpy.memory.batch import Segment
from llamacpy.memory.hybrid_cache import HybridCache
from llamacpy.memory.kv_cache import (KVCache, hadamard, resolve_flash_attn, rotated,
                                      rotation_size)
from llamacpy.ops.attention import attend_segment
from llamacpy.quants import get_quant
from llamacpy.quants.floats import fp32_to_bf16_bits

BLOCK_TYPES = list(BLOCK_BYTES)  # q8_0 q4_0 q4_1 iq4_nl q5_0 q5_1
TYPES = ["bf16", *BLOCK_TYPES]
# (n_head, n_head_kv, d_k, d_v): Qwen2.5 0.5B, Gemma 3 270M, SmolLM2 135M (a partial last four),
# two query heads per KV head (one head per pass), values not a multiple of 64 wide
SHAPES = [(14, 2, 64, 64), (4, 1, 256, 256), (9, 3, 64, 64), (4, 2, 64, 96)]


def rows(n: int, n_kv: int, d: int, seed: int) -> np.ndarray:
    """float32 [n, n_kv, d] at scales from 1e-4 to 1e2, with the quantizers' corner cases: an
    all-zero block, a block of negative zeros, a constant block, tied magnitudes."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n_kv, d)) * 10.0 ** rng.integers(-4, 3, (n, n_kv, 1))
    x = x.astype(np.float32)
    x[0, 0, :32] = 0
    x[0, -1, :32] = -0.0
    x[-1, 0, :32] = 1.5
    x[-1, -1, 32:64] = np.where(np.arange(32) % 2, 3.0, -3.0)
    return x


def ggml_cells(x: np.ndarray, name: str) -> np.ndarray:
    """What ggml stores for rows x [n, n_kv, d] (quants/ is bit-exact with ggml-quants.c)."""
    if name == "bf16":
        return fp32_to_bf16_bits(x).reshape(x.shape)
    return get_quant(KV_TYPES[name]).quantize_blocks(x.reshape(-1, 32)).reshape(*x.shape[:2], -1)


def numpy_values(cells: np.ndarray, name: str) -> np.ndarray:
    """The numpy dequantizer's float32 values of cells [..., units]."""
    if name == "bf16":
        return (cells.astype(np.uint32) << 16).view(np.float32)
    blocks = cells.reshape(-1, BLOCK_BYTES[name])
    d = cells.shape[-1] // BLOCK_BYTES[name] * 32
    return get_quant(KV_TYPES[name]).dequantize_blocks(blocks).reshape(*cells.shape[:-1], d)


# -- storing -----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", TYPES)
def test_store_writes_ggml_bytes(name):
    """K (64 wide: a quantized one is stored Hadamard-rotated, as llama.cpp does) and V (96
    wide: not a multiple of 64, never rotated) hold ggml's quantization of their rows."""
    cache = KVCache(n_layer=2, n_seq=3, n_ctx=8, n_head_kv=2, d_k=64, d_v=96, type_k=name,
                    type_v=name)
    k, v = rows(4, 2, 64, 1), rows(4, 2, 96, 2)
    seqs, positions = np.array([2, 0, 1, 0]), np.array([7, 0, 3, 1])
    cache.store_rows(1, seqs, positions, k, v)
    assert (cache.rot_k is not None) == (name != "bf16") and cache.rot_v is None
    stored_k = rotated(k, cache.rot_k) if cache.rot_k is not None else k
    assert np.array_equal(cache.k[1][seqs, positions], ggml_cells(stored_k, name))
    assert np.array_equal(cache.v[1][seqs, positions], ggml_cells(v, name))
    untouched = np.ones((3, 8), bool)
    untouched[seqs, positions] = False
    assert not cache.k[1][untouched].any() and not cache.k[0].any()


def test_q8_0_store_matches_gguf_py():
    cache = KVCache(1, 1, 4, 2, 64, 64, type_k="q8_0", type_v="f16")
    k = rows(4, 2, 64, 3)
    cache.store(0, 0, 0, k, k)
    want = gguf_quants.quantize(rotated(k, hadamard(64)).reshape(-1, 64),
                                KV_TYPES["q8_0"]).reshape(4, 2, -1)
    assert np.array_equal(cache.k[0][0], want)
    assert np.array_equal(cache.v[0][0], k.astype(np.float16).view(np.uint16))


def test_kv_bytes_of_q8_0_are_about_half_of_f16():
    f16 = KVCache(24, 1, 4096, 2, 64, 64)
    q8 = KVCache(24, 1, 4096, 2, 64, 64, type_k="q8_0", type_v="q8_0")
    assert q8.nbytes / f16.nbytes == 34 / 64


def test_hadamard_rotation_as_llama_cpp():
    """ggml_gen_hadamard's matrix (entries +-1/sqrt(n) by the parity of i & j: symmetric,
    orthonormal) and the sizes of build_input_k_rot / build_input_v_rot."""
    h = hadamard(64)
    i, j = np.indices((64, 64))
    parity = np.vectorize(lambda a: bin(a).count("1") % 2)(i & j)
    assert np.array_equal(h, np.where(parity, -1, 1) * np.float32(1 / np.sqrt(np.float32(64))))
    assert np.allclose(h @ h, np.eye(64), atol=1e-6)
    assert [rotation_size("q8_0", d, True) for d in (64, 128, 256, 192, 96, 40)] == \
        [64, 128, 256, 64, 0, 0]
    assert rotation_size("q4_0", 256, False) == 64
    assert rotation_size("f16", 128, True) == rotation_size("bf16", 128, True) == 0
    q = rows(3, 4, 128, 9)
    k = rows(3, 4, 128, 10)
    rk = hadamard(rotation_size("q8_0", 128, True))
    assert np.allclose(np.einsum("nhd,nhd->nh", rotated(q, rk), rotated(k, rk)),
                       np.einsum("nhd,nhd->nh", q, k), rtol=1e-4, atol=1e-3)
    # the fast transform is the product with the matrix, each row alone as in any batch
    want = (q.reshape(-1, 128).astype(np.float64) @ rk.astype(np.float64)).reshape(q.shape)
    assert np.allclose(rotated(q, rk), want, rtol=1e-5, atol=1e-5 * np.abs(q).max())
    assert np.array_equal(rotated(q[1:2], rk), rotated(q, rk)[1:2])


@pytest.mark.parametrize("bad", ["q8_1", "q4_k", "F16", "fp8"])
def test_unsupported_type_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=f"Unsupported cache type: {bad} "):
        KVCache(1, 1, 4, 1, 64, 64, type_k=bad)


def test_block_type_must_divide_the_head_size():
    with pytest.raises(ValueError, match="V cache type q4_0 with block size 32 does not divide "
                                         "n_embd_head_v=40"):
        KVCache(1, 1, 4, 1, 64, 40, type_v="q4_0")


# -- reading -----------------------------------------------------------------------------------

@njit
def _load_rows(cells, tag, out):
    for r in range(out.shape[0]):
        for i in range(0, out.shape[1], 8):
            store_f32(out[r], i, row8(tag, cells, r, i))


@pytest.mark.parametrize("name", TYPES)
def test_loaders_and_dequantize_cells_give_the_numpy_values(name):
    cells = ggml_cells(rows(5, 2, 64, 4), name)  # [5, 2, units]
    want = numpy_values(cells, name)
    assert np.array_equal(dequantize_cells(cells, name), want)
    flat = cells.reshape(5, -1)  # the kernels' 2-D view: a position's heads side by side
    got = np.empty((5, 128), np.float32)
    call_kernel(_load_rows, flat, TAGS[name], got)
    assert np.array_equal(got, want.reshape(5, 128))


# -- attention ---------------------------------------------------------------------------------

def filled(n_ctx, n_kv, d, name, seed):
    """Cells of type `name` (scores stay below ~40: float32 softmax weights to ~1e-6)."""
    x = rows(n_ctx, n_kv, d, seed) / 30
    return ggml_cells(x, name) if name != "f16" else x.astype(np.float16).view(np.uint16)


def close(got, ref):
    return np.abs(got - ref).max() < 2e-6 * np.abs(ref).max() + 1e-6


PAIRS = [(t, t) for t in TYPES] + [("f16", "q8_0"), ("q8_0", "f16"), ("q4_0", "q5_1"),
                                    ("bf16", "iq4_nl")]


@pytest.mark.parametrize("types", PAIRS, ids="-".join)
@pytest.mark.parametrize("shape", SHAPES)
def test_attention_on_blocks_equals_attention_on_their_values(types, shape):
    n_head, n_kv, d_k, d_v = shape
    rng = np.random.default_rng(d_k)
    k, v = filled(40, n_kv, d_k, types[0], 5), filled(40, n_kv, d_v, types[1], 6)
    pos = np.array([0, 6, 17, 38], np.int32)
    q = 3 * rng.standard_normal((len(pos), n_head, d_k)).astype(np.float32)
    scale = 1 / np.sqrt(d_k)
    values = [dequantize_cells(c, t) for c, t in ((k, types[0]), (v, types[1]))]
    before = get_threads()
    try:
        for n_swa in (0, 5):
            ref = attend_reference(q, k, v, pos, n_swa, scale, types)
            for threads in (1, 2):
                set_threads(threads)
                for by_head in (False, True):
                    out = np.full((len(pos), n_head, d_v), np.nan, np.float32)
                    call_kernel(attend_cached_q, q, k, v, pos, n_swa, np.float32(scale), out,
                                by_head, TAGS[types[0]], TAGS[types[1]])
                    assert close(out, ref), (n_swa, threads, by_head)
                    # the float32 kernel over the dequantized cells: the same operations
                    same = np.full_like(out, np.nan)
                    call_kernel(attend_cached, q, values[0], values[1], pos, n_swa,
                                np.float32(scale), same, by_head)
                    assert np.array_equal(out, same), (n_swa, threads, by_head)
            for tile in (7, 512):  # several tiles (online softmax), one
                out = np.full_like(out, np.nan)
                attend_blas_tiled(q, k, v, pos, n_swa, scale, out, types, tile)
                assert close(out, ref), (n_swa, tile)
            out = np.full_like(out, np.nan)
            assert attend(q, k, v, pos, n_swa, scale, out, types) is out and close(out, ref)
    finally:
        set_threads(before)


def test_the_reference_reads_blocks_as_the_dequantizer_does():
    """attend_reference over blocks is attend_reference over their float32 values."""
    k, v = filled(20, 2, 64, "q4_1", 7), filled(20, 2, 64, "q8_0", 8)
    q = np.random.default_rng(0).standard_normal((3, 4, 64)).astype(np.float32)
    pos = np.array([3, 11, 19], np.int32)
    a = attend_reference(q, k, v, pos, 0, 0.125, ("q4_1", "q8_0"))
    b = attend_reference(q, numpy_values(k, "q4_1"), numpy_values(v, "q8_0"), pos, 0, 0.125)
    assert np.allclose(a, b, rtol=1e-12, atol=0)


@pytest.mark.parametrize("types", [("q8_0", "q8_0"), ("q4_0", "iq4_nl"), ("bf16", "q5_0")],
                         ids="-".join)
def test_several_sequences_in_one_call(types):
    """The server's decode step: one row of each of several sequences over [n_seq, n_ctx, ...]
    caches, against each sequence attended alone."""
    n_head, n_kv, d = 14, 2, 64
    cache = KVCache(1, 3, 32, n_kv, d, d, *types)
    for seq, n in enumerate((9, 30, 1)):
        cache.store(0, seq, 0, rows(n, n_kv, d, 10 + seq), rows(n, n_kv, d, 20 + seq))
    q_seq, q_pos = np.array([1, 0, 2], np.int32), np.array([29, 8, 0], np.int32)
    q = np.random.default_rng(1).standard_normal((3, n_head, d)).astype(np.float32)
    out = np.full((3, n_head, d), np.nan, np.float32)
    assert attend_seqs(q, cache.k[0], cache.v[0], q_seq, q_pos, 0, 0.125, out, types)
    for i, (s, p) in enumerate(zip(q_seq, q_pos)):
        ref = attend_reference(q[i : i + 1], cache.k[0][s], cache.v[0][s], np.array([p]), 0,
                               0.125, types)
        assert close(out[i : i + 1], ref)


def test_hybrid_cache_attention_layers_hold_blocks():
    """Qwen3.5's memory: the attention layers store q8_0 blocks (the recurrent ones none) and
    attend on them through the model's path (ops.attention.attend_segment)."""
    cache = HybridCache([True, False, True, False], n_seq=2, n_ctx=16, n_head_kv=2, d_k=64,
                        d_v=64, conv_shape=(3, 8), ssm_shape=(2, 4, 4), type_k="q8_0",
                        type_v="q4_0")
    assert cache.k[0] is None and cache.k[1].dtype == np.uint8
    assert cache.k[1].shape == (2, 16, 2, 68) and cache.v[3].shape == (2, 16, 2, 36)
    k, v = rows(12, 2, 64, 30), rows(12, 2, 64, 31)
    cache.store(3, 1, 0, k, v)
    assert np.array_equal(cache.k[3][1, :12], ggml_cells(rotated(k, hadamard(64)), "q8_0"))
    assert np.array_equal(cache.v[3][1, :12], ggml_cells(rotated(v, hadamard(64)), "q4_0"))
    q = np.random.default_rng(2).standard_normal((12, 8, 64)).astype(np.float32)
    pos = np.arange(12, dtype=np.int32)
    out = np.empty((12, 8, 64), np.float32)
    attend_segment(q, cache.k[3][1], cache.v[3][1], Segment(1, 0, 12, 0), pos, 0, 0.125, out,
                   cache.types)
    ref = attend_reference(q, cache.k[3][1], cache.v[3][1], pos, 0, 0.125, cache.types)
    assert close(out, ref)


# -- flash attention (-fa) ---------------------------------------------------------------------

def test_quantized_v_needs_flash_attention():
    assert resolve_flash_attn("auto", "f16", "f16") == ("auto", None)
    assert resolve_flash_attn("off", "q8_0", "f16") == ("off", None)  # a quantized K is fine
    assert resolve_flash_attn("on", "q8_0", "q8_0") == ("on", None)
    assert resolve_flash_attn("auto", "f16", "q4_0") == (
        "on", "enabling flash_attn since it is required for quantized V cache")
    with pytest.raises(ValueError, match="^quantized V cache requires flash_attn to be enabled$"):
        resolve_flash_attn("off", "q8_0", "q8_0")
    assert resolve_flash_attn("off", "f32", "bf16") == ("off", None)  # bf16 is not quantized
