"""Tiny random Hugging Face checkpoints with real tokenizers, and llama.cpp's converter on them.

The tokenizers are rebuilt from the catalogue GGUFs (Qwen2.5-Coder's and SmolLM2's vocab and
merges, with their tokenizer.json pre-tokenizers), so both converters recognise their
pre-tokenizer hashes ('qwen2', 'smollm') instead of patching get_vocab_base_pre.
Needs torch and transformers; nothing under llamacpy imports this.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

from llamacpy.format import open_gguf
from tests.reference.tiny_hf.make_tiny_models import SPECS, randomize
from tests.reference.vocab_data import llama_cpp_source

QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {
    "qwen2": ({"type": "NFC"}, {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False,
         "use_regex": False}]}),
    "smollm": (None, {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
         "use_regex": True}]}),
}
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
                 "{% endif %}")


def write_tokenizer(gguf_path: Path, kind: str, out: Path) -> int:
    """tokenizer.json + tokenizer_config.json from a GGUF's BPE vocab; returns the vocab size."""
    g = open_gguf(gguf_path)
    tokens, types = g.metadata["tokenizer.ggml.tokens"], g.metadata["tokenizer.ggml.token_type"]
    merges = g.metadata["tokenizer.ggml.merges"]
    bos = g.metadata.get("tokenizer.ggml.bos_token_id")
    eos = g.metadata["tokenizer.ggml.eos_token_id"]
    g.close()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, (t, ty) in enumerate(zip(tokens, types))
             if int(ty) == 3]
    normalizer, pre = PRE_TOKENIZERS[kind]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
           "normalizer": normalizer, "pre_tokenizer": pre,
           "post_processor": {"type": "ByteLevel", "add_prefix_space": False,
                              "trim_offsets": False, "use_regex": False},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                       "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None,
                     "continuing_subword_prefix": "", "end_of_word_suffix": "",
                     "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": {t: i for i, t in enumerate(tokens)},
                     "merges": [m.split(" ") for m in merges]}}
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": tokens[eos],
              "bos_token": tokens[bos] if bos is not None else None, "add_bos_token": False,
              "chat_template": CHAT_TEMPLATE, "model_max_length": 4096}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return len(tokens)


def write_spm_tokenizer(out: Path, n_vocab: int = 300) -> int:
    """A tokenizer.model trained with sentencepiece (BPE, byte fallback) on a small corpus, and a
    tokenizer_config.json with a user-defined added token; returns the vocab size."""
    import sentencepiece as spm

    from tests.reference.tiny_hf.make_tiny_models import CORPUS

    spm.SentencePieceTrainer.train(sentence_iterator=iter(CORPUS * 5), model_prefix=str(
        out / "tokenizer"), vocab_size=n_vocab, model_type="bpe", byte_fallback=True,
        character_coverage=1.0, user_defined_symbols=["<tool>"], minloglevel=2)
    (out / "tokenizer.vocab").unlink()
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>",
              "eos_token": "</s>", "chat_template": CHAT_TEMPLATE, "added_tokens_decoder": {
                  "1": {"content": "<s>", "special": True}, "2": {"content": "</s>",
                                                                  "special": True}}}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return n_vocab


def make_checkpoint(spec: str, vocab_gguf: Path, kind: str, out: Path,
                    dtype: torch.dtype = torch.float32, seed: int = 7, shard: str | None = None,
                    **overrides) -> Path:
    """A tiny random model of SPECS[spec] with the GGUF's tokenizer, saved by transformers."""
    out.mkdir(parents=True, exist_ok=True)
    n_vocab = (write_spm_tokenizer(out) if kind == "spm"
               else write_tokenizer(vocab_gguf, kind, out))
    config_cls, model_cls, kwargs = SPECS[spec]
    kwargs = {**kwargs, "hidden_size": 32, "intermediate_size": 64, **overrides}
    config = config_cls(vocab_size=n_vocab, max_position_embeddings=256, rms_norm_eps=1e-6,
                        bos_token_id=1 if kind == "spm" else None,
                        eos_token_id=2 if kind == "spm" else 0, **kwargs)
    config.architectures = [model_cls.__name__]
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    randomize(model, seed, norm_offset=0.0 if config.model_type == "gemma3_text" else 1.0)
    extra = {"max_shard_size": shard} if shard else {}
    model.to(dtype).save_pretrained(out, safe_serialization=True, **extra)
    (out / "generation_config.json").write_text(json.dumps(
        {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05}))
    return out


def reference_convert(model_dir: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    """llama.cpp's convert_hf_to_gguf.py with its own gguf-py first on the path."""
    src = llama_cpp_source()
    env = dict(os.environ, PYTHONPATH=f"{src / 'gguf-py'}{os.pathsep}{src}")
    return subprocess.run([sys.executable, str(src / "convert_hf_to_gguf.py"), str(model_dir),
                           "--outfile", str(out), *flags], env=env, cwd=src,
                          capture_output=True, text=True)


def gguf_summary(path: Path) -> tuple[list, list]:
    """(metadata [(key, type, value)], tensors [(name, type, ne, bytes hash)]) of a GGUF file."""
    import hashlib
    g = open_gguf(path)
    meta = [(k, int(g.value_types[k]), _plain(v)) for k, v in g.metadata.items()]
    tensors = [(t.name, t.ggml_type.name, tuple(t.ne),
                hashlib.sha256(np.asarray(t.data).tobytes()).hexdigest()[:16])
               for t in g.tensors.values()]
    g.close()
    return meta, tensors


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def make_qwen35_checkpoint(vocab_gguf: Path, out: Path, mtp: bool, seed: int = 5) -> Path:
    """A tiny Qwen3.5 (3 linear + 1 full-attention layer, or alternating with an MTP block) of
    tests/reference/make_qwen35_golden.py's shapes, 32 wide, with Qwen2.5's tokenizer."""
    from tests.reference.make_qwen35_golden import COMMON, SPECS
    from tests.reference.qwen35_hf import build, make_config, mtp_tensors, save_model

    spec = dict(SPECS["qwen35-mtp" if mtp else "qwen35"])
    spec.pop("mtp")
    out.mkdir(parents=True, exist_ok=True)
    config = make_config(**{**COMMON, "vocab_size": 151936, "hidden_size": 32,
                            "intermediate_size": 32}, **spec)
    save_model(build(config, seed, 0.3), out, mtp=mtp_tensors(config, seed + 1) if mtp else None)
    write_tokenizer(vocab_gguf, "qwen2", out)
    return out


def make_gemma3_vision_checkpoint(vocab_gguf: Path, out: Path, seed: int = 9) -> Path:
    """A tiny Gemma3ForConditionalGeneration (2-layer SigLIP, 64 px, 8 px patches, 4 image
    tokens) with the tensor names of the published checkpoints: transformers 5 saves the tower
    as vision_tower.*, the Hub files (and llama.cpp's map) say vision_tower.vision_model.*."""
    from safetensors.numpy import load_file, save_file
    from transformers import (Gemma3Config, Gemma3ForConditionalGeneration, Gemma3TextConfig,
                              SiglipVisionConfig)

    out.mkdir(parents=True, exist_ok=True)
    n_vocab = write_tokenizer(vocab_gguf, "qwen2", out)
    text = Gemma3TextConfig(vocab_size=n_vocab, hidden_size=32, intermediate_size=64,
                            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                            head_dim=16, sliding_window=8, max_position_embeddings=256)
    vision = SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                num_attention_heads=2, image_size=64, patch_size=8)
    config = Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                          mm_tokens_per_image=4, image_token_index=n_vocab - 1,
                          boi_token_index=n_vocab - 3, eoi_token_index=n_vocab - 2)
    config.architectures = ["Gemma3ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    weights = load_file(out / "model.safetensors")
    hub = {("vision_tower.vision_model." + k[len("vision_tower."):]
            if k.startswith("vision_tower.") else k): v for k, v in weights.items()}
    save_file(hub, out / "model.safetensors", metadata={"format": "pt"})
    (out / "preprocessor_config.json").write_text(json.dumps(
        {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5], "image_seq_length": 4}))
    return out


def make_qwen35_vision_checkpoint(vocab_gguf: Path, out: Path, seed: int = 11) -> Path:
    """A tiny Qwen3_5ForConditionalGeneration: the 4-layer text model of make_qwen35_checkpoint
    and a 2-block vision tower (8 px patches, 2x2 merge, 8x8 position table)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration

    from tests.reference.make_qwen35_golden import COMMON

    out.mkdir(parents=True, exist_ok=True)
    text = {**COMMON, "vocab_size": 151936, "hidden_size": 32, "intermediate_size": 32,
            "num_hidden_layers": 4}
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32,
                  num_position_embeddings=64, in_channels=3)
    config = Qwen3_5Config(text_config=text, vision_config=vision)
    config.architectures = ["Qwen3_5ForConditionalGeneration"]
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.1 * torch.randn_like(p))
    model.save_pretrained(out, safe_serialization=True)
    write_tokenizer(vocab_gguf, "qwen2", out)
    (out / "preprocessor_config.json").write_text(json.dumps(
        {"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}))
    return out
