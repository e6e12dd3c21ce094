"""Moving cached cells of a sequence: llama.cpp's llama_memory_seq_rm + llama_memory_seq_add and
the K-shift that follows (llama_kv_cache::build_graph_shift), done at once.

Our KV cache keeps a sequence's cells at their positions (cell i holds position i), so removing
cells [p0, p1) moves the cells after them down by p1 - p0 and rotates each moved key by
-(p1 - p0) positions with the rope its layer used: rope is a rotation by an angle linear in the
position, so R(p - d) k = R(-d) R(p) k; a block-type K cache is dequantized, rotated and quantized
again, as llama.cpp does. Values only move. A recurrent state holds the whole past
in a fixed size and cannot forget a span of it, so a HybridCache cannot shift (as
llama_memory_can_shift says for llama.cpp's recurrent memory).
"""

from __future__ import annotations

import numpy as np

from ..ops.rope import RopeConfig, apply_rope, rope_cos_sin
from .hybrid_cache import HybridCache
from .kv_cache import KVCache, rotated, to_cache


def can_shift(cache: KVCache) -> bool:
    """llama_memory_can_shift: KV cells can move; a recurrent state cannot."""
    return shift_refusal(cache) is None


def shift_refusal(cache: KVCache) -> str | None:
    """Why this cache's cells cannot move, or None."""
    if isinstance(cache, HybridCache):
        return "its memory cannot shift (a recurrent state)"
    return None


def key_type(cache: KVCache) -> str:
    """The K cache's -ctk type."""
    return cache.type_k


def rotation(rope: RopeConfig, delta: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin float32 [1, n_rot / 2] of a rotation by `delta` positions, without the
    magnitude scale (yarn's mscale) that the first rotation already applied."""
    cos, sin = rope_cos_sin(rope, np.array([delta], np.int64))
    scale = np.sqrt(cos.astype(np.float64) ** 2 + sin.astype(np.float64) ** 2)
    return (cos / scale).astype(np.float32), (sin / scale).astype(np.float32)


def remove_cells(cache: KVCache, seq: int, p0: int, p1: int, kv_rope) -> int:
    """Forget cells [p0, p1) of `seq` and move the later ones down to p0, their keys re-rotated
    (`kv_rope(il)`: the RopeConfig of layer il). Returns the cells the sequence now holds."""
    if not can_shift(cache):
        raise ValueError(f"cannot shift cells: {shift_refusal(cache)}")
    n_past = int(cache.n_past[seq])
    p0, p1 = max(0, p0), min(max(p0, p1), n_past)
    d, n_move = p1 - p0, n_past - p1
    if d == 0:
        return n_past
    for il, (k, v) in enumerate(zip(cache.k, cache.v)):
        if k is None:
            continue
        v[seq, p0 : p0 + n_move] = v[seq, p1:n_past]
        k[seq, p0 : p0 + n_move] = rerotate(cache, k[seq, p1:n_past], kv_rope(il), -d)
    cache.n_past[seq] = n_past - d
    return n_past - d


def rerotate(cache: KVCache, cells: np.ndarray, rope: RopeConfig, delta: int) -> np.ndarray:
    """Cached keys (cells [n, n_head_kv, units] of the cache's K type) rotated by `delta`
    positions, back in that type: a block type is dequantized, its Hadamard rotation undone,
    roped, rotated and quantized again (llama.cpp's build_rope_shift for quantized K)."""
    from ..kernels.kv_quant import dequantize_cells, store_rows

    name, rot = key_type(cache), getattr(cache, "rot_k", None)
    x = np.array(dequantize_cells(cells, name), np.float32)  # a copy: [n, n_head_kv, d_k]
    if rot is not None:
        x = rotated(x, rot)  # an orthonormal Hadamard matrix is its own inverse
    cos, sin = rotation(rope, delta)
    n = x.shape[0]
    apply_rope(x, np.repeat(cos, n, axis=0), np.repeat(sin, n, axis=0), rope.mode)
    if rot is not None:
        x = rotated(x, rot)
    if name in ("f16", "f32"):
        return to_cache(x, cells.dtype)
    out = np.empty((1, *cells.shape), cells.dtype)
    store_rows(out, name, np.zeros(n, np.int64), np.arange(n, dtype=np.int64), x)
    return out[0]
