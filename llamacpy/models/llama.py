"""Llama family (Llama 2/3.x, SmolLM2, Mistral-style): llama.cpp src/models/llama.cpp.

Pre-norm blocks, grouped-query attention with NORM (adjacent-pair) rope, SwiGLU feed-forward,
output head tied to the token embedding when the file has no output.weight.
"""

from __future__ import annotations

import numpy as np

from ..memory.batch import Batch
from ..memory.kv_cache import KVCache
from ..format import GGUFFile
from ..ops.activations import silu
from ..ops.linear import Linear
from ..ops.norm import rms_norm
from ..ops.rope import ROPE_NORM, RopeConfig, rope_cos_sin
from .base import Attention, GatedFFN, ModelArgs, Weights, input_embeddings


class LlamaLayer:
    def __init__(self, w: Weights, il: int, a: ModelArgs):
        self.attn_norm = w.vector(f"blk.{il}.attn_norm.weight", a.n_embd)
        self.attention = Attention(w, il, a)
        self.ffn_norm = w.vector(f"blk.{il}.ffn_norm.weight", a.n_embd)
        self.ffn = GatedFFN(w, il, a, silu)


class LlamaModel:
    rope_mode = ROPE_NORM
    uses_mrope = False  # images advance the position by max(nx, ny) (mtmd's M-RoPE models)

    def __init__(self, g: GGUFFile, repack: bool = False):
        self.args = a = self.read_args(g)
        w = Weights(g, repack)
        self.token_embd = g.tensor("token_embd.weight")
        self.output_norm = w.vector("output_norm.weight", a.n_embd)
        self.output = w.linear("output", a.n_embd, a.n_vocab, optional=True) or \
            Linear(self.token_embd)
        self.layers = [self.make_layer(w, il, a) for il in range(a.n_layer)]

    def read_args(self, g: GGUFFile) -> ModelArgs:
        return ModelArgs.from_gguf(g, self.rope_mode)

    def make_layer(self, w: Weights, il: int, a: ModelArgs) -> LlamaLayer:
        return LlamaLayer(w, il, a)

    def kv_rope(self, il: int) -> RopeConfig:
        """The rope layer `il` rotated its cached keys with (memory/kv_shift.py re-rotates them
        when cells move: llama.cpp's K-shift)."""
        return self.args.rope

    def make_cache(self, n_ctx: int, n_seq: int = 1, type_k: str = "f16",
                   type_v: str = "f16") -> KVCache:
        a = self.args
        return KVCache(a.n_layer, n_seq, n_ctx, a.n_head_kv, a.head_dim_k, a.head_dim_v,
                       type_k, type_v)

    def forward(self, batch: Batch, cache: KVCache, hidden: bool = False) -> np.ndarray:
        """Logits float32 [rows with batch.logits, n_vocab]; with `hidden`, the normed hidden
        states [rows, n_embd] instead (llama.cpp's t_embd, which embeddings pool)."""
        a = self.args
        x = input_embeddings(self.token_embd, batch)
        segments = batch.segments()
        rope = rope_cos_sin(a.rope, batch.positions)
        for il, layer in enumerate(self.layers):
            h = layer.attention(rms_norm(x, layer.attn_norm, a.rms_eps), batch, segments, cache,
                                rope)
            if il == a.n_layer - 1:  # the last layer only needs the rows we return
                x, h = x[batch.logits], h[batch.logits]
            x = x + h
            del h  # not alive through the FFN: a prompt's peak memory is there
            x = x + layer.ffn(rms_norm(x, layer.ffn_norm, a.rms_eps))
        x = rms_norm(x, self.output_norm, a.rms_eps)
        return x if hidden else self.output(x)
