"""Moving cached cells of a sequence: llama.cpp's llama_memory_seq_rm + llama_memory_seq_add and
the K-shift that follows (llama_kv_cache::build_graph_shift), done at once.

Our KV cache keeps a sequence's cells at their positions (cell i holds position i), so removing
cells [p0, p1) moves the cells after them down by p1 - p0 and rotates each moved key by
-(p1 - p0) positions with the rope its layer used: rope is a rotation by an angle linear in the
position, so R(p - d) k = R(-d) R(p) k. Values only move. A recurrent state holds the whole past
in a fixed size and cannot forget a span of it, so a HybridCache cannot shift (as
llama_memory_can_shift says for llama.cpp's recurrent memory).
"""

from __future__ import annotations

import numpy as np

from ..ops.rope import RopeConfig, apply_rope, rope_cos_sin
from .hybrid_cache import HybridCache
from .kv_cache import KVCache, to_cache


def can_shift(cache: KVCache) -> bool:
    """llama_memory_can_shift: KV cells can move; a recurrent state cannot."""
    return shift_refusal(cache) is None


def shift_refusal(cache: KVCache) -> str | None:
    """Why this cache's cells cannot move, or None. Keys are re-rotated in f16 and f32 caches
    only (llama.cpp also dequantizes, rotates and re-quantizes block types: not done here)."""
    if isinstance(cache, HybridCache):
        return "its memory cannot shift (a recurrent state)"
    if key_type(cache) not in SHIFTABLE_K:
        return (f"a {key_type(cache)} K cache cannot be shifted yet (-ctk "
                f"{' or '.join(SHIFTABLE_K)} can)")
    return None


SHIFTABLE_K = ("f16", "f32")


def key_type(cache: KVCache) -> str:
    """The K cache's -ctk type (from the array dtype for a cache that does not name it)."""
    name = getattr(cache, "type_k", None)
    if name is not None:
        return name
    k = next(a for a in cache.k if a is not None)
    return {np.dtype(np.uint16): "f16", np.dtype(np.float32): "f32"}.get(k.dtype, str(k.dtype))


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
        k[seq, p0 : p0 + n_move] = rerotate(k[seq, p1:n_past], kv_rope(il), -d)
    cache.n_past[seq] = n_past - d
    return n_past - d


def rerotate(k: np.ndarray, rope: RopeConfig, delta: int) -> np.ndarray:
    """Cached keys [n, n_head_kv, d_k] (f16 bits or float32) rotated by `delta` positions, in
    the cache's dtype (llama.cpp's K-shift also rounds back to the cache type)."""
    x = k.view(np.float16).astype(np.float32) if k.dtype == np.uint16 else k.astype(np.float32)
    cos, sin = rotation(rope, delta)
    n = x.shape[0]
    apply_rope(x, np.repeat(cos, n, axis=0), np.repeat(sin, n, axis=0), rope.mode)
    return to_cache(x, k.dtype)
