"""Random-weight transformers Qwen3.5 text models (Qwen3_5ForCausalLM) and their conversion with
llama.cpp's own convert_hf_to_gguf.py: shared by tests/reference/make_qwen35_golden.py (tiny
models, golden logits) and bench/make_qwen35_standin.py (the real 0.8B shapes).

Needs torch, transformers, tokenizers and safetensors; nothing under llamacpy imports this.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3_5ForCausalLM, Qwen3_5TextConfig
from tests.reference.vocab_data import llama_cpp_source

N_TOKENIZER = 320  # byte-level BPE entries; the converter pads a larger vocab_size with [PAD] ids

CORPUS = [
    "The quick brown fox jumps over the lazy dog while the cat sleeps in the sun.",
    "Gated delta networks keep a matrix of state per head and forget it at a learned rate.",
    "Transformers compute attention over the tokens of a sequence, one layer at a time.",
    "Rotary position embeddings rotate pairs of query and key dimensions by an angle.",
    "def main():\n    print('hello, world')\n    return 0\n",
] * 4

# The converter subprocess: the tiny tokenizer's pre-tokenizer hash is unknown to
# get_vocab_base_pre, so report Qwen3.5's own pre-tokenizer name instead.
CONVERT = """
import sys
import convert_hf_to_gguf
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen35"
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
convert_hf_to_gguf.main()
"""


def make_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer with N_TOKENIZER entries."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=N_TOKENIZER, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    assert tok.get_vocab_size() == N_TOKENIZER, tok.get_vocab_size()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>",
                                   eos_token="<|endoftext|>", unk_token=None)


def make_config(**kwargs) -> Qwen3_5TextConfig:
    config = Qwen3_5TextConfig(**kwargs)
    config.architectures = ["Qwen3_5ForCausalLM"]
    return config


@torch.no_grad()
def randomize(model: torch.nn.Module, seed: int, embed_std: float) -> None:
    """Seeded weights. Matrices ~ N(0, 1/fan_in) keep activations O(1); the tied embedding (the
    output head) has std `embed_std`. Zero-centred RMS norms (Qwen3_5RMSNorm multiplies by 1 + w)
    get w ~ 0.2 N(0, 1); the gated norm of the delta net multiplies by w, so w ~ 1 + 0.2 N(0, 1).
    The decay rates A = exp(A_log) spread log-uniformly over [0.01, 8]: heads that remember for
    hundreds of tokens and heads that forget within one; dt_bias ~ N(0, 0.5)."""
    gen = torch.Generator().manual_seed(seed)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if "embed_tokens" in name or "lm_head" in name:
            p.copy_(embed_std * noise)
        elif name.endswith("A_log"):
            u = torch.rand(p.shape, generator=gen)
            p.copy_(math.log(0.01) + u * (math.log(8.0) - math.log(0.01)))
        elif name.endswith("dt_bias"):
            p.copy_(0.5 * noise)
        elif "conv1d" in name:  # [channels, 1, kernel]
            p.copy_(noise / math.sqrt(p.shape[-1]))
        elif name.endswith("linear_attn.norm.weight"):
            p.copy_(1.0 + 0.2 * noise)
        elif "norm" in name:
            p.copy_(0.2 * noise)
        elif p.ndim == 2:
            p.copy_(noise / math.sqrt(p.shape[1]))
        else:
            raise ValueError(f"no rule for parameter {name} {tuple(p.shape)}")


def mtp_tensors(config: Qwen3_5TextConfig, seed: int) -> dict[str, torch.Tensor]:
    """One multi-token-prediction block as Qwen3.5 checkpoints store it (mtp.*): a full-attention
    decoder layer plus the fc / pre-fc norms that mix the embedding and the hidden state.
    transformers ignores these tensors (`_keys_to_ignore_on_load_unexpected = ['^mtp.*']`)."""
    gen = torch.Generator().manual_seed(seed)
    h, hd, nq, nkv, ff = (config.hidden_size, config.head_dim, config.num_attention_heads,
                          config.num_key_value_heads, config.intermediate_size)
    shapes = {
        "mtp.fc.weight": (h, 2 * h),
        "mtp.pre_fc_norm_embedding.weight": (h,), "mtp.pre_fc_norm_hidden.weight": (h,),
        "mtp.norm.weight": (h,),
        "mtp.layers.0.input_layernorm.weight": (h,),
        "mtp.layers.0.post_attention_layernorm.weight": (h,),
        "mtp.layers.0.self_attn.q_proj.weight": (2 * nq * hd, h),
        "mtp.layers.0.self_attn.k_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.v_proj.weight": (nkv * hd, h),
        "mtp.layers.0.self_attn.o_proj.weight": (h, nq * hd),
        "mtp.layers.0.self_attn.q_norm.weight": (hd,),
        "mtp.layers.0.self_attn.k_norm.weight": (hd,),
        "mtp.layers.0.mlp.gate_proj.weight": (ff, h),
        "mtp.layers.0.mlp.up_proj.weight": (ff, h),
        "mtp.layers.0.mlp.down_proj.weight": (h, ff),
    }
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen, dtype=torch.float32)
        out[name] = 0.2 * noise if len(shape) == 1 else noise / math.sqrt(shape[1])
    return out


def save_model(model: torch.nn.Module, model_dir: Path, mtp: dict | None = None) -> None:
    """save_pretrained plus the tokenizer; with `mtp`, the MTP tensors are added to the weights
    and config.json gets mtp_num_hidden_layers = 1."""
    model.save_pretrained(model_dir)
    make_tokenizer().save_pretrained(model_dir)
    if mtp:
        files = sorted(model_dir.glob("*.safetensors"))
        assert len(files) == 1, files
        weights = load_file(files[0])
        weights.update({k: v.to(next(iter(weights.values())).dtype) for k, v in mtp.items()})
        save_file(weights, files[0], metadata={"format": "pt"})
        cfg_path = model_dir / "config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["mtp_num_hidden_layers"] = 1
        cfg_path.write_text(json.dumps(cfg, indent=2))


def convert(model_dir: Path, out: Path, outtype: str = "f32", mtp: bool = False) -> None:
    """llama.cpp's convert_hf_to_gguf.py against its bundled gguf-py (a model without an MTP
    block needs --no-mtp)."""
    LLAMA_CPP = llama_cpp_source()
    env = dict(os.environ, PYTHONPATH=f"{LLAMA_CPP / 'gguf-py'}{os.pathsep}{LLAMA_CPP}")
    flags = [] if mtp else ["--no-mtp"]
    subprocess.run([sys.executable, "-c", CONVERT, str(model_dir), "--outtype", outtype,
                    "--outfile", str(out), *flags], check=True, env=env, cwd=LLAMA_CPP)


def reference_logits(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    """float32 [n, n_vocab] for one sequence in one forward (chunked delta rule, eager
    attention)."""
    model.config._attn_implementation = "eager"
    with torch.no_grad():
        ids = torch.from_numpy(tokens.astype(np.int64))[None]
        return model(ids).logits[0].float().numpy().astype(np.float32)


def build(config: Qwen3_5TextConfig, seed: int, embed_std: float,
          dtype: torch.dtype = torch.float32) -> Qwen3_5ForCausalLM:
    """A model with `randomize`'s weights."""
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config).to(dtype).eval()
    randomize(model, seed, embed_std)
    return model


@torch.no_grad()
def build_initialized(config: Qwen3_5TextConfig, seed: int, embed_scale: float,
                      dtype: torch.dtype = torch.float32) -> Qwen3_5ForCausalLM:
    """A model as transformers initialises it (Qwen3_5PreTrainedModel._init_weights: matrices
    N(0, initializer_range), norms at 1, A = U(0.01, 16), dt_bias 1), the seed's draw, with the
    token embedding (tied: also the output head) multiplied by `embed_scale`."""
    torch.manual_seed(seed)
    model = Qwen3_5ForCausalLM(config).to(dtype).eval()
    model.model.embed_tokens.weight.mul_(embed_scale)
    return model
