"""Dequantization equals gguf-py's (llama.cpp's own Python) bit for bit."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
from gguf import quants as gguf_quants

from llamacpy.format import GGMLType
from llamacpy.quants import QUANT_TYPES, UnsupportedTypeError, dequantize, get_quant


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.asarray(a, np.float32).view(np.uint32),
                          np.asarray(b, np.float32).view(np.uint32))


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"])
def test_every_tensor_of_real_models(name, real_models):
    model = real_models[name]
    for t in model.tensors.values():
        ours = dequantize(t.data, t.ggml_type, t.ne)
        ref = gguf_quants.dequantize(t.blocks(), t.ggml_type).reshape(t.shape)
        assert same_bits(ours, ref), f"{name}: {t.name} ({t.ggml_type.name})"


@pytest.mark.parametrize("ggml_type", list(QUANT_TYPES), ids=lambda t: t.name)
def test_random_blocks(ggml_type):
    """Every bit pattern a block can hold, with fp16 scales kept finite."""
    q = get_quant(ggml_type)
    rng = np.random.default_rng(int(ggml_type))
    raw = rng.integers(0, 256, size=(512, q.type_size), dtype=np.uint8)
    if q.block_size > 1:  # clear fp16 exponent bits that would make inf/nan scales
        for col in range(1, q.type_size, 2):
            if col < 4 or col >= q.type_size - 2:
                raw[:, col] &= 0x7B
    ours = q.dequantize_blocks(raw).reshape(512, -1)
    ref = gguf_quants.dequantize(raw, ggml_type).reshape(512, -1)
    assert same_bits(np.nan_to_num(ours), np.nan_to_num(ref))


def test_unsupported_type_is_named():
    with pytest.raises(UnsupportedTypeError, match="IQ2_XXS is not supported"):
        get_quant(GGMLType.IQ2_XXS)
    with pytest.raises(UnsupportedTypeError, match="unknown ggml tensor type 77"):
        get_quant(77)
    assert gguf.GGMLQuantizationType.Q4_K in QUANT_TYPES
