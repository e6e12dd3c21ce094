"""LlamaForCausalLM (Llama 2/3, SmolLM2, Mistral-style) -> `llama` (llama.cpp: LlamaModel)."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from .base import Converter
from .decoder import DECODER_BLOCKS, DECODER_GLOBALS
from .kv import KV
from .safetensors import ConvertError


def unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """HF's rotary layout back to GGUF's interleaved one (LlamaModel.permute)."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


class LlamaConverter(Converter):
    arch = "llama"
    hf_archs = ("LlamaForCausalLM", "LLaMAForCausalLM", "MistralForCausalLM", "LlamaModel")
    global_map = DECODER_GLOBALS
    block_map = DECODER_BLOCKS

    def defaults(self, hp):
        # LlamaConfig fills these in, and llama.cpp writes what it fills in
        n_head = hp.get("num_attention_heads")
        if not n_head or "hidden_size" not in hp:
            return {}
        return {"head_dim": hp["hidden_size"] // n_head, "num_key_value_heads": n_head}

    def filter_tensor(self, name):
        return super().filter_tensor(name.replace("text_model.", ""))

    def set_vocab(self, kv: KV) -> None:
        config = self.dir / "tokenizer_config.json"
        if config.is_file():
            from .vocab import read_json
            if (prefix := read_json(config).get("add_prefix_space")) is not None:
                kv.boolean("tokenizer.ggml.add_space_prefix", prefix)
        if self.has_spm():
            self.vocab_sentencepiece(kv)
        elif self._llama_hf_bpe():
            raise ConvertError("a Llama-2-style tokenizer.json (byte-fallback BPE) without "
                               "tokenizer.model is not supported by llamacpy's converter yet")
        else:
            self.vocab_gpt2(kv)
        if self.hp.get("vocab_size", 32000) == 49152:  # granite small models
            kv.boolean("tokenizer.ggml.add_bos_token", False)

    def _llama_hf_bpe(self) -> bool:
        """The tokenizer.json that llama.cpp reads as LlamaHfVocab (SentencePiece-like BPE)."""
        from .vocab import read_json

        path = self.dir / "tokenizer.json"
        if not path.is_file():
            return False
        tok = read_json(path)
        model = tok.get("model", {})
        return (model.get("type") == "BPE" and bool(model.get("byte_fallback", False))
                and (tok.get("decoder") or {}).get("type") == "Sequence")

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        kv.u32(f"{self.arch}.vocab_size", self.hp["vocab_size"])
        rope_dim = self.hp.get("head_dim") or self.hp["hidden_size"] // self.hp[
            "num_attention_heads"]
        kv.u32(f"{self.arch}.rope.dimension_count", rope_dim)

    def modify(self, data, name, bid):
        if "block_sparse_moe.experts" in name:
            raise ConvertError("Mixtral-style experts are not supported by llamacpy's converter")
        if self.hf_arch == "LlamaModel":
            name = "model." + name
        n_head = self.find(("n_heads", "num_attention_heads"))
        n_kv = self.find(("n_kv_heads", "num_key_value_heads"))
        if name.endswith(("q_proj.weight", "q_proj.bias")):
            data = unpermute(data, n_head)
        if name.endswith(("k_proj.weight", "k_proj.bias")):
            data = unpermute(data, n_kv if n_kv is not None else n_head)
        yield self.map_name(name), data

    def extra_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        rope = self.rope.get("full_attention", self.rope)
        if not rope or rope.get("rope_type", "").lower() != "llama3":
            return
        base = rope.get("rope_theta", 10000.0)
        dim = self.hp.get("head_dim") or self.hp["hidden_size"] // self.hp["num_attention_heads"]
        freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
        yield "rope_freqs.weight", llama3_rope_factors(freqs, rope)


def llama3_rope_factors(freqs: np.ndarray, rope: dict) -> np.ndarray:
    """Per-frequency factors of Llama 3.1's rope scaling (LlamaModel.generate_extra_tensors)."""
    factor = rope.get("factor", 8.0)
    low, high = rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)
