"""Prompts with images against llama.cpp's mtmd (golden data from
tests/reference/vision/make_mtmd_golden.py): the same cells (text tokens, image begin/end text,
image token counts), the same rope position after the prompt, and the same logits after the
prompt and after each of six tokens decoded behind it. Qwen3.5 checks M-RoPE image positions and
the max(nx, ny) advance; Gemma 3 the unscaled image embeddings and non-causal image attention
under a sliding window of 8. Also: micro-batch size does not change the result, a repeated
prompt reuses its image from the cache without encoding it again, and mismatched markers fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamacpy.engine.context import Context
from llamacpy.engine.sequence import Slot
from llamacpy.format import open_gguf
from llamacpy.models import load_model
from llamacpy.tokenizer import Tokenizer
from llamacpy.vision import load_projector
from llamacpy.vision.clip import ImageEmbedding
from llamacpy.vision.mtmd import MtmdContext

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "vision"
META = json.loads((GOLDEN / "mtmd_prompts.json").read_text())
DATA = np.load(GOLDEN / "mtmd_prompts.npz")


@pytest.fixture(scope="module")
def mtmd_contexts():
    out = {}
    for case in META["cases"].values():
        key = case["mmproj"]
        if key not in out:
            g = open_gguf(ROOT / case["text_model"])
            model = load_model(g)
            out[key] = (model, MtmdContext(load_projector(GOLDEN / key), Tokenizer.from_gguf(g),
                                           model))
    return out


def build(mtmd_contexts, name: str):
    case = META["cases"][name]
    model, mtmd = mtmd_contexts[case["mmproj"]]
    images = [(GOLDEN / "images" / i).read_bytes() for i in case["images"]]
    return model, mtmd.tokenize(case["prompt"], images)


def cells(prompt) -> np.ndarray:
    """Our cells in the golden's spelling: image cells are -1 - image index."""
    out = np.array([max(t, 0) for t in prompt.tokens], np.int64)
    for i, im in enumerate(prompt.images):
        out[im.start:im.stop] = -1 - i
    return out


def run(model, prompt, n_ubatch: int = 512, state: Slot | None = None):
    state = state or Slot(Context(model, n_ctx=256, n_ubatch=n_ubatch, type_k="f32",
                                           type_v="f32"))
    logits, _ = state.prefill(prompt)
    rows = [logits]
    for t in META["forced"]:
        rows.append(state.evaluate([t])[-1])
    return np.stack(rows), state


@pytest.mark.parametrize("name", list(META["cases"]))
def test_layout_matches_llamacpp(mtmd_contexts, name):
    _, prompt = build(mtmd_contexts, name)
    np.testing.assert_array_equal(cells(prompt), DATA[f"{name}.cells"])
    grids = DATA[f"{name}.grids"]
    assert [(im.n_tokens, im.n_pos) for im in prompt.images] == [(g[2], g[3]) for g in grids]
    if prompt.mrope:
        assert [(im.nx, im.ny) for im in prompt.images] == [(g[0], g[1]) for g in grids]
    assert prompt.position(len(prompt)) == META["cases"][name]["n_pos"]


@pytest.mark.parametrize("name", list(META["cases"]))
def test_decode_matches_llamacpp(mtmd_contexts, name):
    """llama.cpp's own image embeddings through our text model: only the decode differs (Gemma
    3's text model alone differs from llama.cpp by ~1e-3 of the logit range: ggml's GELU is an
    fp16 table)."""
    model, prompt = build(mtmd_contexts, name)
    for i, im in enumerate(prompt.images):
        im.embedding = ImageEmbedding(DATA[f"{name}.embd{i}"], im.nx, im.ny, im.n_tokens)
    ours, state = run(model, prompt)
    theirs = DATA[f"{name}.logits"]
    assert np.abs(ours - theirs).max() <= 1e-3 * np.abs(theirs).max()
    assert state.n_pos == META["cases"][name]["n_pos"] + len(META["forced"])


@pytest.mark.parametrize("name", list(META["cases"]))
def test_end_to_end_matches_llamacpp(mtmd_contexts, name):
    """Our decoding, preprocessing, encoder and text model: PNG images within 2e-3 of the logit
    range; a JPEG 2e-2 (stb_image's and libjpeg's IDCTs differ by a level here and there)."""
    model, prompt = build(mtmd_contexts, name)
    ours, _ = run(model, prompt)
    theirs = DATA[f"{name}.logits"]
    jpeg = any(i.endswith(".jpg") for i in META["cases"][name]["images"])
    assert np.abs(ours - theirs).max() <= (2e-2 if jpeg else 2e-3) * np.abs(theirs).max()
    np.testing.assert_array_equal(ours.argmax(axis=1), theirs.argmax(axis=1))


@pytest.mark.parametrize("name", ["qwen35-two", "gemma3-two"])
def test_micro_batches_do_not_change_logits(mtmd_contexts, name):
    model, prompt = build(mtmd_contexts, name)
    whole, _ = run(model, prompt)
    model, prompt = build(mtmd_contexts, name)
    pieces, _ = run(model, prompt, n_ubatch=5)  # splits text; never an image of Gemma 3
    assert np.abs(whole - pieces).max() <= 1e-4


@pytest.mark.parametrize("name", ["qwen35-one", "gemma3-one"])
def test_repeated_prompt_reuses_the_image(mtmd_contexts, name):
    model, prompt = build(mtmd_contexts, name)
    first, state = run(model, prompt)
    assert prompt.images[0].t_encode > 0
    _, again = build(mtmd_contexts, name)
    logits, keep = state.prefill(again)
    assert keep >= again.images[0].stop  # the image's cells came from the cache ...
    assert again.images[0].embedding is None  # ... so it was never encoded
    assert np.abs(logits - first[0]).max() <= 1e-4


def test_other_image_is_not_reused(mtmd_contexts):
    model, prompt = build(mtmd_contexts, "qwen35-one")
    first, state = run(model, prompt)
    _, mtmd = mtmd_contexts["qwen35.gguf"]
    other = mtmd.tokenize(META["cases"]["qwen35-one"]["prompt"],
                          [(GOLDEN / "images" / "small_100x70.png").read_bytes()])
    _, keep = state.prefill(other)
    assert keep <= other.images[0].start


def test_markers_must_match_images(mtmd_contexts):
    _, mtmd = mtmd_contexts["qwen35.gguf"]
    with pytest.raises(ValueError, match="number of media markers"):
        mtmd.tokenize("no marker", [(GOLDEN / "images" / "dot_1x1.png").read_bytes()])
