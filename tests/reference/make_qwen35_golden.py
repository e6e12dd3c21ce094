"""Tiny random-weight Qwen3.5 text models, converted with llama.cpp's own converter, with
transformers' float32 logits and llama.cpp's: the golden data for tests/models/test_qwen35.py.

For every entry of SPECS this script builds Qwen3_5ForCausalLM from a tiny config with seeded
random weights (tests/reference/qwen35_hf.py), optionally adds an MTP block to the checkpoint,
converts it to an F32 GGUF with convert_hf_to_gguf.py, and records the input tokens, transformers'
logits for every position (one forward: the chunked delta rule and eager attention) and llama.cpp's
(llama-cpp-python, logits_all, f32 KV cache).

Output in tests/golden/qwen35/: <name>.gguf, <name>.npz (tokens int32 [n], logits and
llamacpp_logits float32 [n, n_vocab]) and versions.json. Needs torch and transformers:

    .venv/bin/python tests/reference/make_qwen35_golden.py [names...]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.reference import llamacpp  # noqa: E402
from tests.reference.metrics import full_kld, log_softmax  # noqa: E402
from tests.reference.vocab_data import llama_cpp_source  # noqa: E402
from tests.reference.qwen35_hf import (build, convert, make_config,  # noqa: E402
                                       mtp_tensors, reference_logits, save_model)

GOLDEN = ROOT / "tests" / "golden" / "qwen35"
N_TOKENS = 512  # the span; past several 64-token chunks of the chunked delta rule
SEED = 1235
LINEAR, FULL = "linear_attention", "full_attention"

# GQA (2 query heads per KV head), partial rotary (16 of 32 dims) with interleaved M-RoPE
# sections summing to 8 rotated pairs, 4 value heads over 2 key heads in the delta net.
COMMON = dict(
    vocab_size=320, hidden_size=64, intermediate_size=64, num_attention_heads=2,
    num_key_value_heads=1, head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4,
    linear_key_head_dim=32, linear_value_head_dim=32, linear_conv_kernel_dim=4,
    max_position_embeddings=256, rms_norm_eps=1e-6, tie_word_embeddings=True,
    bos_token_id=0, eos_token_id=0, pad_token_id=None,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                     "mrope_section": [3, 3, 2], "mrope_interleaved": True},
)
SPECS = {
    # layers 0-2 linear, layer 3 full attention (full_attention_interval 4)
    "qwen35": dict(num_hidden_layers=4, mtp=False),
    # an alternating pattern (GGUF: attention.recurrent_layers) and a trailing MTP block
    "qwen35-mtp": dict(num_hidden_layers=4, layer_types=[LINEAR, FULL, LINEAR, FULL], mtp=True),
}


def llamacpp_logits(path: Path, tokens: np.ndarray) -> np.ndarray:
    llm = llamacpp.load_llama(path, n_ctx=1024, n_batch=512, n_ubatch=512, logits_all=True,
                              type_k=0, type_v=0, n_threads=1)  # GGML_TYPE_F32 cache
    llm.eval([int(t) for t in tokens])
    return np.array(llm.scores[: len(tokens)], np.float32)


def make(name: str, work: Path) -> dict:
    spec = dict(SPECS[name])
    mtp = spec.pop("mtp")
    config = make_config(**COMMON, **spec)
    model = build(config, SEED, embed_std=1.5 / np.sqrt(config.hidden_size))
    model_dir = work / name
    save_model(model, model_dir, mtp_tensors(config, SEED + 1) if mtp else None)
    tokens = np.random.default_rng(SEED).integers(1, config.vocab_size, N_TOKENS, dtype=np.int32)
    logits = reference_logits(model, tokens)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    convert(model_dir, GOLDEN / f"{name}.gguf", "f32", mtp=mtp)
    theirs = llamacpp_logits(GOLDEN / f"{name}.gguf", tokens)
    np.savez_compressed(GOLDEN / f"{name}.npz", tokens=tokens, logits=logits,
                        llamacpp_logits=theirs)
    kld = full_kld(log_softmax(logits), log_softmax(theirs))
    return {"config": spec, "mtp": mtp, "logits_std": float(logits.std()),
            "logits_abs_max": float(abs(logits).max()),
            "llamacpp_kld_mean": float(kld.mean()), "llamacpp_kld_max": float(kld.max()),
            "llamacpp_top1": float((logits.argmax(-1) == theirs.argmax(-1)).mean()),
            "llamacpp_max_abs_diff": float(abs(logits - theirs).max())}


def main() -> None:
    names = sys.argv[1:] or list(SPECS)
    import llama_cpp

    info = {"transformers": transformers.__version__, "torch": torch.__version__, "seed": SEED,
            "llama_cpp_python": llama_cpp.__version__,
            "converter": str(llama_cpp_source() / "convert_hf_to_gguf.py"), "n_tokens": N_TOKENS,
            "common_config": COMMON, "models": {}}
    versions = GOLDEN / "versions.json"
    if versions.exists():
        info["models"] = json.loads(versions.read_text()).get("models", {})
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            info["models"][name] = make(name, Path(tmp))
            print(name, info["models"][name])
    versions.write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
