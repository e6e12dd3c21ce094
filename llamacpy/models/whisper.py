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


# erf(z) = z P(z^2) / Q(z^2) on [-4, 4] (Eigen's generic_fast_erf_float), in float64 here:
# within 1.5e-6 of torch's GELU, and a loop LLVM vectorises (math.erf is a scalar libm call)
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


@numba.njit(cache=True, fastmath=True)
def _gelu_erf(x):  # float32 [n], in place: x * Phi(x) (torch's exact nn.GELU)
    a0, a1, a2, a3, a4, a5, a6 = _ERF_P
    b0, b1, b2, b3, b4 = _ERF_Q
    for i in range(x.size):
        v = np.float64(x[i])
        z = min(max(v * 0.7071067811865476, -4.0), 4.0)
        z2 = z * z
        p = (((((a0 * z2 + a1) * z2 + a2) * z2 + a3) * z2 + a4) * z2 + a5) * z2 + a6
        q = (((b0 * z2 + b1) * z2 + b2) * z2 + b3) * z2 + b4
        x[i] = 0.5 * v * (1.0 + z * p / q)


def gelu(x: np.ndarray) -> np.ndarray:
    """GELU (erf form), in place on a float32 array (whisper uses nn.GELU, not the tanh form)."""
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


ATTENTION_CHUNK = 256  # queries per block: a block's scores stay in cache for the softmax


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int,
              causal_offset: int | None = None) -> np.ndarray:
    """softmax(q k^T / sqrt(d)) v per head: q [Tq, D], k/v [Tk, D] -> [Tq, D]. With
    `causal_offset` query i sees keys 0..offset+i (the decoder's self-attention)."""
    tq, d = q.shape
    if causal_offset is None and tq > ATTENTION_CHUNK:
        return _blocked_attention(q, k, v, n_head)
    hd = d // n_head
    qh = q.reshape(tq, n_head, hd).transpose(1, 0, 2) * np.float32(hd ** -0.5)
    kh = k.reshape(-1, n_head, hd).transpose(1, 2, 0)
    vh = v.reshape(-1, n_head, hd).transpose(1, 0, 2)
    scores = qh @ kh  # [H, Tq, Tk]
    if causal_offset is not None and tq > 1:
        future = np.arange(k.shape[0])[None, :] > (causal_offset + np.arange(tq))[:, None]
        scores[:, future] = -np.inf
    _softmax(scores)
    return np.ascontiguousarray((scores @ vh).transpose(1, 0, 2)).reshape(tq, d)


def _softmax(scores: np.ndarray) -> None:
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores *= np.float32(1) / scores.sum(axis=-1, keepdims=True)


def _blocked_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int) -> np.ndarray:
    """The encoder's bidirectional attention, one head and ATTENTION_CHUNK queries at a time."""
    tq, d = q.shape
    hd = d // n_head
    out = np.empty((tq, d), np.float32)
    for h in range(n_head):
        cols = slice(h * hd, (h + 1) * hd)
        qh = q[:, cols] * np.float32(hd ** -0.5)
        kt, vh = np.ascontiguousarray(k[:, cols].T), np.ascontiguousarray(v[:, cols])
        for c0 in range(0, tq, ATTENTION_CHUNK):
            scores = qh[c0:c0 + ATTENTION_CHUNK] @ kt  # [chunk, Tk]
            _softmax(scores)
            out[c0:c0 + ATTENTION_CHUNK, cols] = scores @ vh
    return out


class Dense32:
    """A projection applied to many rows (the encoder, cross-attention K/V): the weights upcast
    once to a float32 [out, in] matrix for sgemm; several that share an input (Q|K|V) are
    stacked into one product."""

    def __init__(self, w: Weights, names: list[str], n_in: int, n_out: int):
        mats, biases = [], []
        for name in names:
            t = w.g.tensor(f"{name}.weight")
            if tuple(t.ne) != (n_in, n_out):
                raise GGUFError(f"{w.g.path}: tensor '{name}.weight' has shape {list(t.ne)}, "
                                f"expected [{n_in}, {n_out}]")
            mats.append(get_rows(t, np.arange(n_out)))
            b = w.vector(f"{name}.bias", n_out, optional=True)
            biases.append(np.zeros(n_out, np.float32) if b is None else b)
        self.weight = np.ascontiguousarray(np.concatenate(mats))  # float32 [parts * out, in]
        self.bias = np.concatenate(biases)  # float32 [parts * out]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        y = x @ self.weight.T
        y += self.bias
        return y


class EncoderBlock:
    """A pre-norm encoder block over the 1500 positions of a window, in float32 sgemm."""

    def __init__(self, w: Weights, p: str, a: WhisperArgs):
        d = a.n_embd
        self.n_head = a.n_head
        self.attn_norm = Norm(w, f"{p}.attn_norm", d, a.eps)
        self.attn_qkv = Dense32(w, [f"{p}.attn_{x}" for x in ("q", "k", "v")], d, d)
        self.attn_output = Dense32(w, [f"{p}.attn_output"], d, d)
        self.ffn_norm = Norm(w, f"{p}.ffn_norm", d, a.eps)
        self.ffn_up = Dense32(w, [f"{p}.ffn_up"], d, a.n_ff)
        self.ffn_down = Dense32(w, [f"{p}.ffn_down"], a.n_ff, d)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        q, k, v = np.split(self.attn_qkv(self.attn_norm(x)), 3, axis=1)
        x += self.attn_output(attention(q, k, v, self.n_head))
        x += self.ffn_down(gelu(self.ffn_up(self.ffn_norm(x))))
        return x


class Block:
    """A pre-norm decoder block: causal self-attention, cross-attention, MLP; the few-token
    projections run on the stored weights through ops.linear's kernels."""

    def __init__(self, w: Weights, p: str, a: WhisperArgs):
        d = a.n_embd
        self.n_head = a.n_head
        self.attn_norm = Norm(w, f"{p}.attn_norm", d, a.eps)
        self.attn_q, self.attn_k, self.attn_v, self.attn_output = (
            Dense(w, f"{p}.attn_{x}", d, d) for x in ("q", "k", "v", "output"))
        self.cross_attn_norm = Norm(w, f"{p}.cross_attn_norm", d, a.eps)
        self.cross_attn_q = Dense(w, f"{p}.cross_attn_q", d, d)
        self.cross_attn_kv = Dense32(w, [f"{p}.cross_attn_k", f"{p}.cross_attn_v"], d, d)
        self.cross_attn_output = Dense(w, f"{p}.cross_attn_output", d, d)
        self.ffn_norm = Norm(w, f"{p}.ffn_norm", d, a.eps)
        self.ffn_up = Dense(w, f"{p}.ffn_up", d, a.n_ff)
        self.ffn_down = Dense(w, f"{p}.ffn_down", a.n_ff, d)

    def ffn(self, x: np.ndarray) -> np.ndarray:
        return self.ffn_down(gelu(self.ffn_up(self.ffn_norm(x))))


class WhisperCache:
    """Decoder state for one audio window: self-attention K/V per sequence (beam or best-of
    decoder) and layer, filled as tokens are decoded, and the cross-attention K/V of the
    window's encoder output, computed once and shared by every sequence."""

    def __init__(self, a: WhisperArgs, n_seq: int = 1):
        shape = (a.n_text_layer, n_seq, a.n_text_ctx, a.n_embd)
        self.k = np.zeros(shape, np.float32)  # [layer, sequence, position, n_embd]
        self.v = np.zeros(shape, np.float32)  # [layer, sequence, position, n_embd]
        self.cross_k: list[np.ndarray] = []  # per layer [n_head, head_dim, n_audio_ctx]
        self.cross_v: list[np.ndarray] = []  # per layer [n_head, n_audio_ctx, head_dim]
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


def _conv_weight(g: GGUFFile, name: str, kernel: int) -> np.ndarray:
    """A Conv1d weight [out, in, k] (ggml ne (k, in, out)) as float32 [out, in * k] rows for
    im2col columns."""
    t = g.tensor(name)
    if len(t.ne) != 3 or t.ne[0] != kernel:
        raise GGUFError(f"{g.path}: tensor '{name}' has shape {list(t.ne)}, expected "
                        f"[{kernel}, in, out]")
    return get_rows(dataclasses.replace(t, ne=(t.ne[0] * t.ne[1], t.ne[2])), np.arange(t.ne[2]))


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
        self.conv1 = _conv_weight(g, "enc.conv1.weight", 3)  # float32 [d, n_mels * 3]
        self.conv1_b = w.vector("enc.conv1.bias", a.n_embd)
        self.conv2 = _conv_weight(g, "enc.conv2.weight", 3)  # float32 [d, d * 3]
        self.conv2_b = w.vector("enc.conv2.bias", a.n_embd)
        self.enc_pos = get_rows(g.tensor("enc.position_embd.weight"), np.arange(a.n_audio_ctx))
        self.enc_blocks = [EncoderBlock(w, f"enc.blk.{i}", a) for i in range(a.n_audio_layer)]
        self.enc_norm = Norm(w, "enc.output_norm", a.n_embd, a.eps)
        self.token_embd = g.tensor("dec.token_embd.weight")
        self.output = Linear(self.token_embd)  # tied: logits = x @ token_embd^T
        self.dec_pos = get_rows(g.tensor("dec.position_embd.weight"), np.arange(a.n_text_ctx))
        self.dec_blocks = [Block(w, f"dec.blk.{i}", a) for i in range(a.n_text_layer)]
        self.dec_norm = Norm(w, "dec.output_norm", a.n_embd, a.eps)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """mel float32 [n_mels, 2 * n_audio_ctx] -> encoder output [n_audio_ctx, n_embd]."""
        a = self.args
        if mel.shape != (a.n_mels, 2 * a.n_audio_ctx):
            raise ValueError(f"mel has shape {mel.shape}, expected ({a.n_mels}, "
                             f"{2 * a.n_audio_ctx})")
        x = gelu(with_bias(_im2col(np.asarray(mel, np.float32), 1) @ self.conv1.T, self.conv1_b))
        x = gelu(with_bias(_im2col(np.ascontiguousarray(x.T), 2) @ self.conv2.T, self.conv2_b))
        x += self.enc_pos
        for block in self.enc_blocks:
            x = block(x)
        return self.enc_norm(x)

    def new_cache(self, audio_features: np.ndarray, n_seq: int = 1) -> WhisperCache:
        """A fresh decoder cache for one window and `n_seq` sequences, with its cross-attention
        K/V."""
        cache = WhisperCache(self.args, n_seq)
        t, h = audio_features.shape[0], self.args.n_head
        for block in self.dec_blocks:  # laid out per head once, for every step's products
            k, v = np.split(block.cross_attn_kv(audio_features), 2, axis=1)
            cache.cross_k.append(np.ascontiguousarray(k.reshape(t, h, -1).transpose(1, 2, 0)))
            cache.cross_v.append(np.ascontiguousarray(v.reshape(t, h, -1).transpose(1, 0, 2)))
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
        q = b.cross_attn_q(b.cross_attn_norm(x))
        x = x + b.cross_attn_output(cross_attention(q, cache.cross_k[il], cache.cross_v[il]))
        return x + b.ffn(x)

    def _check_room(self, n: int) -> None:
        if n > self.args.n_text_ctx:
            raise ValueError(f"decoder context is {self.args.n_text_ctx} tokens; {n} requested")


def cross_attention(q: np.ndarray, kh: np.ndarray, vh: np.ndarray) -> np.ndarray:
    """q [B, D] over one window's keys laid out per head: kh [H, hd, T], vh [H, T, hd]."""
    n_head, hd, _ = kh.shape
    qh = q.reshape(-1, n_head, hd).transpose(1, 0, 2) * np.float32(hd ** -0.5)  # [H, B, hd]
    scores = qh @ kh  # [H, B, T]
    _softmax(scores)
    return np.ascontiguousarray((scores @ vh).transpose(1, 0, 2)).reshape(q.shape)


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
