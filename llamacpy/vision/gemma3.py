"""Gemma 3 vision: a SigLIP tower and Gemma 3's projector, projector type `gemma3`
(llama.cpp tools/mtmd/models/siglip.cpp, PROJECTOR_TYPE_GEMMA3 branch).

Fixed image_size x image_size input (896 for the released models; the image is letterboxed with
bilinear resampling, as mtmd_image_preprocessor_fixed_size does); Conv2D patch embedding plus a
learned position table; pre-norm ViT blocks without rope; post LayerNorm; k x k average pooling
(k = clip.vision.projector.scale_factor, default 4: 64 x 64 patches -> 256 tokens); RMS norm with
mm.soft_emb_norm (its "+1" is already in the file); projection to the text width by
mm.input_projection, stored as [n_embd_text, n_embd_vision] in ggml order (used transposed).
The embeddings enter the text model unscaled (llama.cpp scales token embeddings by sqrt(n_embd)
only when the batch holds tokens).
"""

from __future__ import annotations

import numpy as np

from ..ops.norm import rms_norm
from .clip import VISION, PreparedImage, Projector, ViTBlock, layer_norm
from .preprocess import Resample, normalize, resize_image

DEFAULT_POOL = 4  # hparams.n_merge for every released Gemma 3 size


class Gemma3Projector(Projector):
    projector_type = "gemma3"

    def __init__(self, g, image_min_tokens: int = -1, image_max_tokens: int = -1):
        super().__init__(g)  # token limits do not apply: the image size is fixed
        a, w = self.args, self.weights
        p, e, s = a.patch_size, a.n_embd, a.image_size
        self.pool = int(g.get(VISION.Projector.SCALE_FACTOR, DEFAULT_POOL) or DEFAULT_POOL)
        self.side = s // p  # patches per side
        if self.side * p != s or self.side % self.pool:
            raise ValueError(f"{g.path}: image_size {s} does not split into {p}-pixel patches "
                             f"pooled {self.pool} x {self.pool}")
        kernel = w.array("v.patch_embd.weight", (p, p, 3, e))
        self.patch_kernel = np.ascontiguousarray(kernel.reshape(e, 3 * p * p).T)  # [3*p*p, e]
        self.patch_bias = w.vector("v.patch_embd.bias", e, optional=True)
        self.position_embd = w.array("v.position_embd.weight", (e, self.side ** 2))
        self.layers = [ViTBlock(w, il, a) for il in range(a.n_layer)]
        self.post_ln = (w.vector("v.post_ln.weight", e, optional=True),
                        w.vector("v.post_ln.bias", e, optional=True))
        self.soft_emb_norm = w.vector("mm.soft_emb_norm.weight", e)
        # ggml_mul_mat(transpose(W), x): W ne (n_embd_text, n_embd) is numpy [e, text] already
        self.input_projection = np.ascontiguousarray(
            w.array("mm.input_projection.weight", (a.projection_dim, e)))

    def n_tokens(self, width: int, height: int) -> tuple[int, int, int]:
        n = self.side // self.pool
        return n, n, n * n

    def prepare(self, rgb: np.ndarray) -> PreparedImage:
        s = self.args.image_size
        resized = resize_image(rgb, s, s, Resample.BILINEAR)
        nx, ny, n = self.n_tokens(s, s)
        return PreparedImage(normalize(resized, self.args.image_mean, self.args.image_std),
                             nx, ny, n)

    def encode_pixels(self, pixels: np.ndarray) -> np.ndarray:
        """Normalised pixels float32 [image_size, image_size, 3] -> [n_tokens, n_embd_text]."""
        a, p, side = self.args, self.args.patch_size, self.side
        if pixels.shape != (a.image_size, a.image_size, 3):
            raise ValueError(f"gemma3 needs {a.image_size}x{a.image_size} pixels, got "
                             f"{pixels.shape[1]}x{pixels.shape[0]}")
        patches = pixels.reshape(side, p, side, p, 3).transpose(0, 2, 4, 1, 3)
        x = patches.reshape(side * side, -1) @ self.patch_kernel  # [patches, e], row-major
        if self.patch_bias is not None:
            x += self.patch_bias
        x += self.position_embd
        for layer in self.layers:
            x = layer(x)
        if self.post_ln[0] is not None:
            x = layer_norm(x, *self.post_ln, a.eps)
        k, n = self.pool, side // self.pool
        pooled = x.reshape(n, k, n, k, a.n_embd).mean(axis=(1, 3), dtype=np.float32)
        pooled = rms_norm(pooled.reshape(n * n, a.n_embd), self.soft_emb_norm, a.eps)
        return pooled @ self.input_projection
