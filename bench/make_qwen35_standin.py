"""A stand-in for Qwen3.5-0.8B: random weights in the real shapes, converted and quantized by
llama.cpp's own tools, for accuracy and speed checks against llama.cpp without the real weights.

    .venv/bin/python bench/make_qwen35_standin.py [--out PATH] [--mtp]

Shapes of Qwen/Qwen3.5-0.8B's text model: hidden 1024, 24 layers as [linear x3, attention] x6,
FFN 3584, attention 8 query / 2 KV heads of 256 (a quarter rotated, M-RoPE sections 11/11/10),
16 delta-net heads of 128, conv kernel 4, vocabulary 248320, tied embedding. The weights are
seeded N(0, 1/fan_in) (tests/reference/qwen35_hf.py); the tied embedding is the initializer's
N(0, 0.02) scaled x10, so logits have std ~6 and next-token distributions are peaked as a trained
model's are. The tokenizer is a tiny byte-level BPE padded to the vocabulary by the converter.

Steps: transformers model (bf16) -> convert_hf_to_gguf.py --outtype f16 -> llama_model_quantize
Q4_0, written to ~/.cache/llama.cpp/qwen35-0.8b-random-q4_0.gguf (not committed; the tests that
need it skip when it is absent). --mtp adds Qwen3.5's multi-token-prediction block (random, as
tests/reference/qwen35_hf.py's mtp_tensors) for --spec-type draft-mtp, written to
qwen35-0.8b-random-mtp-q4_0.gguf. Needs torch, transformers and llama-cpp-python; ~6 GB of memory.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reference.llamacpp import model_quantize  # noqa: E402
from tests.reference.qwen35_hf import (build_initialized, convert, make_config,  # noqa: E402
                                       mtp_tensors, save_model)

STANDIN = Path.home() / ".cache" / "llama.cpp" / "qwen35-0.8b-random-q4_0.gguf"
STANDIN_MTP = STANDIN.with_name("qwen35-0.8b-random-mtp-q4_0.gguf")
LLAMA_FTYPE_MOSTLY_Q4_0 = 2
SEED = 35
SHAPES = dict(
    vocab_size=248320, hidden_size=1024, intermediate_size=3584, num_hidden_layers=24,
    num_attention_heads=8, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
    linear_num_value_heads=16, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, max_position_embeddings=262144, rms_norm_eps=1e-6,
    tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=None,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                     "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                     "mrope_interleaved": True},
)
EMBED_SCALE = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--mtp", action="store_true", help="with an MTP block")
    args = ap.parse_args()
    args.out = args.out or (STANDIN_MTP if args.mtp else STANDIN)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        torch.set_default_dtype(torch.bfloat16)  # build in bf16: half the memory of float32
        config = make_config(**SHAPES)
        model = build_initialized(config, SEED, EMBED_SCALE, torch.bfloat16)
        torch.set_default_dtype(torch.float32)
        save_model(model, Path(tmp) / "hf", mtp_tensors(config, SEED + 1) if args.mtp else None)
        del model
        print(f"built and saved in {time.time() - t0:.0f} s", flush=True)
        f16 = Path(tmp) / "qwen35-0.8b-random-f16.gguf"
        convert(Path(tmp) / "hf", f16, "f16", mtp=args.mtp)
        print(f"converted in {time.time() - t0:.0f} s", flush=True)
        model_quantize(f16, args.out, LLAMA_FTYPE_MOSTLY_Q4_0, nthread=2)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.0f} MiB) in "
          f"{time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
