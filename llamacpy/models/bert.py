"""BERT encoders (all-MiniLM, bge, e5...): llama.cpp src/models/bert.cpp.

Token + token-type(0) + absolute position embeddings, a LayerNorm, then post-norm blocks:
non-causal attention within each sequence, add and norm, GELU feed-forward, add and norm.
`forward` returns the hidden states of every row (llama.cpp's t_embd); pooling happens in
engine/embedding.py, and `rank_head` is the classifier llama.cpp's build_pooling applies for
rank pooling. No KV cache: a sequence is encoded whole, in one batch.
"""

from __future__ import annotations

import numpy as np

from ..format import GGUFError, GGUFFile
from ..format.constants import Keys
from ..memory.batch import Batch
from ..memory.kv_cache import KVCache
from ..ops.activations import gelu_tanh
from ..ops.linear import get_rows
from ..ops.norm import layer_norm
from .base import ModelArgs, Weights, first_int, vocab_size, with_bias

LLM, ATTN = Keys.LLM, Keys.Attention
POOLING_NONE, POOLING_MEAN, POOLING_CLS, POOLING_LAST, POOLING_RANK = range(5)


def bert_args(g: GGUFFile) -> ModelArgs:
    """Hyper-parameters from the bert.* keys (layer_norm_epsilon, not the rms one; no rope)."""
    arch = g.require(Keys.General.ARCHITECTURE)
    key = lambda t, d=None: g.get(t.format(arch=arch), d)
    need = lambda t: g.require(t.format(arch=arch))
    n_embd, n_head = int(need(LLM.EMBEDDING_LENGTH)), first_int(need(ATTN.HEAD_COUNT))
    return ModelArgs(
        arch=arch, n_vocab=vocab_size(g, arch), n_embd=n_embd,
        n_layer=int(need(LLM.BLOCK_COUNT)), n_ff=first_int(need(LLM.FEED_FORWARD_LENGTH)),
        n_head=n_head, n_head_kv=first_int(key(ATTN.HEAD_COUNT_KV, n_head)),
        head_dim_k=n_embd // n_head, head_dim_v=n_embd // n_head,
        n_ctx_train=int(key(LLM.CONTEXT_LENGTH, 512)),
        rms_eps=float(need(ATTN.LAYERNORM_EPS)), rope=None,
        extra={"pooling": int(key(LLM.POOLING_TYPE, POOLING_NONE)),
               "causal": bool(key(ATTN.CAUSAL, False))})


class BertLayer:
    def __init__(self, w: Weights, il: int, a: ModelArgs):
        p, d = f"blk.{il}", a.n_embd
        self.attn_q, self.attn_k, self.attn_v = (w.linear(f"{p}.attn_{x}", d, d) for x in "qkv")
        self.bias_q, self.bias_k, self.bias_v = (w.vector(f"{p}.attn_{x}.bias", d, optional=True)
                                                 for x in "qkv")
        self.attn_output = w.linear(f"{p}.attn_output", d, d)
        self.attn_output_b = w.vector(f"{p}.attn_output.bias", d, optional=True)
        self.attn_output_norm = w.vector(f"{p}.attn_output_norm.weight", d)
        self.attn_output_norm_b = w.vector(f"{p}.attn_output_norm.bias", d)
        self.ffn_up = w.linear(f"{p}.ffn_up", d, a.n_ff)
        self.ffn_up_b = w.vector(f"{p}.ffn_up.bias", a.n_ff, optional=True)
        self.ffn_down = w.linear(f"{p}.ffn_down", a.n_ff, d)
        self.ffn_down_b = w.vector(f"{p}.ffn_down.bias", d, optional=True)
        self.layer_output_norm = w.vector(f"{p}.layer_output_norm.weight", d)
        self.layer_output_norm_b = w.vector(f"{p}.layer_output_norm.bias", d)


class BertModel:
    encoder = True  # no KV cache, no logits: forward gives hidden states for pooling

    def __init__(self, g: GGUFFile, repack: bool = False):
        self.args = a = bert_args(g)
        if a.extra["causal"]:
            raise GGUFError(f"{g.path}: a causal bert model is not supported")
        w = Weights(g, repack)
        self.token_embd = g.tensor("token_embd.weight")
        self.position_embd = g.tensor("position_embd.weight")
        types = g.tensors.get("token_types.weight")
        # token types are all 0 ("sentence A"), as llama.cpp hard-codes them: row 0 only
        self.type_row0 = None if types is None else get_rows(types, [0])[0]
        self.token_embd_norm = w.vector("token_embd_norm.weight", a.n_embd)
        self.token_embd_norm_b = w.vector("token_embd_norm.bias", a.n_embd)
        self.layers = [BertLayer(w, il, a) for il in range(a.n_layer)]
        self.cls = w.linear("cls", a.n_embd, a.n_embd, optional=True)
        self.cls_b = w.vector("cls.bias", a.n_embd, optional=True)
        out = g.tensors.get("cls.output.weight")
        self.cls_out = None if out is None else w.linear("cls.output", a.n_embd, out.ne[1])
        self.cls_out_b = None if out is None else w.vector("cls.output.bias", out.ne[1],
                                                           optional=True)
        self.has_classifier = self.cls is not None or self.cls_out is not None  # a reranker

    def make_cache(self, n_ctx: int, n_seq: int = 1, type_k: str = "f16",
                   type_v: str = "f16") -> KVCache:
        """An empty cache (no layers): an encoder keeps nothing between batches."""
        a = self.args
        return KVCache(0, n_seq, n_ctx, a.n_head_kv, a.head_dim_k, a.head_dim_v, type_k, type_v)

    def forward(self, batch: Batch, cache: KVCache | None = None) -> np.ndarray:
        """Hidden states float32 [n, n_embd] of every row; rows attend to every row of their
        own sequence (seq_ids), positions index the absolute position table."""
        a = self.args
        if len(batch) and int(batch.positions.max()) >= a.n_ctx_train:
            raise ValueError(f"position {int(batch.positions.max())} is beyond the model's "
                             f"{a.n_ctx_train} positions")
        x = get_rows(self.token_embd, batch.tokens)
        if self.type_row0 is not None:
            x += self.type_row0
        x += get_rows(self.position_embd, batch.positions)
        x = layer_norm(x, self.token_embd_norm, self.token_embd_norm_b, a.rms_eps)
        groups = sequence_rows(batch.seq_ids)
        scale = 1.0 / np.sqrt(a.head_dim_k)
        for layer in self.layers:
            h = self.attention(layer, x, groups, scale)
            x = layer_norm(x + h, layer.attn_output_norm, layer.attn_output_norm_b, a.rms_eps)
            h = gelu_tanh(with_bias(layer.ffn_up(x), layer.ffn_up_b))
            h = with_bias(layer.ffn_down(h), layer.ffn_down_b)
            x = layer_norm(x + h, layer.layer_output_norm, layer.layer_output_norm_b, a.rms_eps)
        return x

    def attention(self, layer: BertLayer, x: np.ndarray, groups: np.ndarray,
                  scale: float) -> np.ndarray:
        a, n = self.args, x.shape[0]
        shape = (n, a.n_head, a.head_dim_k)
        q = with_bias(layer.attn_q(x), layer.bias_q).reshape(shape)
        k = with_bias(layer.attn_k(x), layer.bias_k).reshape(shape)
        v = with_bias(layer.attn_v(x), layer.bias_v).reshape(shape)
        out = attend_sequences(q, k, v, groups, scale)
        return with_bias(layer.attn_output(out.reshape(n, -1)), layer.attn_output_b)

    def rank_head(self, pooled: np.ndarray) -> np.ndarray:
        """Rank pooling's classifier on the [CLS] rows [n_seq, n_embd] (build_pooling, RANK):
        tanh(cls x + b), then cls.output; a model without cls.output keeps the pooled rows."""
        y = pooled
        if self.cls is not None:
            y = np.tanh(with_bias(self.cls(y), self.cls_b))
        if self.cls_out is not None:
            y = with_bias(self.cls_out(y), self.cls_out_b)
        return y


def sequence_rows(seq_ids: np.ndarray) -> np.ndarray:
    """int [n_seq, longest]: each sequence's batch rows in order, padded with -1."""
    seqs, counts = np.unique(seq_ids, return_counts=True)
    out = np.full((len(seqs), int(counts.max(initial=0))), -1, np.intp)
    for i, s in enumerate(seqs):
        rows = np.flatnonzero(seq_ids == s)
        out[i, :len(rows)] = rows
    return out


def attend_sequences(q: np.ndarray, k: np.ndarray, v: np.ndarray, groups: np.ndarray,
                     scale: float) -> np.ndarray:
    """Non-causal attention of q/k/v [n, n_head, d] within each row group of `groups`
    (sequence_rows). Sequences of similar length go together through one batched BLAS product,
    padded to the longest of them (padding masked out of the softmax), so a long sequence does
    not pad every short one to its length. Returns float32 [n, n_head, d]."""
    out = np.empty(q.shape, np.float32)
    lengths = (groups >= 0).sum(axis=1)
    order = np.argsort(-lengths, kind="stable")
    start = 0
    while start < len(order):
        stop, longest = start + 1, lengths[order[start]]
        # grow the bucket while the padded work stays within twice the real work
        while stop < len(order) and longest ** 2 * (stop + 1 - start) <= \
                2 * (lengths[order[start:stop + 1]] ** 2).sum():
            stop += 1
        bucket = groups[order[start:stop], :longest]
        _attend_padded(q, k, v, bucket, scale, out)
        start = stop
    return out


def _attend_padded(q, k, v, groups: np.ndarray, scale: float, out: np.ndarray) -> None:
    """attend_sequences for one bucket of sequences [S, L] (rows, -1 = padding)."""
    valid = groups >= 0
    take = np.where(valid, groups, 0)

    def padded(t):  # [S, n_head, L, d]
        return t[take].transpose(0, 2, 1, 3)

    scores = padded(q) @ padded(k).transpose(0, 1, 3, 2)  # [S, n_head, L, L]
    scores *= np.float32(scale)
    if not valid.all():
        scores[~np.broadcast_to(valid[:, None, None, :], scores.shape)] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    ctx = (scores @ padded(v)).transpose(0, 2, 1, 3)  # [S, L, n_head, d]
    out[groups[valid]] = ctx[valid]
