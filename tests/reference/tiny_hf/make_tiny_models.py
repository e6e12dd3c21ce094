"""Tiny random-weight transformers models, converted with llama.cpp's own converter, and their
float32 reference logits: the golden data for tests/models/test_tiny_hf.py.

For every entry of SPECS this script
1. builds the transformers model from a tiny config with seeded random weights (scaled so the
   logits are O(1-10)) and a tiny byte-level BPE tokenizer of the same vocabulary size,
2. saves it with save_pretrained and converts it to an F32 GGUF with llama.cpp's
   convert_hf_to_gguf.py (run in a subprocess against its bundled gguf-py),
3. records the input tokens and transformers' float32 logits for every position, twice: plain
   (`logits`) and with K and V rounded to fp16 before attention (`logits_kv_f16`), which is what
   llama.cpp's default f16 KV cache (and llamacpy's KVCache) does to them.

Output in tests/golden/tiny_hf/: <name>.gguf, <name>.npz (tokens int32 [n], logits and
logits_kv_f16 float32 [n, n_vocab]) and versions.json. Needs torch, transformers and tokenizers
(CI does not: it only reads the outputs):

    .venv/bin/python tests/reference/tiny_hf/make_tiny_models.py [names...]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)
from transformers.models.gemma3 import modeling_gemma3
from transformers.models.llama import modeling_llama
from transformers.models.qwen2 import modeling_qwen2
from transformers.models.qwen3 import modeling_qwen3
from tests.reference.vocab_data import llama_cpp_source  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "tiny_hf"
N_VOCAB = 320  # 256 byte symbols + 1 special token + 63 merges
N_TOKENS = 32
SEED = 1234

# Every config: GQA (n_kv_heads < n_heads), head_dim 16-32, n_ff 2x hidden; each GGUF < 600 KB.
COMMON = dict(vocab_size=N_VOCAB, max_position_embeddings=256, rms_norm_eps=1e-6,
              bos_token_id=0, eos_token_id=0, pad_token_id=None)
SPECS = {
    "llama": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rope_theta=10000.0, tie_word_embeddings=False)),
    # llama3 scaling: wavelengths 2*pi..~2e4 straddle 16 and 64, so all three regimes occur
    "llama-rope-llama3": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=False,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64})),
    "llama-rope-linear": (LlamaConfig, LlamaForCausalLM, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, dict(  # q/k/v biases are built into Qwen2
        hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=1000000.0, tie_word_embeddings=True)),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM, dict(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=32, rope_theta=1000000.0, tie_word_embeddings=True)),
    # 6 layers: 0-4 slide over 8 positions, layer 5 is global; query_pre_attn_scalar = head_dim
    # as llama.cpp assumes for every size but the 27B
    "gemma3": (Gemma3TextConfig, Gemma3ForCausalLM, dict(
        hidden_size=48, intermediate_size=96, num_hidden_layers=6, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, query_pre_attn_scalar=16, sliding_window=8,
        final_logit_softcapping=15.0, tie_word_embeddings=True,
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
}

CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.",
    "A llama walks into the kitchen and asks for a cup of tea with some milk.",
    "Transformers compute attention over the tokens of a sequence, one layer at a time.",
    "Rotary position embeddings rotate pairs of query and key dimensions by an angle.",
    "def main():\n    print('hello, world')\n    return 0\n",
] * 4

# Run by the converter subprocess: the tiny tokenizer's pre-tokenizer hash is unknown to
# get_vocab_base_pre, so report plain byte-level GPT-2 pre-tokenization instead.
CONVERT = """
import sys
import convert_hf_to_gguf
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
convert_hf_to_gguf.main()
"""


def make_tokenizer(n_vocab: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with exactly n_vocab entries."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=n_vocab, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() == n_vocab, tok.get_vocab_size()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token=None)


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int, norm_offset: float) -> None:
    """Seeded weights: matrices ~ N(0, 1/fan_in) keep activations O(1); the output head (or the
    tied embedding) gets std 1.5/sqrt(hidden), so logits have std ~1.5 and reach ~6; norm
    weights vary around 1 (Gemma: around 0, its RMSNorm multiplies by 1 + w)."""
    gen = torch.Generator().manual_seed(seed)
    hidden = model.config.hidden_size
    tied = model.config.tie_word_embeddings
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if "embed_tokens" in name:
            std = 1.5 / math.sqrt(hidden) if tied else 1.0
        elif "lm_head" in name:
            std = 1.5 / math.sqrt(hidden)
        elif p.ndim == 2:
            std = 1.0 / math.sqrt(p.shape[1])
        elif "norm" in name:
            p.copy_(norm_offset + 0.2 * noise)
            continue
        else:  # biases
            std = 0.5
        p.copy_(std * noise)


@contextmanager
def kv_cache_f16():
    """Round K and V (after rope) to fp16 before eager attention, as an f16 KV cache stores them;
    Q, the scores and the softmax stay float32 (llamacpy's attention kernels do the same)."""
    modules = [modeling_llama, modeling_qwen2, modeling_qwen3, modeling_gemma3]
    saved = [m.eager_attention_forward for m in modules]

    def rounded(eager):
        def attention(module, query, key, value, *args, **kwargs):
            return eager(module, query, key.half().float(), value.half().float(), *args, **kwargs)
        return attention

    for m, eager in zip(modules, saved):
        m.eager_attention_forward = rounded(eager)
    try:
        yield
    finally:
        for m, eager in zip(modules, saved):
            m.eager_attention_forward = eager


def reference_logits(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    """float32 [n, n_vocab] for one sequence, with eager attention."""
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        ids = torch.from_numpy(tokens.astype(np.int64))[None]
        return model(ids).logits[0].float().numpy().astype(np.float32)


def convert(model_dir: Path, out: Path) -> None:
    LLAMA_CPP = llama_cpp_source()
    env = dict(os.environ, PYTHONPATH=f"{LLAMA_CPP / 'gguf-py'}{os.pathsep}{LLAMA_CPP}")
    subprocess.run([sys.executable, "-c", CONVERT, str(model_dir), "--outtype", "f32",
                    "--outfile", str(out)], check=True, env=env, cwd=LLAMA_CPP)


def make(name: str, work: Path) -> dict:
    config_cls, model_cls, kwargs = SPECS[name]
    config = config_cls(**COMMON, **kwargs)
    config.architectures = [model_cls.__name__]
    torch.manual_seed(SEED)
    model = model_cls(config).float().eval()
    randomize(model, SEED, norm_offset=0.0 if config.model_type == "gemma3_text" else 1.0)
    model_dir = work / name
    model.save_pretrained(model_dir)
    make_tokenizer(config.vocab_size).save_pretrained(model_dir)

    tokens = np.random.default_rng(SEED).integers(1, config.vocab_size, N_TOKENS, dtype=np.int32)
    logits = reference_logits(model, tokens)
    with kv_cache_f16():
        logits_kv_f16 = reference_logits(model, tokens)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    convert(model_dir, GOLDEN / f"{name}.gguf")
    np.savez_compressed(GOLDEN / f"{name}.npz", tokens=tokens, logits=logits,
                        logits_kv_f16=logits_kv_f16)
    return {"config": kwargs, "logits_abs_max": float(abs(logits).max()),
            "logits_std": float(logits.std()),
            "kv_f16_effect": float(abs(logits - logits_kv_f16).max())}


def main() -> None:
    names = sys.argv[1:] or list(SPECS)
    info = {"transformers": transformers.__version__, "torch": torch.__version__,
            "tokenizers": tokenizers.__version__, "seed": SEED,
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
