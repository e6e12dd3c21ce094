"""Qwen3.5 text models (general.architecture qwen35): llama.cpp src/models/qwen35.cpp, with the
Gated DeltaNet of src/models/delta-net-base.cpp.

Every layer is attn_norm -> token mixer -> residual -> post_attention_norm -> SwiGLU -> residual;
the mixer is one of two kinds (llama_model_qwen35::load_arch_hparams picks them: the GGUF's
attention.recurrent_layers, else every full_attention_interval-th layer is attention):
- gated full attention (build_layer_attn): attn_q gives each head's query and output gate side by
  side [q_h | gate_h]; per-head RMS norms on q and k; interleaved M-RoPE on the first n_rot dims
  (rope.dimension_sections); the attention output times sigmoid(gate). Only these have KV cache.
- Gated DeltaNet linear attention (build_layer_attn_linear): attn_qkv through a causal depthwise
  conv (ssm_conv1d, kernel ssm.conv_kernel) and SiLU into q, k, v; q and k L2-normalised; the
  decay g = softplus(ssm_alpha x + ssm_dt.bias) * ssm_a (= -exp(A_log)) and beta =
  sigmoid(ssm_beta x) drive the delta rule (kernels/delta_net.py) over a float32 state per value
  head; then an RMS norm (ssm_norm) gated by silu(attn_gate x), and ssm_out.
The output head is tied to the token embedding when the file has no output.weight. A trailing MTP
block (nextn_predict_layers) runs only as a drafter (--spec-type draft-mtp, engine/mtp_draft.py):
it reads the trunk's final hidden states (h_nextn, which `forward` hands to `hidden_sink`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..memory.batch import Batch, Segment
from ..memory.hybrid_cache import HybridCache, Snapshot
from ..memory.kv_cache import KVCache
from ..format import GGUFError, GGUFFile
from ..format.constants import Keys
from ..kernels.delta_net import conv1d, delta_rule_chunked, delta_rule_recurrent, gates
from ..ops.activations import silu, silu_times
from ..ops.linear import get_rows
from ..ops.norm import rms_norm
from ..ops.rope import ROPE_NEOX, apply_rope, mrope_cos_sin
from .base import GatedFFN, ModelArgs, Weights, attend_cached, input_embeddings
from .llama import LlamaModel

LLM, SSM = Keys.LLM, Keys.SSM
RECURRENT_LAYERS = "{arch}.attention.recurrent_layers"  # LLM_KV_ATTENTION_RECURRENT_LAYERS
FULL_ATTENTION_INTERVAL = 4  # llama_model_qwen35::load_arch_hparams's default


def read_args(g: GGUFFile) -> ModelArgs:
    """ModelArgs plus, in `extra`: recurrent (per trunk layer), rope_sections, d_conv, d_state,
    n_k_heads (ssm.group_count), n_v_heads (ssm.time_step_rank), n_nextn."""
    a = ModelArgs.from_gguf(g, ROPE_NEOX)
    key = lambda k: k.format(arch=a.arch)  # noqa: E731
    n_all = a.n_layer  # block_count includes the MTP blocks (llama_hparams::n_layer)
    n_nextn = int(g.get(key(LLM.NEXTN_PREDICT_LAYERS), 0) or 0)
    a.n_layer = n_all - n_nextn
    recurrent = g.get(key(RECURRENT_LAYERS))
    if recurrent is None:
        every = int(g.get(key(LLM.FULL_ATTENTION_INTERVAL), FULL_ATTENTION_INTERVAL))
        recurrent = [(il + 1) % every != 0 for il in range(a.n_layer)]
    d_state, d_inner = int(g.require(key(SSM.STATE_SIZE))), int(g.require(key(SSM.INNER_SIZE)))
    n_v_heads = int(g.require(key(SSM.TIME_STEP_RANK)))
    n_k_heads = int(g.require(key(SSM.GROUP_COUNT)))
    if d_inner != n_v_heads * d_state or n_v_heads % n_k_heads:  # delta-net-base.cpp's asserts
        raise GGUFError(f"{g.path}: expected ssm.inner_size {d_inner} = time_step_rank "
                        f"{n_v_heads} x state_size {d_state}, time_step_rank a multiple of "
                        f"group_count {n_k_heads}")
    a.extra.update(
        recurrent=[bool(r) for r in list(recurrent)[: a.n_layer]],
        rope_sections=[int(s) for s in g.require(key(Keys.Rope.DIMENSION_SECTIONS))],
        d_conv=int(g.require(key(SSM.CONV_KERNEL))), d_state=d_state,
        n_k_heads=n_k_heads, n_v_heads=n_v_heads, n_nextn=n_nextn)
    return a


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return np.float32(1) / (np.float32(1) + np.exp(-x))


def segment_arrays(segments: list[Segment]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row starts, row stops and sequence ids, int64 [n_segments] each, for the kernels."""
    return (np.array([s.start for s in segments], np.int64),
            np.array([s.stop for s in segments], np.int64),
            np.array([s.seq for s in segments], np.int64))


@dataclass
class UBatch:
    """What every layer needs about the micro-batch, computed once per forward."""

    batch: Batch
    segments: list[Segment]
    rows: tuple[np.ndarray, np.ndarray, np.ndarray]  # segment_arrays(segments)
    rope: tuple[np.ndarray, np.ndarray]  # cos, sin float32 [n, n_rot / 2]
    snapshots: dict[int, list[Snapshot]]  # by sequence: to fill (HybridCache.plan_snapshots)


class GatedAttention:
    """Full attention with a sigmoid output gate per query head (build_layer_attn)."""

    def __init__(self, w: Weights, il: int, a: ModelArgs):
        p, hd = f"blk.{il}", a.head_dim_k
        self.attn_q = w.linear(f"{p}.attn_q", a.n_embd, 2 * a.n_head * hd)  # [q_h | gate_h] x h
        self.attn_k = w.linear(f"{p}.attn_k", a.n_embd, a.n_head_kv * hd)
        self.attn_v = w.linear(f"{p}.attn_v", a.n_embd, a.n_head_kv * a.head_dim_v)
        self.attn_output = w.linear(f"{p}.attn_output", a.n_head * a.head_dim_v, a.n_embd)
        self.attn_q_norm = w.vector(f"{p}.attn_q_norm.weight", hd)
        self.attn_k_norm = w.vector(f"{p}.attn_k_norm.weight", hd)
        self.il, self.a = il, a
        self.scale = 1.0 / np.sqrt(hd)

    def __call__(self, x: np.ndarray, ub: UBatch, cache: HybridCache) -> np.ndarray:
        a, n = self.a, x.shape[0]
        qg = self.attn_q(x).reshape(n, a.n_head, 2, a.head_dim_k)
        q = rms_norm(qg[:, :, 0], self.attn_q_norm, a.rms_eps)
        k = rms_norm(self.attn_k(x).reshape(n, a.n_head_kv, a.head_dim_k), self.attn_k_norm,
                     a.rms_eps)
        v = self.attn_v(x).reshape(n, a.n_head_kv, a.head_dim_v)
        apply_rope(q, *ub.rope, ROPE_NEOX)
        apply_rope(k, *ub.rope, ROPE_NEOX)
        out = attend_cached(q, k, v, self.il, ub.batch, ub.segments, cache, 0, self.scale)
        out *= sigmoid(qg[:, :, 1])
        return self.attn_output(out.reshape(n, -1))


class GatedDeltaNet:
    """Linear attention by the gated delta rule (build_layer_attn_linear); state in the cache."""

    # Segments of at least this many tokens run the chunked delta rule; None: all run the
    # recurrent kernel, the faster form on CPU at every length (0.8B shapes, 512 tokens, 1
    # thread: 28 ms a layer against 55; with 2 threads the BLAS calls of the chunked form are
    # slower still). llama.cpp's CPU backend also runs prompts through the recurrence
    # (ggml_compute_forward_gated_delta_net).
    chunked_min_tokens: int | None = None

    def __init__(self, w: Weights, il: int, a: ModelArgs):
        x, p = a.extra, f"blk.{il}"
        d, n_k, n_v = x["d_state"], x["n_k_heads"], x["n_v_heads"]
        self.conv_dim = 2 * n_k * d + n_v * d
        self.attn_qkv = w.linear(f"{p}.attn_qkv", a.n_embd, self.conv_dim)
        self.attn_gate = w.linear(f"{p}.attn_gate", a.n_embd, n_v * d)  # z
        self.ssm_alpha = w.linear(f"{p}.ssm_alpha", a.n_embd, n_v)
        self.ssm_beta = w.linear(f"{p}.ssm_beta", a.n_embd, n_v)
        self.ssm_a = w.vector(f"{p}.ssm_a", n_v)  # -exp(A_log)
        self.ssm_dt = w.vector(f"{p}.ssm_dt.bias", n_v)
        self.ssm_norm = w.vector(f"{p}.ssm_norm.weight", d)
        self.ssm_out = w.linear(f"{p}.ssm_out", n_v * d, a.n_embd)
        conv = w.g.tensor(f"{p}.ssm_conv1d.weight")
        if conv.ne != (x["d_conv"], self.conv_dim):
            raise GGUFError(f"{w.g.path}: tensor '{conv.name}' has shape {list(conv.ne)}, "
                            f"expected [{x['d_conv']}, {self.conv_dim}]")
        self.conv_wt = np.ascontiguousarray(get_rows(conv, np.arange(self.conv_dim)).T)  # [K, C]
        # build_gdn_l2_norm: an RMS norm with eps / d, times 1 / sqrt(d) = x / sqrt(|x|^2 + eps)
        self.l2_weight = np.full(d, 1 / np.sqrt(d), np.float32)
        self.il, self.a, self.d, self.n_k, self.n_v = il, a, d, n_k, n_v

    def __call__(self, x: np.ndarray, ub: UBatch, cache: HybridCache) -> np.ndarray:
        # A prompt's widest arrays ([n, conv_dim], 12 MiB at 512 tokens) are dropped as soon as
        # they are used and the activations run in place, so that a prompt's peak memory holds
        # few of them at once (the same float operations in the same order)
        a, n, d, n_k, n_v = self.a, x.shape[0], self.d, self.n_k, self.n_v
        qkv = self.attn_qkv(x)  # [n, conv_dim]
        g, beta = gates(self.ssm_alpha(x), self.ssm_beta(x), self.ssm_dt, self.ssm_a)  # [n, n_v]
        self._snapshot_conv(qkv, ub, cache.conv[self.il])
        conv = conv1d(qkv, *ub.rows, cache.conv[self.il], self.conv_wt, np.empty_like(qkv))
        del qkv
        conv = silu(conv, out=conv)
        eps = a.rms_eps / d
        q = rms_norm(conv[:, : n_k * d].reshape(n, n_k, d), self.l2_weight, eps)
        k = rms_norm(conv[:, n_k * d : 2 * n_k * d].reshape(n, n_k, d), self.l2_weight, eps)
        v = np.ascontiguousarray(conv[:, 2 * n_k * d :]).reshape(n, n_v, d)
        del conv
        out = np.empty((n, n_v, d), np.float32)
        self._delta_rule(q, k, v, g, beta, ub, cache.ssm[self.il], out)
        del q, k, v
        z = self.attn_gate(x).reshape(n, n_v, d)
        out = silu_times(z, rms_norm(out, self.ssm_norm, a.rms_eps))
        return self.ssm_out(out.reshape(n, -1))

    def _snapshot_conv(self, qkv, ub: UBatch, states) -> None:
        """Each planned snapshot's conv state: the K - 1 inputs before its position, taken from
        the state before this batch and the batch's own rows."""
        km1 = states.shape[1]
        for s in ub.segments:
            for snap in ub.snapshots.get(s.seq, []):
                at = s.start + snap.pos - s.pos0  # the snapshot's first row not yet taken in
                if at - km1 >= s.start:
                    snap.conv[self.il] = qkv[at - km1 : at].copy()
                else:
                    snap.conv[self.il] = np.concatenate(
                        [states[s.seq][at - s.start :], qkv[s.start : at]])

    def _delta_rule(self, q, k, v, g, beta, ub: UBatch, states, out) -> None:
        """Every recurrent segment without snapshots in one kernel call; the others one by one,
        a segment with snapshots in pieces that end at them, the state copied after each."""
        snapshots = ub.snapshots
        plain = [s for s in ub.segments if not snapshots.get(s.seq) and not self._chunked(s)]
        if len(plain) == len(ub.segments):  # decoding: every sequence one token
            delta_rule_recurrent(q, k, v, g, beta, *ub.rows, states, out)
            return
        if plain:
            delta_rule_recurrent(q, k, v, g, beta, *segment_arrays(plain), states, out)
        for s in ub.segments:
            if s in plain:
                continue
            start = s.start
            for snap in snapshots.get(s.seq, []) + [None]:
                stop = s.stop if snap is None else s.start + snap.pos - s.pos0
                if stop > start:
                    self._piece(q, k, v, g, beta, Segment(s.seq, start, stop, 0), states, out)
                if snap is not None and not snap.live:  # a live one is the state itself
                    snap.ssm[self.il] = states[s.seq].copy()
                start = stop

    def _chunked(self, s: Segment) -> bool:
        return self.chunked_min_tokens is not None and s.stop - s.start >= self.chunked_min_tokens

    def _piece(self, q, k, v, g, beta, s: Segment, states, out) -> None:
        if self._chunked(s):
            r = s.rows
            delta_rule_chunked(q[r], k[r], v[r], g[r], beta[r], states[s.seq], out[r])
        else:
            delta_rule_recurrent(q, k, v, g, beta, *segment_arrays([s]), states, out)


class Qwen35Layer:
    def __init__(self, w: Weights, il: int, a: ModelArgs):
        p = f"blk.{il}"
        self.attn_norm = w.vector(f"{p}.attn_norm.weight", a.n_embd)
        self.mixer = GatedDeltaNet(w, il, a) if a.extra["recurrent"][il] else \
            GatedAttention(w, il, a)
        self.post_attention_norm = w.vector(f"{p}.post_attention_norm.weight", a.n_embd)
        self.ffn = GatedFFN(w, il, a, silu)


class MTPBlock:
    """The multi-token-prediction block (llama_model_qwen35::load_block_mtp and graph_mtp): a
    full-attention decoder block over eh_proj([enorm(embed(x_p)) | hnorm(h_{p-1})]), where
    h_{p-1} is the trunk's h_nextn at the position before (or the block's own output while it
    drafts ahead); its output, normed, feeds the shared LM head. Its attention has a one-layer
    cache of its own (`make_cache`)."""

    def __init__(self, w: Weights, il: int, a: ModelArgs):
        p = f"blk.{il}"
        self.attn_norm = w.vector(f"{p}.attn_norm.weight", a.n_embd)
        self.attention = GatedAttention(w, il, a)
        self.attention.il = 0  # layer 0 of the block's own cache, not the trunk's layer il
        self.post_attention_norm = w.vector(f"{p}.post_attention_norm.weight", a.n_embd)
        self.ffn = GatedFFN(w, il, a, silu)
        self.eh_proj = w.linear(f"{p}.nextn.eh_proj", 2 * a.n_embd, a.n_embd)
        self.enorm = w.vector(f"{p}.nextn.enorm.weight", a.n_embd)
        self.hnorm = w.vector(f"{p}.nextn.hnorm.weight", a.n_embd)
        self.shared_head_norm = w.vector(f"{p}.nextn.shared_head_norm.weight", a.n_embd,
                                         optional=True)
        embed = f"{p}.nextn.embed_tokens.weight"  # optional: the trunk's token_embd otherwise
        self.embed_tokens = w.g.tensor(embed) if embed in w.g.tensors else None
        self.shared_head_head = w.linear(f"{p}.nextn.shared_head_head", a.n_embd, a.n_vocab,
                                         optional=True)
        self.a = a

    def make_cache(self, n_ctx: int, n_seq: int) -> KVCache:
        a = self.a
        return KVCache(1, n_seq, n_ctx, a.n_head_kv, a.head_dim_k, a.head_dim_v)

    def forward(self, model: "Qwen35Model", batch: Batch, h: np.ndarray,
                cache: KVCache) -> np.ndarray:
        """h_nextn float32 [n, n_embd] of the block for batch.tokens paired row by row with
        h [n, n_embd]; stores the rows' K/V in `cache` (the caller commits them)."""
        a, eps = self.a, self.a.rms_eps
        embed = model.token_embd if self.embed_tokens is None else self.embed_tokens
        e = rms_norm(input_embeddings(embed, batch), self.enorm, eps)
        x = self.eh_proj(np.concatenate([e, rms_norm(h, self.hnorm, eps)], axis=1))
        segments = batch.segments()
        ub = UBatch(batch, segments, segment_arrays(segments),
                    mrope_cos_sin(a.rope, a.extra["rope_sections"], batch.mrope()), {})
        x = x + self.attention(rms_norm(x, self.attn_norm, eps), ub, cache)
        x = x + self.ffn(rms_norm(x, self.post_attention_norm, eps))
        head_norm = self.shared_head_norm if self.shared_head_norm is not None \
            else model.output_norm
        return rms_norm(x, head_norm, eps)

    def head(self, model: "Qwen35Model"):
        """The block's output head: its own, else the model's."""
        return model.output if self.shared_head_head is None else self.shared_head_head

    def logits(self, model: "Qwen35Model", h: np.ndarray) -> np.ndarray:
        return self.head(model)(h)


class Qwen35Model(LlamaModel):
    rope_mode = ROPE_NEOX  # the pairing of ggml's IMROPE
    uses_mrope = True

    def __init__(self, g: GGUFFile, repack: bool = False):
        super().__init__(g, repack)
        a, w = self.args, Weights(g, repack=False)
        self.mtp = [MTPBlock(w, il, a) for il in range(a.n_layer, a.n_layer + a.extra["n_nextn"])]
        # called with (batch, h_nextn of every row) after each forward, when an MTP drafter runs
        self.hidden_sink = None

    def read_args(self, g: GGUFFile) -> ModelArgs:
        return read_args(g)

    def make_layer(self, w: Weights, il: int, a: ModelArgs) -> Qwen35Layer:
        return Qwen35Layer(w, il, a)

    def make_cache(self, n_ctx: int, n_seq: int = 1, type_k: str = "f16",
                   type_v: str = "f16") -> HybridCache:
        a, x = self.args, self.args.extra
        d, n_k, n_v = x["d_state"], x["n_k_heads"], x["n_v_heads"]
        return HybridCache(x["recurrent"], n_seq, n_ctx, a.n_head_kv, a.head_dim_k, a.head_dim_v,
                           conv_shape=(x["d_conv"] - 1, 2 * n_k * d + n_v * d),
                           ssm_shape=(n_v, d, d), type_k=type_k, type_v=type_v)

    def forward(self, batch: Batch, cache: HybridCache) -> np.ndarray:
        """Logits float32 [rows with batch.logits, n_vocab]."""
        a = self.args
        x = input_embeddings(self.token_embd, batch)
        segments = batch.segments()
        ub = UBatch(batch, segments, segment_arrays(segments),
                    mrope_cos_sin(a.rope, a.extra["rope_sections"], batch.mrope()),
                    cache.plan_snapshots(segments))
        sink = self.hidden_sink
        for il, layer in enumerate(self.layers):
            h = layer.mixer(rms_norm(x, layer.attn_norm, a.rms_eps), ub, cache)
            if il == a.n_layer - 1 and sink is None:  # the last layer only needs the rows we return
                x, h = x[batch.logits], h[batch.logits]
            x = x + h
            del h  # not alive through the FFN: a prompt's peak memory is there
            x = x + layer.ffn(rms_norm(x, layer.post_attention_norm, a.rms_eps))
        h_nextn = rms_norm(x, self.output_norm, a.rms_eps)
        if sink is not None:  # an MTP drafter reads every row's (llama_get_embeddings_nextn)
            sink(batch, h_nextn)
            h_nextn = h_nextn[batch.logits]
        return self.output(h_nextn)
