"""Qwen2ForCausalLM -> `qwen2` (llama.cpp: Qwen2Model)."""

from __future__ import annotations

from .base import Converter
from .decoder import DECODER_BLOCKS, DECODER_GLOBALS
from .kv import KV


class Qwen2Converter(Converter):
    arch = "qwen2"
    hf_archs = ("Qwen2ForCausalLM", "Qwen2Model")
    global_map = DECODER_GLOBALS
    block_map = DECODER_BLOCKS

    def set_vocab(self, kv: KV) -> None:
        if self.has_spm():
            self.vocab_sentencepiece(kv)
        else:
            self.vocab_gpt2(kv)

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        self.pooling_type(kv)

    def modify(self, data, name, bid):
        if self.hf_arch == "Qwen2Model":
            name = "model." + name  # the bare model's names, as Qwen2ForCausalLM's
        yield self.map_name(name), data
