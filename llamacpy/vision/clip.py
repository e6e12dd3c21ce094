"""Shared pieces of the vision towers (llama.cpp tools/mtmd/clip.cpp): hyper-parameters from the
mmproj GGUF's `clip.*` keys, weight binding by GGUF tensor name with shape checks, LayerNorm, the
ViT block (clip_graph::build_vit) and the Projector base class every tower file subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format import GGUFError, GGUFFile
from ..format.constants import Keys
from ..ops.activations import gelu_tanh, silu
from ..ops.linear import Linear
from ..ops.rope import ROPE_NEOX, apply_rope
from ..quants import dequantize
from .preprocess import as_rgb

CLIP, VISION = Keys.Clip, Keys.ClipVision
KEY_HEAD_COUNT_KV = "clip.vision.attention.head_count_kv"
KEY_HEAD_DIM = "clip.vision.attention.head_dim"
ATTN_SCRATCH_BYTES = 32 << 20  # one block of attention scores: query rows x keys x 4 bytes


@dataclass
class VisionArgs:
    """clip_hparams for the vision encoder (clip_model_loader::load_hparams)."""

    projector_type: str
    n_embd: int
    n_ff: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    eps: float
    image_size: int
    patch_size: int
    projection_dim: int
    image_mean: np.ndarray  # float32 [3]
    image_std: np.ndarray  # float32 [3]
    ffn_op: str  # "gelu" (tanh form), "silu" or "gelu_quick", from clip.use_gelu / use_silu
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_gguf(cls, g: GGUFFile, projector_type: str) -> VisionArgs:
        n_embd = int(g.require(VISION.EMBEDDING_LENGTH))
        n_head = int(g.require(VISION.Attention.HEAD_COUNT))
        mean = np.asarray(g.require(VISION.IMAGE_MEAN), np.float32)
        std = np.asarray(g.require(VISION.IMAGE_STD), np.float32)
        if mean.size < 3 or std.size < 3:
            raise GGUFError(f"{g.path}: image_mean/image_std need 3 values, got {mean.size} "
                            f"and {std.size}")
        use_gelu = bool(g.get(VISION.USE_GELU, False))
        use_silu = bool(g.get(VISION.USE_SILU, False))
        if use_gelu and use_silu:
            raise GGUFError(f"{g.path}: both clip.use_gelu and clip.use_silu are set")
        return cls(
            projector_type=projector_type,
            n_embd=n_embd,
            n_ff=int(g.require(VISION.FEED_FORWARD_LENGTH)),
            n_layer=int(g.require(VISION.BLOCK_COUNT)),
            n_head=n_head,
            n_head_kv=int(g.get(KEY_HEAD_COUNT_KV, n_head)),
            head_dim=int(g.get(KEY_HEAD_DIM, 0) or n_embd // n_head),
            eps=float(g.require(VISION.Attention.LAYERNORM_EPS)),
            image_size=int(g.require(VISION.IMAGE_SIZE)),
            patch_size=int(g.require(VISION.PATCH_SIZE)),
            projection_dim=int(g.require(VISION.PROJECTION_DIM)),
            image_mean=mean[:3].copy(),
            image_std=std[:3].copy(),
            ffn_op="gelu" if use_gelu else "silu" if use_silu else "gelu_quick",
        )


class VisionWeights:
    """Binds mmproj tensors by GGUF name and checks each shape (ggml order, ne[0] first)."""

    def __init__(self, g: GGUFFile):
        self.g = g

    def get(self, name: str, optional: bool = False):
        t = self.g.tensors.get(name)
        if t is None and not optional:
            raise GGUFError(f"{self.g.path}: tensor '{name}' is missing")
        return t

    def check(self, t, ne: tuple[int, ...]) -> None:
        if tuple(t.ne) != tuple(ne):
            raise GGUFError(f"{self.g.path}: tensor '{t.name}' has shape {list(t.ne)}, "
                            f"expected {list(ne)}")

    def array(self, name: str, ne: tuple[int, ...], optional: bool = False) -> np.ndarray | None:
        """Any tensor dequantized to float32, numpy shape reversed(ne)."""
        t = self.get(name, optional)
        if t is None:
            return None
        self.check(t, ne)
        if t.ggml_type == 0:
            return t.data.view(np.float32).reshape(tuple(reversed(t.ne)))
        return dequantize(t.data, t.ggml_type, t.ne)

    def vector(self, name: str, n: int, optional: bool = False) -> np.ndarray | None:
        return self.array(name, (n,), optional)

    def linear(self, name: str, n_in: int, n_out: int, optional: bool = False):
        """(Linear, float32 bias or None) for `name`.weight [n_in, n_out] and its bias [n_out]."""
        t = self.get(f"{name}.weight", optional)
        if t is None:
            return None
        self.check(t, (n_in, n_out))
        return Linear(t), self.vector(f"{name}.bias", n_out, optional=True)


def dense(layer, x: np.ndarray) -> np.ndarray:
    """x @ W^T + b for a (Linear, bias) pair."""
    linear, bias = layer
    y = linear(x)
    if bias is not None:
        y += bias
    return y


def layer_norm(x: np.ndarray, w: np.ndarray | None, b: np.ndarray | None, eps: float) -> np.ndarray:
    """ggml_norm over the last axis, then the optional weight and bias (clip_graph::build_norm)."""
    x = np.asarray(x, np.float32)
    mean = x.mean(axis=-1, keepdims=True)
    xc = x - mean
    var = np.einsum("...i,...i->...", xc, xc)[..., None] / np.float32(x.shape[-1])
    y = xc * (np.float32(1) / np.sqrt(var + np.float32(eps)))
    if w is not None:
        y *= w
    if b is not None:
        y += b
    return y


def gelu_quick(x: np.ndarray) -> np.ndarray:
    """x * sigmoid(1.702 x) (ggml_gelu_quick)."""
    return x / (np.float32(1) + np.exp(np.float32(-1.702) * x))


ACTIVATIONS = {"gelu": gelu_tanh, "silu": silu, "gelu_quick": gelu_quick}


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Full (non-causal) attention, q/k/v float32 [n, n_head, head_dim] -> [n, n_head * head_dim].
    Per head with BLAS; query rows in blocks so the scores stay within ATTN_SCRATCH_BYTES."""
    n, n_head, d = q.shape
    out = np.empty((n, n_head, v.shape[2]), np.float32)
    rows = max(1, min(n, ATTN_SCRATCH_BYTES // (4 * k.shape[0])))
    group = n_head // k.shape[1]  # grouped KV heads
    for h in range(n_head):
        kh, vh = np.ascontiguousarray(k[:, h // group]), np.ascontiguousarray(v[:, h // group])
        qh = np.ascontiguousarray(q[:, h]) * np.float32(scale)
        for r0 in range(0, n, rows):
            s = qh[r0 : r0 + rows] @ kh.T  # [rows, n keys]
            s -= s.max(axis=1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=1, keepdims=True)
            out[r0 : r0 + rows, h] = s @ vh
    return out.reshape(n, -1)


def apply_vision_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """GGML_ROPE_TYPE_VISION rotates pairs (i, i + head_dim / 2) like NEOX over the whole head."""
    return apply_rope(x, cos, sin, ROPE_NEOX)


class ViTBlock:
    """One pre-norm encoder layer of clip_graph::build_vit: LayerNorm, attention (fused qkv or
    separate q/k/v, optional 2D rope), residual, LayerNorm, FFN, residual."""

    def __init__(self, w: VisionWeights, il: int, a: VisionArgs):
        p, d = f"v.blk.{il}", a.n_head * a.head_dim
        dkv = a.n_head_kv * a.head_dim
        self.ln1_w, self.ln1_b = w.vector(f"{p}.ln1.weight", a.n_embd), \
            w.vector(f"{p}.ln1.bias", a.n_embd, optional=True)
        self.ln2_w, self.ln2_b = w.vector(f"{p}.ln2.weight", a.n_embd), \
            w.vector(f"{p}.ln2.bias", a.n_embd, optional=True)
        self.attn_qkv = w.linear(f"{p}.attn_qkv", a.n_embd, d + 2 * dkv, optional=True)
        if self.attn_qkv is None:
            self.attn_q = w.linear(f"{p}.attn_q", a.n_embd, d)
            self.attn_k = w.linear(f"{p}.attn_k", a.n_embd, dkv)
            self.attn_v = w.linear(f"{p}.attn_v", a.n_embd, dkv)
        self.attn_out = w.linear(f"{p}.attn_out", d, a.n_embd)
        self.ffn_up, self.ffn_down = self._ffn(w, p, a)
        self.ffn_gate = w.linear(f"{p}.ffn_gate", a.n_embd, a.n_ff, optional=True)
        self.act = ACTIVATIONS[a.ffn_op]
        self.a = a
        self.scale = 1.0 / np.sqrt(a.head_dim)

    @staticmethod
    def _ffn(w: VisionWeights, p: str, a: VisionArgs):
        """ffn_up [n_embd -> n_ff] and ffn_down [n_ff -> n_embd]; files from old converters have
        the two names swapped, which llama.cpp undoes by shape (is_ffn_swapped in clip.cpp)."""
        up, down = f"{p}.ffn_up", f"{p}.ffn_down"
        if w.get(f"{up}.weight").ne[0] != a.n_embd and w.get(f"{down}.weight").ne[0] == a.n_embd:
            up, down = down, up
        return w.linear(up, a.n_embd, a.n_ff), w.linear(down, a.n_ff, a.n_embd)

    def __call__(self, x: np.ndarray, rope: tuple[np.ndarray, np.ndarray] | None = None):
        """x float32 [n, n_embd] -> [n, n_embd]; rope: (cos, sin) [n, head_dim / 2] or None."""
        a, n = self.a, x.shape[0]
        h = layer_norm(x, self.ln1_w, self.ln1_b, a.eps)
        if self.attn_qkv is not None:
            qkv = dense(self.attn_qkv, h)
            d, dkv = a.n_head * a.head_dim, a.n_head_kv * a.head_dim
            q, k, v = qkv[:, :d], qkv[:, d : d + dkv], qkv[:, d + dkv :]
        else:
            q, k, v = dense(self.attn_q, h), dense(self.attn_k, h), dense(self.attn_v, h)
        q = np.ascontiguousarray(q).reshape(n, a.n_head, a.head_dim)
        k = np.ascontiguousarray(k).reshape(n, a.n_head_kv, a.head_dim)
        v = np.ascontiguousarray(v).reshape(n, a.n_head_kv, a.head_dim)
        if rope is not None:
            apply_vision_rope(q, *rope)
            apply_vision_rope(k, *rope)
        x = x + dense(self.attn_out, attention(q, k, v, self.scale))
        h = layer_norm(x, self.ln2_w, self.ln2_b, a.eps)
        if self.ffn_gate is not None:
            h = self.act(dense(self.ffn_gate, h)) * dense(self.ffn_up, h)
        else:
            h = self.act(dense(self.ffn_up, h))
        return x + dense(self.ffn_down, h)


@dataclass
class PreparedImage:
    """A preprocessed image: normalised pixels and the token grid they give."""

    pixels: np.ndarray  # float32 [height, width, 3], normalised
    nx: int  # merged grid width (tokens per row)
    ny: int  # merged grid height
    n_tokens: int


@dataclass
class ImageEmbedding:
    """What the text model reads for one image."""

    embeddings: np.ndarray  # float32 [n_tokens, n_embd]
    nx: int  # merged grid width: token i sits at column i % nx ...
    ny: int  # ... and row i // nx (the M-RoPE grid)
    n_tokens: int

    def mrope_positions(self, pos0: int) -> np.ndarray:
        """int32 [4, n_tokens] M-RoPE positions (t, y, x, unused) of the image tokens placed at
        text position pos0 (mtmd_image_tokens_get_decoder_pos + set_position_mrope_2d)."""
        i = np.arange(self.n_tokens, dtype=np.int32)
        return np.stack([np.full_like(i, pos0), pos0 + i // self.nx, pos0 + i % self.nx,
                         np.zeros_like(i)])

    def n_pos(self, mrope: bool) -> int:
        """How far the text position advances past the image (mtmd_image_tokens_get_n_pos)."""
        return max(self.nx, self.ny) if mrope else self.n_tokens


class Projector:
    """Base of every vision tower: subclasses set `projector_type`, build their weights in
    __init__ and implement `prepare` (preprocessing) and `encode_pixels` (the graph)."""

    projector_type = ""

    def __init__(self, g: GGUFFile):
        self.g = g
        self.args = VisionArgs.from_gguf(g, self.projector_type)
        self.weights = VisionWeights(g)

    @property
    def n_embd(self) -> int:
        """Width of each output embedding: the text model's input width (clip_n_mmproj_embd)."""
        return self.args.projection_dim

    def prepare(self, rgb: np.ndarray) -> PreparedImage:
        raise NotImplementedError

    def encode_pixels(self, pixels: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def encode(self, image) -> ImageEmbedding:
        """bytes (JPEG/PNG/WebP...), a PIL image or uint8 RGB [h, w, 3] -> ImageEmbedding.
        Undecodable or empty images raise ImageError (a ValueError)."""
        return self.encode_prepared(self.prepare(as_rgb(image)))

    def encode_prepared(self, prepared: PreparedImage) -> ImageEmbedding:
        """The embeddings of an image `prepare` made (preprocessing and encoding apart, so a
        server checks an image when the request comes and encodes it when it is decoded)."""
        emb = self.encode_pixels(prepared.pixels)
        if emb.shape != (prepared.n_tokens, self.n_embd):
            raise AssertionError(f"{self.projector_type}: produced {emb.shape}, expected "
                                 f"({prepared.n_tokens}, {self.n_embd})")
        return ImageEmbedding(emb, prepared.nx, prepared.ny, prepared.n_tokens)

    def n_tokens(self, width: int, height: int) -> tuple[int, int, int]:
        """(nx, ny, n_tokens) an image of this size gives, without encoding it."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the mapped file; the projector is unusable afterwards."""
        self.g.close()
