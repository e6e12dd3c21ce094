"""Each converted text model runs in our engine with logits matching transformers' forward on
the same checkpoint: our converter's F32 GGUF, one batch, an f32 KV cache (as
tests/models/test_tiny_hf.py holds llama.cpp's conversions to 1e-3)."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.convert import Options, convert
from llamacpy.engine.context import Context
from llamacpy.format import open_gguf
from llamacpy.memory.batch import Batch
from llamacpy.models import load_model

TOL = 1e-3  # max |ours - transformers| over every logit; a mapping or rope error moves them by >0.1


@pytest.mark.parametrize("name", ["llama", "llama-rope-llama3", "qwen2", "qwen3", "gemma3",
                                  "qwen35", "qwen35-mtp"])
def test_converted_model_logits_match_transformers(name, checkpoint, tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    folder = checkpoint(name)
    path = convert(folder, Options(outfile=tmp_path / "m.gguf", outtype="f32",
                                   no_mtp=name == "qwen35"))
    hf = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32,
                                              attn_implementation="eager").eval()
    tokens = np.random.default_rng(3).integers(1, hf.config.vocab_size, 24, dtype=np.int32)
    with torch.no_grad():
        want = hf(torch.from_numpy(tokens.astype(np.int64))[None]).logits[0].numpy()
    with open_gguf(path) as g:
        ctx = Context(load_model(g), n_ctx=64, type_k="f32", type_v="f32")
        ours = ctx.decode(Batch.from_tokens(tokens, all_logits=True))
    err = np.abs(ours - want).max()
    assert err < TOL, f"{name}: logits differ from transformers by {err:.2e}"
