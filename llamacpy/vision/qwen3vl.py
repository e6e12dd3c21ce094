"""Qwen3-VL / Qwen3.5 vision tower, projector type `qwen3vl_merger`: llama.cpp
tools/mtmd/models/qwen3vl.cpp (graph) and clip.cpp (hparams, M-RoPE positions).

Patch 16 (from the file); the Conv3D patch embedding is stored as two Conv2D kernels (its two
temporal slices), summed here since both see the same still image; a learned position table
(n x n) resized bilinearly with aligned corners to the patch grid; tokens reordered so every 2x2
block is contiguous; pre-norm ViT blocks with 2D rope (rows on the first half of each head's
rotary pairs, columns on the second); post LayerNorm; each 2x2 block concatenated and sent through
a tanh-GELU MLP to the text width. Layers flagged in clip.vision.is_deepstack_layers also emit
merged features (LayerNorm, MLP), concatenated after the main ones along the feature axis.
"""

from __future__ import annotations

import numpy as np

from ..ops.activations import gelu_tanh
from .clip import VISION, PreparedImage, Projector, ViTBlock, dense, layer_norm
from .preprocess import Resample, normalize, resize_image, smart_size

ROPE_THETA = 10000.0  # hard-coded in the graph (ggml_rope_multi ... 10000)
MIN_TOKENS, MAX_TOKENS = 8, 4096  # hparams.set_limit_image_tokens(8, 4096)


class Qwen3VLProjector(Projector):
    projector_type = "qwen3vl_merger"

    def __init__(self, g, image_min_tokens: int = -1, image_max_tokens: int = -1):
        super().__init__(g)
        a, w = self.args, self.weights
        self.n_merge = int(g.get(VISION.SPATIAL_MERGE_SIZE, 2) or 2)
        if self.n_merge != 2:
            raise ValueError(f"{g.path}: qwen3vl_merger needs spatial_merge_size 2, "
                             f"got {self.n_merge}")
        p, e = a.patch_size, a.n_embd
        self.patch_size = p
        area = (p * self.n_merge) ** 2  # pixels per output token
        self.min_pixels = (image_min_tokens if image_min_tokens > 0 else MIN_TOKENS) * area
        self.max_pixels = (image_max_tokens if image_max_tokens > 0 else MAX_TOKENS) * area
        # Conv3D split in two Conv2D: conv(W0, x) + conv(W1, x) = conv(W0 + W1, x)
        k0 = w.array("v.patch_embd.weight", (p, p, 3, e))
        k1 = w.array("v.patch_embd.weight.1", (p, p, 3, e))
        self.patch_kernel = np.ascontiguousarray((k0 + k1).reshape(e, 3 * p * p).T)  # [3*p*p, e]
        self.patch_bias = w.vector("v.patch_embd.bias", e)
        self.position_embd, self.pos_side = self._position_table()  # [n * n, e], n
        self.layers = [ViTBlock(w, il, a) for il in range(a.n_layer)]
        self.post_ln = (w.vector("v.post_ln.weight", e, optional=True),
                        w.vector("v.post_ln.bias", e, optional=True))
        n_merged = e * self.n_merge ** 2
        self.mm_0 = w.linear("mm.0", n_merged, n_merged)
        self.mm_2 = w.linear("mm.2", n_merged, a.projection_dim)
        flags = g.get(VISION.IS_DEEPSTACK_LAYERS, None)
        self.deepstack = {il: self._deepstack(il, n_merged) for il in range(a.n_layer)
                          if flags is not None and bool(flags[il])}

    def _position_table(self) -> tuple[np.ndarray, int]:
        w, e = self.weights, self.args.n_embd
        n_pos = w.get("v.position_embd.weight").ne[1]
        side = int(round(np.sqrt(n_pos)))
        if side * side != n_pos:
            raise ValueError(f"{self.g.path}: position table of {n_pos} rows is not square")
        return w.array("v.position_embd.weight", (e, n_pos)), side

    def _deepstack(self, il: int, n_merged: int):
        w, pd = self.weights, self.args.projection_dim
        return ((w.vector(f"v.deepstack.{il}.norm.weight", n_merged),
                 w.vector(f"v.deepstack.{il}.norm.bias", n_merged, optional=True)),
                w.linear(f"v.deepstack.{il}.fc1", n_merged, n_merged),
                w.linear(f"v.deepstack.{il}.fc2", n_merged, pd))

    @property
    def n_embd(self) -> int:
        """projection_dim * (1 + deepstack layers): the text model's n_embd_inp."""
        return self.args.projection_dim * (1 + len(self.deepstack))

    def target_size(self, width: int, height: int) -> tuple[int, int]:
        """mtmd_image_preprocessor_dyn_size: multiples of patch * merge within the pixel limits."""
        return smart_size(width, height, self.patch_size * self.n_merge, self.min_pixels,
                          self.max_pixels)

    def n_tokens(self, width: int, height: int) -> tuple[int, int, int]:
        tw, th = self.target_size(width, height)
        f = self.patch_size * self.n_merge
        return tw // f, th // f, (tw // f) * (th // f)

    def prepare(self, rgb: np.ndarray) -> PreparedImage:
        tw, th = self.target_size(rgb.shape[1], rgb.shape[0])
        resized = resize_image(rgb, tw, th, Resample.BICUBIC)
        nx, ny, n = self.n_tokens(rgb.shape[1], rgb.shape[0])
        return PreparedImage(normalize(resized, self.args.image_mean, self.args.image_std),
                             nx, ny, n)

    def encode_pixels(self, pixels: np.ndarray) -> np.ndarray:
        """Normalised pixels float32 [h, w, 3] (multiples of 2 * patch) -> [n_tokens, n_embd]."""
        a, p = self.args, self.patch_size
        gh, gw = pixels.shape[0] // p, pixels.shape[1] // p
        if pixels.shape[0] != gh * p or pixels.shape[1] != gw * p or gh % 2 or gw % 2:
            raise ValueError(f"image of {pixels.shape[1]}x{pixels.shape[0]} is not a multiple "
                             f"of {2 * p} on both sides")
        patches = pixels.reshape(gh, p, gw, p, 3).transpose(0, 2, 4, 1, 3).reshape(gh * gw, -1)
        x = patches @ self.patch_kernel + self.patch_bias  # [gh*gw, e], row-major patches
        order = merge_order(gh, gw)
        x = x[order] + self.position_table(gh, gw)[order]
        rope = vision_rope(order // gw, order % gw, a.head_dim)
        stacked = []
        for il, layer in enumerate(self.layers):
            x = layer(x, rope)
            if il in self.deepstack:
                norm, fc1, fc2 = self.deepstack[il]
                feat = layer_norm(x.reshape(-1, 4 * a.n_embd), *norm, a.eps)
                stacked.append(dense(fc2, gelu_tanh(dense(fc1, feat))))
        x = layer_norm(x, *self.post_ln, a.eps) if self.post_ln[0] is not None else x
        x = x.reshape(-1, 4 * a.n_embd)  # each 2x2 block, in (dy, dx) order
        out = dense(self.mm_2, gelu_tanh(dense(self.mm_0, x)))
        return np.concatenate([out, *stacked], axis=1) if stacked else out

    def position_table(self, gh: int, gw: int) -> np.ndarray:
        """The learned table resized to gh x gw patches, float32 [gh * gw, e] row-major
        (resize_position_embeddings with BILINEAR | ALIGN_CORNERS)."""
        n = self.pos_side
        table = self.position_embd.reshape(n, n, -1)
        if (gh, gw) == (n, n):
            return table.reshape(n * n, -1)
        y0, y1, dy = _align_corners(gh, n)
        x0, x1, dx = _align_corners(gw, n)
        dx, dy = dx[None, :, None], dy[:, None, None]
        one = np.float32(1)
        out = (table[y0][:, x0] * (one - dx) * (one - dy) + table[y0][:, x1] * dx * (one - dy)
               + table[y1][:, x0] * (one - dx) * dy + table[y1][:, x1] * dx * dy)
        return out.reshape(gh * gw, -1).astype(np.float32)


def _align_corners(n_out: int, n_in: int):
    """Source indices and weights of ggml_interpolate's bilinear, align-corners mode (float32)."""
    f32 = np.float32
    sf = f32(n_out - 1) / f32(n_in - 1) if n_out > 1 and n_in > 1 else f32(n_out) / f32(n_in)
    pos = np.arange(n_out, dtype=np.float32) / sf
    i0 = np.floor(pos).astype(np.int64)
    i1 = np.clip(i0 + 1, 0, n_in - 1)
    i0 = np.clip(i0, 0, n_in - 1)
    d = np.clip(pos - i0.astype(np.float32), 0, 1).astype(np.float32)
    return i0, i1, d


def merge_order(gh: int, gw: int) -> np.ndarray:
    """Row-major patch index of each token in merge order: 2x2 blocks row by row, and inside a
    block (0,0), (0,1), (1,0), (1,1) (the permutes in qwen3vl.cpp; positions in clip_encode)."""
    by, bx, dy, dx = np.meshgrid(np.arange(gh // 2), np.arange(gw // 2), np.arange(2),
                                 np.arange(2), indexing="ij")
    return ((2 * by + dy) * gw + 2 * bx + dx).reshape(-1)


def vision_rope(rows: np.ndarray, cols: np.ndarray, head_dim: int):
    """cos, sin float32 [n, head_dim / 2] of ggml_rope_multi in GGML_ROPE_TYPE_VISION mode with
    sections [d/4] * 4: pair i < d/4 turns by row * theta^(-4i/d), pair d/4 + j by
    col * theta^(-4j/d)."""
    quarter = head_dim // 4
    inv = ROPE_THETA ** (-4.0 * np.arange(quarter) / head_dim)
    angles = np.concatenate([rows[:, None] * inv, cols[:, None] * inv], axis=1)
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
