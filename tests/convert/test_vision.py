"""The converted Gemma 3 projector runs in our vision tower with image embeddings matching
transformers' get_image_features on the same checkpoint (our converter's F32 mmproj)."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.convert import Options, convert


def test_gemma3_mmproj_embeddings_match_transformers(checkpoint, tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import Gemma3ForConditionalGeneration

    from llamacpy.vision.registry import load_projector

    folder = checkpoint("gemma3-vision")
    path = convert(folder, Options(outfile=tmp_path / "mmproj.gguf", outtype="f32", mmproj=True))
    pixels = np.random.default_rng(4).uniform(-1, 1, (64, 64, 3)).astype(np.float32)
    hf = Gemma3ForConditionalGeneration.from_pretrained(folder, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.get_image_features(torch.from_numpy(pixels.transpose(2, 0, 1))[None])
    want = (out.pooler_output if hasattr(out, "pooler_output") else out)
    want = (want[0] if isinstance(want, (list, tuple)) else want).reshape(-1, 32).numpy()
    ours = load_projector(path).encode_pixels(pixels)
    assert ours.shape == want.shape
    err = np.abs(ours - want).max() / np.abs(want).max()
    # llama.cpp keeps mm.input_projection in F16 at every outtype: 1.5e-4 measured, the F16
    # bound of tests/vision/test_golden.py; a mapping or layout error is O(1)
    assert err < 1.5e-3, f"image embeddings differ by {err:.2e} (relative to the largest)"
