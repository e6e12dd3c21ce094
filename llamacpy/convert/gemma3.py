"""Gemma3ForCausalLM -> `gemma3` (llama.cpp: Gemma3Model): norms stored as 1 + weight, the
embedding cut to the real vocabulary, and Gemma's defaults for fields a config may omit."""

from __future__ import annotations

from .base import Converter
from .decoder import DECODER_GLOBALS, QK_NORM_BLOCKS
from .kv import KV
from .vocab import spm_vocab, vocab_real_size_json


class Gemma3Converter(Converter):
    arch = "gemma3"
    hf_archs = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")  # the latter's text
    global_map = DECODER_GLOBALS
    block_map = {
        "model.layers.{bid}.input_layernorm": "blk.{bid}.attn_norm",
        "model.layers.{bid}.self_attn.q_proj": "blk.{bid}.attn_q",
        "model.layers.{bid}.self_attn.k_proj": "blk.{bid}.attn_k",
        "model.layers.{bid}.self_attn.v_proj": "blk.{bid}.attn_v",
        "model.layers.{bid}.self_attn.o_proj": "blk.{bid}.attn_output",
        "model.layers.{bid}.post_attention_layernorm": "blk.{bid}.post_attention_norm",
        "model.layers.{bid}.pre_feedforward_layernorm": "blk.{bid}.ffn_norm",
        "model.layers.{bid}.post_feedforward_layernorm": "blk.{bid}.post_ffw_norm",
        "model.layers.{bid}.mlp.gate_proj": "blk.{bid}.ffn_gate",
        "model.layers.{bid}.mlp.up_proj": "blk.{bid}.ffn_up",
        "model.layers.{bid}.mlp.down_proj": "blk.{bid}.ffn_down",
        **QK_NORM_BLOCKS,
    }

    def set_vocab(self, kv: KV) -> None:
        if self.has_spm():
            self.vocab_sentencepiece(kv)
            kv.boolean("tokenizer.ggml.add_space_prefix", False)
        else:
            self.vocab_gpt2(kv)

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        a, hp = self.arch, self.hp
        kv.u32(f"{a}.context_length", hp.get("max_position_embeddings", 131072))
        kv.u32(f"{a}.attention.head_count", hp.get("num_attention_heads", 8))
        kv.f32(f"{a}.attention.layer_norm_rms_epsilon", hp.get("rms_norm_eps", 1e-6))
        kv.u32(f"{a}.attention.key_length", hp.get("head_dim", 256))
        kv.u32(f"{a}.attention.value_length", hp.get("head_dim", 256))
        kv.f32(f"{a}.rope.freq_base",
               self.rope.get("full_attention", self.rope).get("rope_theta", 1_000_000.0))
        if softcap := hp.get("final_logit_softcapping"):
            kv.f32(f"{a}.final_logit_softcapping", softcap)
        if hp.get("sliding_window_pattern") != 1:
            kv.u32(f"{a}.attention.sliding_window", hp["sliding_window"])
        kv.u32(f"{a}.attention.head_count_kv", hp.get("num_key_value_heads", 4))

    def modify(self, data, name, bid):
        if "embed_tokens.weight" in name:
            n_real = (len(spm_vocab(self.dir, self.hp.get("vocab_size"))[0]) if self.has_spm()
                      else vocab_real_size_json(self.dir))
            data = data[:n_real]
        if name.endswith("norm.weight"):
            data = data + 1.0  # Gemma3RMSNorm scales by (1 + weight)
        yield self.map_name(name), data
