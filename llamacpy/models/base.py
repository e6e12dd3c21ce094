"""Shared pieces of the transformer families: hyper-parameters from GGUF metadata, weight
binding by GGUF tensor name, and the attention and feed-forward blocks.

Each architecture file (llama.py, qwen2.py, qwen3.py, gemma3.py) composes these in its own
`forward`, which reads top to bottom like llama.cpp's src/models/<arch>.cpp graph builder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..memory.batch import Batch, Segment
from ..memory.kv_cache import KVCache
from ..format import GGUFError, GGUFFile
from ..format.constants import Keys
from ..ops.activations import GATED_KINDS
from ..ops.attention import attend_segment, attend_seqs
from ..ops.linear import Linear, get_rows
from ..ops.norm import rms_norm
from ..ops.rope import ROPE_NEOX, RopeConfig, apply_rope, rope_cos_sin

LLM, ATTN, ROPE = Keys.LLM, Keys.Attention, Keys.Rope


@dataclass
class ModelArgs:
    """Hyper-parameters every family shares, read through gguf's key constants."""

    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim_k: int
    head_dim_v: int
    n_ctx_train: int
    rms_eps: float
    rope: RopeConfig
    n_swa: int = 0  # sliding-window size, 0 = none
    swa_layers: list[bool] = field(default_factory=list)  # per layer: uses the sliding window
    attn_scale: float = 0.0  # 0 = 1/sqrt(head_dim_k)
    final_logit_softcap: float = 0.0
    extra: dict = field(default_factory=dict)  # family-specific values

    @classmethod
    def from_gguf(cls, g: GGUFFile, rope_mode: int = ROPE_NEOX) -> ModelArgs:
        arch = g.require(Keys.General.ARCHITECTURE)

        def key(template: str, default=None, required: bool = False):
            name = template.format(arch=arch)
            value = g.require(name) if required else g.get(name, default)
            return value

        n_embd = int(key(LLM.EMBEDDING_LENGTH, required=True))
        n_head = first_int(key(ATTN.HEAD_COUNT, required=True))
        head_dim_k = int(key(ATTN.KEY_LENGTH, n_embd // n_head))
        args = cls(
            arch=arch,
            n_vocab=vocab_size(g, arch),
            n_embd=n_embd,
            n_layer=int(key(LLM.BLOCK_COUNT, required=True)),
            n_ff=first_int(key(LLM.FEED_FORWARD_LENGTH, required=True)),
            n_head=n_head,
            n_head_kv=first_int(key(ATTN.HEAD_COUNT_KV, n_head)),
            head_dim_k=head_dim_k,
            head_dim_v=int(key(ATTN.VALUE_LENGTH, head_dim_k)),
            n_ctx_train=int(key(LLM.CONTEXT_LENGTH, 2048)),
            rms_eps=float(key(ATTN.LAYERNORM_RMS_EPS, required=True)),
            rope=rope_config(g, arch, head_dim_k, rope_mode),
            final_logit_softcap=float(key(LLM.FINAL_LOGIT_SOFTCAPPING, 0.0) or 0.0),
        )
        args.swa_layers = [False] * args.n_layer
        return args


def first_int(value) -> int:
    """A per-layer array's first entry, or the scalar itself."""
    return int(value[0]) if isinstance(value, (list, np.ndarray)) else int(value)


def vocab_size(g: GGUFFile, arch: str) -> int:
    if LLM.VOCAB_SIZE.format(arch=arch) in g.metadata:
        return int(g.metadata[LLM.VOCAB_SIZE.format(arch=arch)])
    if Keys.Tokenizer.LIST in g.metadata:
        return len(g.metadata[Keys.Tokenizer.LIST])
    return g.tensor("token_embd.weight").ne[1]


def rope_config(g: GGUFFile, arch: str, head_dim: int, mode: int) -> RopeConfig:
    """llama.cpp's rope parameters: n_rot, base, linear/yarn scaling, llama3 freq factors."""
    get = lambda t, d=None: g.get(t.format(arch=arch), d)  # noqa: E731
    n_ctx_train = int(get(LLM.CONTEXT_LENGTH, 2048))
    scaling = get(ROPE.SCALING_TYPE, "none")
    factor = float(get(ROPE.SCALING_FACTOR, 0.0) or 0.0)
    freq_scale = 1.0 / factor if scaling in ("linear", "yarn") and factor > 0 else 1.0
    factors = g.tensors.get("rope_freqs.weight")
    return RopeConfig(
        n_rot=int(get(ROPE.DIMENSION_COUNT, head_dim)),
        freq_base=float(get(ROPE.FREQ_BASE, 10000.0)),
        mode=mode,
        freq_scale=freq_scale,
        ext_factor=1.0 if scaling == "yarn" else 0.0,
        attn_factor=float(get(ROPE.SCALING_ATTN_FACTOR, 1.0) or 1.0),
        beta_fast=float(get(ROPE.SCALING_YARN_BETA_FAST, 32.0)),
        beta_slow=float(get(ROPE.SCALING_YARN_BETA_SLOW, 1.0)),
        n_ctx_orig=int(get(ROPE.SCALING_ORIG_CTX_LEN, n_ctx_train)),
        freq_factors=None if factors is None else factors.data.view(np.float32),
    )


class Weights:
    """Binds GGUF tensors by name, checking each shape (ggml order) against the config.

    With `repack` (llama.cpp's --repack) Q5_0 and IQ4_NL matrices are rewritten once as Q8_0, an
    exact re-encoding (the same results for one token, to float32 rounding for several) that
    multi-token steps run 12-22% faster, for 1.5x the
    bytes; the original pages are then dropped from memory. Off by default: one-token decoding
    and prompts are as fast on the direct Q5_0 / IQ4_NL kernels (measured interleaved: Gemma 3
    270M tg 1.01x, Qwen2.5-Coder-0.5B 1.04x), with less memory and a faster start.
    """

    def __init__(self, g: GGUFFile, repack: bool = False):
        self.g, self.repack = g, repack

    def vector(self, name: str, n: int, optional: bool = False) -> np.ndarray | None:
        t = self.g.tensors.get(name)
        if t is None:
            if optional:
                return None
            raise GGUFError(f"{self.g.path}: tensor '{name}' is missing")
        if t.ne != (n,) or t.ggml_type != 0:
            raise GGUFError(f"{self.g.path}: tensor '{name}' is {t.ggml_type.name} {list(t.ne)}, "
                            f"expected F32 [{n}]")
        return t.data.view(np.float32)

    def linear(self, name: str, n_in: int, n_out: int, optional: bool = False) -> Linear | None:
        t = self.g.tensors.get(f"{name}.weight")
        if t is None:
            if optional:
                return None
            raise GGUFError(f"{self.g.path}: tensor '{name}.weight' is missing")
        if t.ne[:2] != (n_in, n_out):
            raise GGUFError(f"{self.g.path}: tensor '{name}.weight' has shape {list(t.ne)}, "
                            f"expected [{n_in}, {n_out}]")
        layer = Linear(t, repack_q8_0=self.repack)
        if layer.ggml_type != t.ggml_type:
            self.g.release(t)
        return layer


class Attention:
    """Self-attention with grouped KV heads, optional q/k/v biases and per-head q/k RMS norms."""

    def __init__(self, w: Weights, il: int, a: ModelArgs):
        p, nq, nk, nv = f"blk.{il}", a.n_head * a.head_dim_k, a.n_head_kv * a.head_dim_k, \
            a.n_head_kv * a.head_dim_v
        self.attn_q = w.linear(f"{p}.attn_q", a.n_embd, nq)
        self.attn_k = w.linear(f"{p}.attn_k", a.n_embd, nk)
        self.attn_v = w.linear(f"{p}.attn_v", a.n_embd, nv)
        self.attn_output = w.linear(f"{p}.attn_output", a.n_head * a.head_dim_v, a.n_embd)
        self.bias_q = w.vector(f"{p}.attn_q.bias", nq, optional=True)
        self.bias_k = w.vector(f"{p}.attn_k.bias", nk, optional=True)
        self.bias_v = w.vector(f"{p}.attn_v.bias", nv, optional=True)
        self.attn_q_norm = w.vector(f"{p}.attn_q_norm.weight", a.head_dim_k, optional=True)
        self.attn_k_norm = w.vector(f"{p}.attn_k_norm.weight", a.head_dim_k, optional=True)
        self.il, self.a = il, a
        self.n_swa = a.n_swa if a.swa_layers[il] else 0
        self.scale = a.attn_scale or 1.0 / np.sqrt(a.head_dim_k)

    def __call__(self, x: np.ndarray, batch: Batch, segments: list[Segment], cache: KVCache,
                 rope: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        a, n = self.a, x.shape[0]
        q = with_bias(self.attn_q(x), self.bias_q).reshape(n, a.n_head, a.head_dim_k)
        k = with_bias(self.attn_k(x), self.bias_k).reshape(n, a.n_head_kv, a.head_dim_k)
        v = with_bias(self.attn_v(x), self.bias_v).reshape(n, a.n_head_kv, a.head_dim_v)
        if self.attn_q_norm is not None:
            q = rms_norm(q, self.attn_q_norm, a.rms_eps)
            k = rms_norm(k, self.attn_k_norm, a.rms_eps)
        apply_rope(q, *rope, a.rope.mode)
        apply_rope(k, *rope, a.rope.mode)
        out = attend_cached(q, k, v, self.il, batch, segments, cache, self.n_swa, self.scale)
        return self.attn_output(out.reshape(n, -1))


def attend_cached(q: np.ndarray, k: np.ndarray, v: np.ndarray, il: int, batch: Batch,
                  segments: list[Segment], cache: KVCache, n_swa: int,
                  scale: float) -> np.ndarray:
    """Store each segment's k/v [n, n_head_kv, d] in layer il's cache, then attend over it:
    float32 [n, n_head, d_v]. A quantized cache rotates q and the output (KVCache.rotate_q)."""
    q = cache.rotate_q(q)
    out = np.empty((q.shape[0], q.shape[1], v.shape[2]), np.float32)
    stored = False
    if 1 < len(segments) == q.shape[0] and all(s.causal for s in segments):
        # a decode step over several slots: one store and one kernel call for all of them
        cache.store_rows(il, batch.seq_ids, batch.positions, k, v)
        stored = True
        if attend_seqs(q, cache.k[il], cache.v[il], batch.seq_ids, batch.positions, n_swa,
                       scale, out, cache.types):
            return cache.unrotate_out(out)
    for s in segments:
        if not stored:
            cache.store(il, s.seq, s.pos0, k[s.rows], v[s.rows])
        attend_segment(q[s.rows], cache.k[il][s.seq], cache.v[il][s.seq], s,
                       batch.positions[s.rows], n_swa, scale, out[s.rows], cache.types)
    return cache.unrotate_out(out)


def input_embeddings(token_embd, batch: Batch, token_scale: float = 1.0) -> np.ndarray:
    """float32 [n, n_embd]: token rows from the embedding table (times token_scale), image rows
    from batch.embeddings as they are (llm_graph_input_embd: gemma3 scales `ubatch.token` only)."""
    image = batch.tokens < 0
    if batch.embeddings is None or not image.any():
        x = get_rows(token_embd, batch.tokens)
        return x * np.float32(token_scale) if token_scale != 1.0 else x
    x = np.array(batch.embeddings, np.float32)
    if not image.all():
        text = np.flatnonzero(~image)
        x[text] = get_rows(token_embd, batch.tokens[text]) * np.float32(token_scale)
    return x


def with_bias(y: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if bias is not None:
        y += bias
    return y


class GatedFFN:
    """down(act(gate(x)) * up(x)): SwiGLU with silu, GeGLU with tanh-GELU (LLM_FFN_PAR)."""

    def __init__(self, w: Weights, il: int, a: ModelArgs, activation):
        p = f"blk.{il}"
        self.ffn_gate = w.linear(f"{p}.ffn_gate", a.n_embd, a.n_ff)
        self.ffn_up = w.linear(f"{p}.ffn_up", a.n_embd, a.n_ff)
        self.ffn_down = w.linear(f"{p}.ffn_down", a.n_ff, a.n_embd)
        self.activation = activation
        # the kernels' code for it: act(gate) * up is then formed as up is stored
        self.gated_kind = GATED_KINDS.get(activation, -1)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.gated_kind >= 0:
            return self.ffn_down(self.ffn_up.gated(x, self.ffn_gate(x), self.gated_kind))
        h = self.activation(self.ffn_gate(x))
        h *= self.ffn_up(x)
        return self.ffn_down(h)
