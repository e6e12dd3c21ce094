"""Vision towers against references that are not llamacpy (tests/golden/vision, made by
tests/reference/vision/make_vision_golden.py; no torch needed here):

- llama.cpp's decoding (stb_image), its preprocessed pixels, image grid and embeddings (mtmd);
- transformers' vision tower + merger on llama.cpp's pixels.

Our float32 towers match transformers to ~1e-6 of the largest value; llama.cpp's own embeddings
sit 3e-4..7e-4 away from both (its patch embedding rounds pixels and kernel to fp16 and its
GELU is an fp16 table). JPEG decoders differ (stb_image vs libjpeg) by a few 8-bit levels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.vision import ImageEmbedding, decode_image, load_projector
from llamacpy.vision.preprocess import normalize

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vision"
MODELS = ["qwen35", "qwen35-f16", "qwen3vl-deepstack", "gemma3"]
MROPE = {"qwen35", "qwen35-f16", "qwen3vl-deepstack"}  # goldens made with an M-RoPE text model
PIXELS_FROM = {"qwen35-f16": "qwen35", "qwen3vl-deepstack": "qwen35"}  # same preprocessing
IMAGES = sorted(p.name for p in (GOLDEN / "images").iterdir())
HF_TOL = {"f32": 1e-4, "f16": 1.5e-3}  # measured: 1.2e-6 (F32 weights), 7.3e-4 (F16 weights)
LLAMACPP_TOL = 2e-3  # measured 3.3e-4..6.7e-4 from PNG files
LLAMACPP_JPEG_TOL = 1e-2  # measured 3.8e-3..5.5e-3: the two JPEG decoders differ
JPEG_LEVELS = 4  # max |Pillow - stb_image| per channel, measured 3


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    """(name, projector, golden npz, golden npz holding its llama.cpp pixels)."""
    name = request.param
    proj = load_projector(GOLDEN / f"{name}.gguf")
    ref = np.load(GOLDEN / f"{name}.npz")
    pixels = np.load(GOLDEN / f"{PIXELS_FROM.get(name, name)}.npz")
    yield name, proj, ref, pixels
    proj.close()


def key(image: str) -> str:
    return image.replace(".", "_")


@pytest.fixture(scope="module")
def stb():
    return np.load(GOLDEN / "images.npz")


@pytest.mark.parametrize("image", IMAGES)
def test_decode_matches_stb_image(image, stb):
    ours = decode_image((GOLDEN / "images" / image).read_bytes())
    ref = stb[key(image)]
    assert ours.shape == ref.shape and ours.dtype == np.uint8
    diff = np.abs(ours.astype(int) - ref).max()
    assert diff <= (JPEG_LEVELS if image.endswith(".jpg") else 0), f"{image}: {diff} levels"


@pytest.mark.parametrize("image", IMAGES)
def test_preprocessing_matches_llamacpp(model, image, stb):
    """Resize (Pillow-style fixed point, letterboxed) and normalisation bit for bit."""
    name, proj, ref, pixels = model
    prepared = proj.prepare(stb[key(image)])
    rgb = pixels[f"{key(image)}__llamacpp_rgb"]
    expected = ((rgb.astype(np.float32) / np.float32(255)) - proj.args.image_mean) \
        / proj.args.image_std
    assert prepared.pixels.shape == expected.shape
    np.testing.assert_array_equal(prepared.pixels, expected)


@pytest.mark.parametrize("image", IMAGES)
def test_grid_matches_llamacpp(model, image, stb):
    name, proj, ref, _ = model
    nx, ny, n_tokens, n_pos = ref[f"{key(image)}__grid"]
    h, w = stb[key(image)].shape[:2]
    gx, gy, gn = proj.n_tokens(w, h)
    assert gn == n_tokens
    if name in MROPE:  # llama.cpp reports the grid only for M-RoPE text models
        assert (gx, gy) == (nx, ny)
    emb = ImageEmbedding(np.zeros((gn, 0), np.float32), gx, gy, gn)
    assert emb.n_pos(mrope=name in MROPE) == n_pos


@pytest.mark.parametrize("image", IMAGES)
def test_embeddings_match_transformers(model, image):
    """The tower alone, on llama.cpp's preprocessed pixels."""
    name, proj, ref, pixels = model
    rgb = pixels[f"{key(image)}__llamacpp_rgb"]
    ours = proj.encode_pixels(normalize(rgb, proj.args.image_mean, proj.args.image_std))
    hf = ref[f"{key(image)}__hf_embd"]
    assert ours.shape == hf.shape and hf.shape[1] == proj.n_embd
    tol = HF_TOL["f16" if name.endswith("f16") else "f32"]
    assert rel_err(ours, hf) <= tol, f"{name} {image}: {rel_err(ours, hf):.2e}"


@pytest.mark.parametrize("image", IMAGES)
def test_encode_matches_llamacpp(model, image):
    """The whole path, file bytes to embeddings, against mtmd_encode_chunk."""
    name, proj, ref, _ = model
    emb = proj.encode((GOLDEN / "images" / image).read_bytes())
    lc = ref[f"{key(image)}__llamacpp_embd"]
    assert emb.embeddings.shape == lc.shape and emb.embeddings.dtype == np.float32
    tol = LLAMACPP_JPEG_TOL if image.endswith(".jpg") else LLAMACPP_TOL
    assert rel_err(emb.embeddings, lc) <= tol, f"{name} {image}: {rel_err(emb.embeddings, lc):.2e}"


def test_token_limits_match_llamacpp():
    """--image-min-tokens / --image-max-tokens change Qwen's target size as in llama.cpp."""
    rows = np.load(GOLDEN / "qwen35.npz")["token_limits"]
    for w, h, lo, hi, nx, ny, n in rows:
        proj = load_projector(GOLDEN / "qwen35.gguf", int(lo), int(hi))
        assert proj.n_tokens(int(w), int(h)) == (nx, ny, n), (w, h, lo, hi)
        proj.close()


def test_deepstack_width():
    """Deepstack layers widen each embedding: main features, then one slice per layer."""
    proj = load_projector(GOLDEN / "qwen3vl-deepstack.gguf")
    assert sorted(proj.deepstack) == [0, 1]
    assert proj.n_embd == 3 * proj.args.projection_dim
    proj.close()
