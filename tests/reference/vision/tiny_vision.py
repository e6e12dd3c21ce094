"""Tiny random-weight transformers vision models (Qwen3.5 and Gemma 3), converted to mmproj GGUFs
with llama.cpp's own convert_hf_to_gguf.py --mmproj, and the real-shaped Qwen3.5-0.8B projector
used by bench/vision_encode.py. Needs torch and transformers (CI only reads the outputs).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Qwen3_5Config,
    Qwen3_5ForConditionalGeneration,
    Qwen3VLConfig,
    Qwen3VLForConditionalGeneration,
)

from tests.reference.vocab_data import llama_cpp_source

SEED = 1234
# distinct per channel, so a channel mix-up shows
IMAGE_MEAN = [0.48145466, 0.4578275, 0.40821073]
IMAGE_STD = [0.26862954, 0.26130258, 0.27577711]

# Text configs only need to build: the converter with --mmproj reads the vision tower alone.
# hidden_size 64 / 48 equals tests/golden/tiny_hf/qwen3.gguf / gemma3.gguf, the text models
# that llama.cpp's mtmd_init_from_file checks the projection width against.
QWEN_TEXT = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 layer_types=["linear_attention", "full_attention"], num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, linear_num_key_heads=2,
                 linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                 max_position_embeddings=256)
# num_position_embeddings 16: a 4x4 learned table, so any other patch grid resizes it
QWEN_VISION = dict(depth=2, hidden_size=64, num_heads=4, intermediate_size=128, patch_size=16,
                   spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                   num_position_embeddings=16)
# Qwen3.5-0.8B's vision tower (depth 12, width 768) and text width 1024; text stays tiny
QWEN_08B_TEXT = dict(QWEN_TEXT, hidden_size=1024, intermediate_size=256)
QWEN_08B_VISION = dict(depth=12, hidden_size=768, num_heads=12, intermediate_size=3072,
                       patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                       out_hidden_size=1024, num_position_embeddings=2304)

# Qwen3-VL with deepstack: every layer also feeds the text model (concatenated embeddings);
# width 32 keeps the file small
QWEN3VL_TEXT = dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                    max_position_embeddings=256)
QWEN3VL_VISION = dict(depth=2, hidden_size=32, num_heads=2, intermediate_size=64, patch_size=16,
                      spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64,
                      num_position_embeddings=16, deepstack_visual_indexes=[0, 1])

GEMMA_TEXT = dict(vocab_size=320, hidden_size=48, intermediate_size=96, num_hidden_layers=1,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                  max_position_embeddings=256)
# 64x64 images, 8x8 patches, pooled 2x2 -> 16 tokens (clip.vision.projector.scale_factor = 2)
GEMMA_VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, image_size=64, patch_size=8, layer_norm_eps=1e-6,
                    vision_use_head=False)
GEMMA_TOKENS = 16

# Run by the converter subprocess against llama.cpp's bundled gguf-py; the tokenizer check of the
# text side is never reached with --mmproj, but keep it permissive as tiny_hf does.
CONVERT = """
import sys
import convert_hf_to_gguf
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen35"
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
convert_hf_to_gguf.main()
"""


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int) -> None:
    """Seeded weights that keep activations O(1): matrices ~ N(0, 1/fan_in); LayerNorm weights
    around 1 (Gemma's RMSNorm around 0: it multiplies by 1 + w); biases std 0.1; learned
    position tables std 0.5 so that their resampling matters."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if "pos_embed" in name or "position_embedding" in name:
            p.copy_(0.5 * noise)
        elif "soft_emb_norm" in name:
            p.copy_(0.2 * noise)
        elif name.endswith("mm_input_projection_weight"):
            p.copy_(noise / math.sqrt(p.shape[0]))
        elif p.ndim >= 2:
            p.copy_(noise / math.sqrt(p[0].numel()))
        elif "norm" in name and name.endswith("weight"):
            p.copy_(1.0 + 0.2 * noise)
        else:
            p.copy_(0.1 * noise)


def build_qwen(text: dict, vision: dict) -> Qwen3_5ForConditionalGeneration:
    config = Qwen3_5Config(text_config=text, vision_config=vision)
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Qwen3_5ForConditionalGeneration(config).float().eval()
    randomize(model, SEED)
    return model


def build_qwen3vl() -> Qwen3VLForConditionalGeneration:
    config = Qwen3VLConfig(text_config=QWEN3VL_TEXT, vision_config=QWEN3VL_VISION)
    config.architectures = ["Qwen3VLForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Qwen3VLForConditionalGeneration(config).float().eval()
    randomize(model, SEED)
    return model


def build_gemma() -> Gemma3ForConditionalGeneration:
    config = Gemma3Config(text_config=GEMMA_TEXT, vision_config=GEMMA_VISION,
                          mm_tokens_per_image=GEMMA_TOKENS)
    config.architectures = ["Gemma3ForConditionalGeneration"]
    torch.manual_seed(SEED)
    model = Gemma3ForConditionalGeneration(config).float().eval()
    randomize(model, SEED)
    return model


def save(model: torch.nn.Module, folder: Path, **preprocessor) -> None:
    """save_pretrained plus the preprocessor_config.json the converter reads mean/std from.
    transformers 5 saves Gemma 3's SigLIP as `vision_tower.*`; the published checkpoints (and
    the converter's tensor map) say `vision_tower.vision_model.*`, so the names are put back."""
    model.save_pretrained(folder)
    if isinstance(model, Gemma3ForConditionalGeneration):
        path = folder / "model.safetensors"
        tensors = load_file(path)
        renamed = {k.replace("vision_tower.", "vision_tower.vision_model.", 1)
                   if k.startswith("vision_tower.") else k: v for k, v in tensors.items()}
        save_file(renamed, path, metadata={"format": "pt"})
    cfg = {"image_mean": IMAGE_MEAN, "image_std": IMAGE_STD, **preprocessor}
    (folder / "preprocessor_config.json").write_text(json.dumps(cfg, indent=1))


def convert_mmproj(model_dir: Path, out: Path, outtype: str) -> None:
    """llama.cpp's convert_hf_to_gguf.py --mmproj, run against its bundled gguf-py."""
    LLAMA_CPP = llama_cpp_source()
    env = dict(os.environ, PYTHONPATH=f"{LLAMA_CPP / 'gguf-py'}{os.pathsep}{LLAMA_CPP}")
    subprocess.run([sys.executable, "-c", CONVERT, str(model_dir), "--mmproj", "--outtype",
                    outtype, "--outfile", str(out)], check=True, env=env, cwd=LLAMA_CPP,
                   stdout=subprocess.DEVNULL)


def make_bench_models(folder: Path) -> tuple[Path, Path]:
    """(mmproj, text model) for bench/vision_encode.py: a random Qwen3.5-0.8B-shaped vision
    tower as an F16 mmproj, and a one-layer qwen3 text model of width 1024 (mtmd checks it
    against the projection). Cached in `folder`."""
    mmproj, text = folder / "mmproj-qwen35-0.8b-f16.gguf", folder / "text-qwen3-1024-f32.gguf"
    if mmproj.exists() and text.exists():
        return mmproj, text
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tiny_hf"))
    from make_tiny_models import convert, make_tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    if not mmproj.exists():
        save(build_qwen(QWEN_08B_TEXT, QWEN_08B_VISION), folder / "hf")
        convert_mmproj(folder / "hf", mmproj, "f16")
    config = Qwen3Config(vocab_size=320, hidden_size=1024, intermediate_size=256,
                         num_hidden_layers=1, num_attention_heads=8, num_key_value_heads=4,
                         head_dim=128, max_position_embeddings=4096)
    config.architectures = ["Qwen3ForCausalLM"]
    Qwen3ForCausalLM(config).save_pretrained(folder / "hf-text")
    make_tokenizer(320).save_pretrained(folder / "hf-text")
    convert(folder / "hf-text", text)
    return mmproj, text
