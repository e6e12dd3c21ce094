"""Gemma 3 text models: llama.cpp src/models/gemma3.cpp.

Differences from llama: the embedding is scaled by sqrt(n_embd); sandwich norms (a post-norm after
attention and after the feed-forward); GeGLU with tanh-GELU; per-head q/k RMS norms; NEOX rope;
5 of every 6 layers use a sliding window with their own rope base (10000 unless the file says);
the query is scaled by 1/sqrt(head_dim) (27B: 1/sqrt(n_embd / n_head)); optional final softcap.
The norm weights in GGUF already include Gemma's "+1".
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..memory.batch import Batch
from ..format import GGUFFile
from ..format.constants import Keys
from ..ops.activations import gelu_tanh
from ..ops.norm import rms_norm
from ..ops.rope import ROPE_NEOX, rope_cos_sin
from .base import Attention, GatedFFN, ModelArgs, Weights, input_embeddings
from .llama import LlamaModel

SWA_PATTERN = 6  # every 6th layer attends globally (llama_model_gemma3: load_swa_pattern(ml, 6))


class Gemma3Layer:
    def __init__(self, w: Weights, il: int, a: ModelArgs):
        p = f"blk.{il}"
        self.attn_norm = w.vector(f"{p}.attn_norm.weight", a.n_embd)
        self.attention = Attention(w, il, a)
        self.attn_post_norm = w.vector(f"{p}.post_attention_norm.weight", a.n_embd)
        self.ffn_norm = w.vector(f"{p}.ffn_norm.weight", a.n_embd)
        self.ffn = GatedFFN(w, il, a, gelu_tanh)
        self.ffn_post_norm = w.vector(f"{p}.post_ffw_norm.weight", a.n_embd)
        self.uses_swa = a.swa_layers[il]


class Gemma3Model(LlamaModel):
    rope_mode = ROPE_NEOX

    def read_args(self, g: GGUFFile) -> ModelArgs:
        a = ModelArgs.from_gguf(g, self.rope_mode)
        arch = a.arch
        a.n_swa = int(g.get(Keys.Attention.SLIDING_WINDOW.format(arch=arch), 0) or 0)
        pattern = int(g.get(Keys.Attention.SLIDING_WINDOW_PATTERN.format(arch=arch), SWA_PATTERN))
        a.swa_layers = [a.n_swa > 0 and (il + 1) % pattern != 0 for il in range(a.n_layer)]
        base_swa = float(g.get(Keys.Rope.FREQ_BASE_SWA.format(arch=arch), 10000.0))
        a.extra["rope_swa"] = replace(a.rope, freq_base=base_swa, freq_scale=1.0)
        head = a.n_embd / a.n_head if a.n_layer == 62 else a.head_dim_k  # the 27B uses n_embd/n_head
        a.attn_scale = 1.0 / np.sqrt(head)
        return a

    def make_layer(self, w: Weights, il: int, a: ModelArgs) -> Gemma3Layer:
        return Gemma3Layer(w, il, a)

    def kv_rope(self, il: int):
        return self.args.extra["rope_swa"] if self.layers[il].uses_swa else self.args.rope

    def forward(self, batch: Batch, cache) -> np.ndarray:
        a = self.args
        x = input_embeddings(self.token_embd, batch, np.sqrt(a.n_embd))  # images unscaled
        segments = batch.segments()
        rope_global = rope_cos_sin(a.rope, batch.positions)
        rope_local = rope_cos_sin(a.extra["rope_swa"], batch.positions)
        for il, layer in enumerate(self.layers):
            h = layer.attention(rms_norm(x, layer.attn_norm, a.rms_eps), batch, segments, cache,
                                rope_local if layer.uses_swa else rope_global)
            if il == a.n_layer - 1:
                x, h = x[batch.logits], h[batch.logits]
            x = x + rms_norm(h, layer.attn_post_norm, a.rms_eps)
            del h  # not alive through the FFN: a prompt's peak memory is there
            h = layer.ffn(rms_norm(x, layer.ffn_norm, a.rms_eps))
            x = x + rms_norm(h, layer.ffn_post_norm, a.rms_eps)
        logits = self.output(rms_norm(x, self.output_norm, a.rms_eps))
        if a.final_logit_softcap:
            cap = np.float32(a.final_logit_softcap)
            logits = np.tanh(logits / cap) * cap
        return logits
