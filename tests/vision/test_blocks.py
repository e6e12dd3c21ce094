"""The pieces of the vision towers against plain twins written from llama.cpp's C++, plus the
projector registry and the prompt markers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from llamacpy.format import GGUFError, TensorToWrite, open_gguf, write_gguf
from llamacpy.vision import ImageEmbedding, image_markers, load_projector
from llamacpy.vision import clip
from llamacpy.vision.preprocess import smart_size
from llamacpy.vision.qwen3vl import merge_order, vision_rope
from llamacpy.vision.resample import (Resample, pillow_resize, pillow_resize_reference)

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vision"
TINY_HF = Path(__file__).resolve().parents[1] / "golden" / "tiny_hf"
PILLOW = {Resample.BILINEAR: Image.Resampling.BILINEAR, Resample.BICUBIC: Image.Resampling.BICUBIC,
          Resample.LANCZOS: Image.Resampling.LANCZOS}


@pytest.mark.parametrize("algo", list(Resample))
def test_resample_kernels_match_numpy_twin(algo):
    rng = np.random.default_rng(3)
    for w, h, tw, th in [(40, 150, 18, 64), (100, 70, 128, 90), (1, 1, 96, 96), (7, 300, 7, 31),
                         (333, 217, 64, 300), (2000, 10, 2016, 11)]:
        src = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        np.testing.assert_array_equal(pillow_resize(src, tw, th, algo),
                                      pillow_resize_reference(src, tw, th, algo))


@pytest.mark.parametrize("algo", list(Resample))
def test_one_pass_resample_is_pillows(algo):
    """With one pass (one side unchanged) llama.cpp's port and Pillow agree bit for bit; with
    two they can differ by a level, and the goldens check those against llama.cpp itself."""
    rng = np.random.default_rng(4)
    for _ in range(20):
        w, h, t = (int(v) for v in rng.integers(1, 300, 3))
        src = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        for size in [(t, h), (w, t)]:
            pil = np.asarray(Image.fromarray(src).resize(size, PILLOW[algo]))
            np.testing.assert_array_equal(pillow_resize(src, *size, algo), pil)


@pytest.mark.parametrize("w, h, expected", [
    (128, 64, (128, 64)),  # 8 tokens: as is
    (1, 1, (96, 96)),  # below 8 tokens: scaled up, each side rounded up
    (100, 70, (128, 96)),
    (48, 200, (64, 192)),  # 48 / 32 = 1.5 rounds up (std::round), unlike Python's round
    (8000, 8000, (2048, 2048)),  # above 4096 tokens: scaled down, each side rounded down
    (2000, 10, (2016, 32)),  # a side never drops below one 32-pixel block
])
def test_smart_size(w, h, expected):
    assert smart_size(w, h, 32, 8 * 1024, 4096 * 1024) == expected


def test_layer_norm_matches_float64():
    rng = np.random.default_rng(5)
    x = (rng.normal(size=(7, 48)) * 3 + 1).astype(np.float32)
    w, b = rng.normal(size=48).astype(np.float32), rng.normal(size=48).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-6) * w + b
    np.testing.assert_allclose(clip.layer_norm(x, w, b, 1e-6), ref, rtol=0, atol=2e-5)


@pytest.mark.parametrize("n_head_kv", [4, 2])
def test_attention_matches_naive_softmax(monkeypatch, n_head_kv):
    rng = np.random.default_rng(6)
    n, n_head, d = 37, 4, 16
    q = rng.normal(size=(n, n_head, d)).astype(np.float32)
    k = rng.normal(size=(n, n_head_kv, d)).astype(np.float32)
    v = rng.normal(size=(n, n_head_kv, d)).astype(np.float32)
    ref = np.empty((n, n_head, d))
    for h in range(n_head):
        kv = h // (n_head // n_head_kv)
        s = q[:, h].astype(np.float64) @ k[:, kv].T.astype(np.float64) * 0.25
        p = np.exp(s - s.max(1, keepdims=True))
        ref[:, h] = (p / p.sum(1, keepdims=True)) @ v[:, kv]
    np.testing.assert_allclose(clip.attention(q, k, v, 0.25), ref.reshape(n, -1), atol=2e-6)
    monkeypatch.setattr(clip, "ATTN_SCRATCH_BYTES", 4 * n * 5)  # query blocks of 5 rows
    np.testing.assert_allclose(clip.attention(q, k, v, 0.25), ref.reshape(n, -1), atol=2e-6)


def test_vision_rope_matches_ggml_cache_init():
    """ggml_mrope_cache_init in GGML_ROPE_TYPE_VISION mode: float32 theta multiplied by
    theta_scale = 10000^(-2 / (d/2)) per pair, rows in sections 0, columns in section 1."""
    d, rows, cols = 16, np.array([0, 1, 5, 40]), np.array([3, 0, 7, 41])
    cos, sin = vision_rope(rows, cols, d)
    scale = np.float32(10000.0) ** np.float32(-2.0 / (d // 2))
    for t in range(len(rows)):
        theta_y, theta_x = np.float32(rows[t]), np.float32(cols[t])
        for i in range(d // 2):
            if i == d // 4:
                theta_x = np.float32(cols[t])  # the section restarts its own theta
            theta = theta_y if i < d // 4 else theta_x
            assert math.isclose(cos[t, i], math.cos(theta), abs_tol=2e-6)
            assert math.isclose(sin[t, i], math.sin(theta), abs_tol=2e-6)
            theta_y, theta_x = theta_y * scale, theta_x * scale


def test_merge_order_matches_clip_positions():
    """clip_encode's position loop for qwen3vl: 2x2 blocks, row-major inside each block."""
    gh, gw, expected = 4, 6, []
    for y in range(0, gh, 2):
        for x in range(0, gw, 2):
            for dy in range(2):
                for dx in range(2):
                    expected.append((y + dy) * gw + x + dx)
    np.testing.assert_array_equal(merge_order(gh, gw), expected)


def test_mrope_positions():
    """mtmd_image_tokens_get_decoder_pos + set_position_mrope_2d; text resumes at
    pos0 + max(nx, ny)."""
    emb = ImageEmbedding(np.zeros((6, 4), np.float32), nx=3, ny=2, n_tokens=6)
    pos = emb.mrope_positions(10)
    np.testing.assert_array_equal(pos, [[10] * 6, [10, 10, 10, 11, 11, 11],
                                        [10, 11, 12, 10, 11, 12], [0] * 6])
    assert emb.n_pos(mrope=True) == 3 and emb.n_pos(mrope=False) == 6


def test_image_markers():
    assert image_markers("qwen3vl_merger") == ("<|vision_start|>", "<|vision_end|>")
    assert image_markers("gemma3") == ("<start_of_image>", "<end_of_image>")
    with pytest.raises(ValueError, match="idefics3"):
        image_markers("idefics3")


def copy_gguf(src: Path, dst: Path, change) -> Path:
    with open_gguf(src) as g:
        metadata, types = dict(g.metadata), dict(g.value_types)
        change(metadata)
        tensors = [TensorToWrite(t.name, t.ggml_type, t.ne, lambda t=t: t.data)
                   for t in g.tensors.values()]
        write_gguf(dst, metadata, tensors, {k: v for k, v in types.items() if k in metadata})
    return dst


def test_unsupported_projector_is_named(tmp_path):
    path = copy_gguf(GOLDEN / "gemma3.gguf", tmp_path / "p.gguf",
                     lambda m: m.update({"clip.projector_type": "idefics3"}))
    with pytest.raises(GGUFError, match="unsupported projector type 'idefics3'.*gemma3"):
        load_projector(path)


def test_missing_key_is_named(tmp_path):
    path = copy_gguf(GOLDEN / "qwen35.gguf", tmp_path / "p.gguf",
                     lambda m: m.pop("clip.vision.patch_size"))
    with pytest.raises(GGUFError, match=r"clip\.vision\.patch_size"):
        load_projector(path)


def test_text_model_is_not_an_mmproj():
    with pytest.raises(GGUFError, match="not an mmproj"):
        load_projector(TINY_HF / "qwen3.gguf")


def test_projector_surface():
    proj = load_projector(GOLDEN / "qwen35.gguf")
    assert proj.projector_type == "qwen3vl_merger" and proj.n_embd == 64
    emb = proj.encode(np.full((64, 128, 3), 127, np.uint8))
    assert (emb.nx, emb.ny, emb.n_tokens) == (4, 2, 8) and emb.embeddings.shape == (8, 64)
    proj.close()
