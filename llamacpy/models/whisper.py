"""Whisper encoder-decoder (OpenAI whisper/model.py; whisper.cpp's whisper_build_graph_*).

Encoder: log-mel [n_mels, 3000] -> Conv1d(k3) + GELU -> Conv1d(k3, stride 2) + GELU -> + sinusoidal
positions -> pre-norm blocks (LayerNorm, bidirectional attention; LayerNorm, GELU MLP) -> LayerNorm.
Decoder: token + learned position embeddings -> pre-norm blocks (causal self-attention over a KV
cache, cross-attention over the encoder output, MLP) -> LayerNorm -> logits on the tied
embeddings. Tensor names and metadata keys: docs/WHISPER.md. Every matmul goes through
ops.linear.Linear (F16 / F32 / quantized weights, computed in float32).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numba
import numpy as np

from ..format import GGUFError, GGUFFile
from ..ops.linear import Linear, get_rows
from ..ops.norm import layer_norm
from .base import Weights, with_bias


@dataclass(frozen=True)
class WhisperArgs:
    n_mels: int
    n_audio_ctx: int  # encoder positions (1500 for a 30 s window)
    n_text_ctx: int  # decoder positions (448)
    n_embd: int
    n_ff: int
    n_head: int
    n_audio_layer: int
    n_text_layer: int
    n_vocab: int
    eps: float

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> WhisperArgs:
        need = lambda k: int(g.require(f"whisper.{k}"))
        return cls(need("n_mels"), need("encoder.context_length"),
                   need("decoder.context_length"), need("embedding_length"),
                   need("feed_forward_length"), need("attention.head_count"),
                   need("encoder.block_count"), need("decoder.block_count"),
                   len(g.require("tokenizer.ggml.tokens")),
                   float(g.get("whisper.attention.layer_norm_epsilon", 1e-5)))


@numba.njit(parallel=True, cache=True, fastmath=False)
def _gelu_erf(x):  # float32 [n], in place: x * Phi(x) (torch's exact nn.GELU)
    for i in numba.prange(x.size):
        v = x[i]
        x[i] = 0.5 * v * (1.0 + math.erf(v * 0.7071067811865476))


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU, in place on a float32 array (whisper uses nn.GELU, not the tanh form)."""
    _gelu_erf(x.reshape(-1))
    return x


def gelu_reference(x: np.ndarray) -> np.ndarray:
    """Plain twin of `gelu` (a copy; float64 erf through math)."""
    erf = np.vectorize(math.erf)
    return (0.5 * x * (1.0 + erf(x.astype(np.float64) / math.sqrt(2.0)))).astype(np.float32)


class Dense:
    """Linear + optional bias (whisper's K projections have none)."""

    def __init__(self, w: Weights, name: str, n_in: int, n_out: int):
        self.linear = w.linear(name, n_in, n_out)
        self.bias = w.vector(f"{name}.bias", n_out, optional=True)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return with_bias(self.linear(x), self.bias)


class Norm:
    def __init__(self, w: Weights, name: str, n: int, eps: float):
        self.weight, self.bias = w.vector(f"{name}.weight", n), w.vector(f"{name}.bias", n)
        self.eps = eps

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return layer_norm(x, self.weight, self.bias, self.eps)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int,
              causal_offset: int | None = None) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v per head: q [Tq, D], k/v [Tk, D] -> [Tq, D]. With
    `causal_offset` query i sees keys 0..offset+i (the decoder's self-attention)."""
    tq, d = q.shape
    hd = d // n_head
    qh = q.reshape(tq, n_head, hd).transpose(1, 0, 2) * np.float32(hd ** -0.5)
    kh = k.reshape(-1, n_head, hd).transpose(1, 2, 0)
    vh = v.reshape(-1, n_head, hd).transpose(1, 0, 2)
    scores = qh @ kh  # [H, Tq, Tk]
    if causal_offset is not None and tq > 1:
        future = np.arange(k.shape[0])[None, :] > (causal_offset + np.arange(tq))[:, None]
        scores[:, future] = -np.inf
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return np.ascontiguousarray((scores @ vh).transpose(1, 0, 2)).reshape(tq, d)


class Block:
    """A pre-norm block; `cross` adds the decoder's cross-attention between the two."""

    def __init__(self, w: Weights, p: str, a: WhisperArgs, cross: bool):
        d = a.n_embd
        self.n_head = a.n_head
        self.attn_norm = Norm(w, f"{p}.attn_norm", d, a.eps)
        self.attn_q, self.attn_k, self.attn_v, self.attn_output = (
            Dense(w, f"{p}.attn_{x}", d, d) for x in ("q", "k", "v", "output"))
        if cross:
            self.cross_attn_norm = Norm(w, f"{p}.cross_attn_norm", d, a.eps)
            self.cross_attn_q, self.cross_attn_k, self.cross_attn_v, self.cross_attn_output = (
                Dense(w, f"{p}.cross_attn_{x}", d, d) for x in ("q", "k", "v", "output"))
        self.ffn_norm = Norm(w, f"{p}.ffn_norm", d, a.eps)
        self.ffn_up = Dense(w, f"{p}.ffn_up", d, a.n_ff)
        self.ffn_down = Dense(w, f"{p}.ffn_down", a.n_ff, d)

    def ffn(self, x: np.ndarray) -> np.ndarray:
        return self.ffn_down(gelu(self.ffn_up(self.ffn_norm(x))))

    def encode(self, x: np.ndarray) -> np.ndarray:
        h = self.attn_norm(x)
        x = x + self.attn_output(attention(self.attn_q(h), self.attn_k(h), self.attn_v(h),
                                           self.n_head))
        return x + self.ffn(x)


class WhisperCache:
    """Decoder state for one audio window: self-attention K/V per sequence (beam or best-of
    decoder) and layer, filled as tokens are decoded, and the cross-attention K/V of the
    window's encoder output, computed once and shared by every sequence."""

    def __init__(self, a: WhisperArgs, n_seq: int = 1):
        shape = (a.n_text_layer, n_seq, a.n_text_ctx, a.n_embd)
        self.k = np.zeros(shape, np.float32)  # [layer, sequence, position, n_embd]
        self.v = np.zeros(shape, np.float32)  # [layer, sequence, position, n_embd]
        self.cross_k: list[np.ndarray] = []  # per layer [n_audio_ctx, n_embd]
        self.cross_v: list[np.ndarray] = []  # per layer [n_audio_ctx, n_embd]
        self.n_past = 0  # every sequence is at the same position (whisper.cpp's decoders)

    def reorder(self, rows: list[int], src: list[int]) -> None:
        """Sequence rows[i] takes sequence src[i]'s past (whisper_kv_cache_seq_cp on a beam
        reorder); only the rows that change are copied, and only up to n_past."""
        moved = [(r, s) for r, s in zip(rows, src) if r != s]
        if not moved:
            return
        n = self.n_past
        dst, from_ = [r for r, _ in moved], [s for _, s in moved]
        for kv in (self.k, self.v):
            kv[:, dst, :n] = kv[:, from_, :n]  # fancy indexing reads a copy first


def _conv_as_linear(g: GGUFFile, name: str, kernel: int) -> Linear:
    """A Conv1d weight [out, in, k] (ggml ne (k, in, out)) as a Linear over im2col rows."""
    t = g.tensor(name)
    if len(t.ne) != 3 or t.ne[0] != kernel:
        raise GGUFError(f"{g.path}: tensor '{name}' has shape {list(t.ne)}, expected "
                        f"[{kernel}, in, out]")
    return Linear(dataclasses.replace(t, ne=(t.ne[0] * t.ne[1], t.ne[2])))


def _im2col(x: np.ndarray, stride: int) -> np.ndarray:
    """x [C, T] -> [T_out, C * 3] for a kernel-3, padding-1 convolution (in-channel major)."""
    padded = np.pad(x, ((0, 0), (1, 1)))
    t_out = (x.shape[1] - 1) // stride + 1
    cols = np.lib.stride_tricks.sliding_window_view(padded, 3, axis=1)[:, ::stride][:, :t_out]
    return np.ascontiguousarray(cols.transpose(1, 0, 2)).reshape(t_out, -1)


class WhisperModel:
    """Whisper from our GGUF layout: `encode(mel)` once per window, then `decode` token steps."""

    def __init__(self, g: GGUFFile, repack: bool = False):
        self.g = g
        self.args = a = WhisperArgs.from_gguf(g)
        w = Weights(g, repack)
        self.conv1 = _conv_as_linear(g, "enc.conv1.weight", 3)
        self.conv1_b = w.vector("enc.conv1.bias", a.n_embd)
        self.conv2 = _conv_as_linear(g, "enc.conv2.weight", 3)
        self.conv2_b = w.vector("enc.conv2.bias", a.n_embd)
        self.enc_pos = get_rows(g.tensor("enc.position_embd.weight"), np.arange(a.n_audio_ctx))
        self.enc_blocks = [Block(w, f"enc.blk.{i}", a, False) for i in range(a.n_audio_layer)]
        self.enc_norm = Norm(w, "enc.output_norm", a.n_embd, a.eps)
        self.token_embd = g.tensor("dec.token_embd.weight")
        self.output = Linear(self.token_embd)  # tied: logits = x @ token_embd^T
        self.dec_pos = get_rows(g.tensor("dec.position_embd.weight"), np.arange(a.n_text_ctx))
        self.dec_blocks = [Block(w, f"dec.blk.{i}", a, True) for i in range(a.n_text_layer)]
        self.dec_norm = Norm(w, "dec.output_norm", a.n_embd, a.eps)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """mel float32 [n_mels, 2 * n_audio_ctx] -> encoder output [n_audio_ctx, n_embd]."""
        a = self.args
        if mel.shape != (a.n_mels, 2 * a.n_audio_ctx):
            raise ValueError(f"mel has shape {mel.shape}, expected ({a.n_mels}, "
                             f"{2 * a.n_audio_ctx})")
        x = gelu(with_bias(self.conv1(_im2col(np.asarray(mel, np.float32), 1)), self.conv1_b))
        x = gelu(with_bias(self.conv2(_im2col(np.ascontiguousarray(x.T), 2)), self.conv2_b))
        x += self.enc_pos
        for block in self.enc_blocks:
            x = block.encode(x)
        return self.enc_norm(x)

    def new_cache(self, audio_features: np.ndarray, n_seq: int = 1) -> WhisperCache:
        """A fresh decoder cache for one window and `n_seq` sequences, with its cross-attention
        K/V."""
        cache = WhisperCache(self.args, n_seq)
        for block in self.dec_blocks:
            cache.cross_k.append(block.cross_attn_k(audio_features))
            cache.cross_v.append(block.cross_attn_v(audio_features))
        return cache

    def decode(self, tokens: list[int], cache: WhisperCache) -> np.ndarray:
        """Append `tokens` at cache.n_past to every sequence (a prompt, decoded once);
        logits float32 [len(tokens), n_vocab]."""
        p0, n = cache.n_past, len(tokens)
        self._check_room(p0 + n)
        x = get_rows(self.token_embd, np.asarray(tokens)) + self.dec_pos[p0:p0 + n]
        for il, b in enumerate(self.dec_blocks):
            h = b.attn_norm(x)
            cache.k[il, :, p0:p0 + n], cache.v[il, :, p0:p0 + n] = b.attn_k(h), b.attn_v(h)
            x = x + b.attn_output(attention(b.attn_q(h), cache.k[il, 0, :p0 + n],
                                            cache.v[il, 0, :p0 + n], b.n_head, causal_offset=p0))
            x = self._cross_and_ffn(b, il, x, cache)
        cache.n_past = p0 + n
        return self.output(self.dec_norm(x))

    def decode_step(self, tokens: list[int], cache: WhisperCache, rows: list[int]) -> np.ndarray:
        """One token for each of several sequences, in one batch: tokens[i] is appended to
        sequence rows[i] at cache.n_past; logits float32 [len(rows), n_vocab]."""
        p, h_ = cache.n_past, self.args.n_head
        self._check_room(p + 1)
        x = get_rows(self.token_embd, np.asarray(tokens)) + self.dec_pos[p]
        for il, b in enumerate(self.dec_blocks):
            h = b.attn_norm(x)
            cache.k[il, rows, p], cache.v[il, rows, p] = b.attn_k(h), b.attn_v(h)
            k, v = cache.k[il, rows, :p + 1], cache.v[il, rows, :p + 1]  # [B, p + 1, D]
            x = x + b.attn_output(batched_attention(b.attn_q(h), k, v, h_))
            x = self._cross_and_ffn(b, il, x, cache)
        cache.n_past = p + 1
        return self.output(self.dec_norm(x))

    def _cross_and_ffn(self, b: Block, il: int, x: np.ndarray, cache: WhisperCache) -> np.ndarray:
        h = b.cross_attn_norm(x)
        x = x + b.cross_attn_output(attention(b.cross_attn_q(h), cache.cross_k[il],
                                              cache.cross_v[il], b.n_head))
        return x + b.ffn(x)

    def _check_room(self, n: int) -> None:
        if n > self.args.n_text_ctx:
            raise ValueError(f"decoder context is {self.args.n_text_ctx} tokens; {n} requested")


def batched_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int) -> np.ndarray:
    """One query per sequence over its own keys: q [B, D], k/v [B, T, D] -> [B, D]."""
    bsz, t, d = k.shape
    hd = d // n_head
    qh = q.reshape(bsz, n_head, 1, hd) * np.float32(hd ** -0.5)
    kh = k.reshape(bsz, t, n_head, hd).transpose(0, 2, 3, 1)  # [B, H, hd, T]
    scores = qh @ kh  # [B, H, 1, T]
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    out = scores @ v.reshape(bsz, t, n_head, hd).transpose(0, 2, 1, 3)  # [B, H, 1, hd]
    return out.reshape(bsz, d)
