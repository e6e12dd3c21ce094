"""The KV cache: keys and values per layer, one stream of n_ctx positions per sequence (llama.cpp's
non-unified cache: each slot owns n_ctx / n_seq cells).

A sequence's cells hold positions 0..n_past-1 in order, so prompt-prefix reuse is a trim.
-ctk / -ctv choose the type of K and of V: f16 (the default), f32, bf16, or a ggml block type
(q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1), stored as the blocks llama.cpp stores
(kernels/kv_quant.py) and attended on in place.

As llama.cpp does (llama_kv_cache: attn_rot_k / attn_rot_v, llama_mul_mat_hadamard in
build_attn), a quantized K is stored rotated by an orthonormal Walsh-Hadamard matrix, which
spreads outlier channels over a block before it is quantized; queries get the same rotation, so
q . k is unchanged. A quantized V is rotated too and the attention output rotated back (H H = I).
`rotate_q` and `unrotate_out` are the model side of that.
"""

from __future__ import annotations

import numpy as np

from ..kernels.kv_quant import (BLOCK, KV_TYPES, hadamard_rows, is_quantized, row_units,
                                store_rows)
from ..kernels.kv_store import store_rows_f16


class ContextFullError(ValueError):
    """A batch would write past the end of its sequence's context."""


# -ctk / -ctv cache types: the array dtype each is stored in (fp16 and bf16 as their uint16 bit
# patterns, block types as bytes)
CACHE_TYPES = {name: np.float32 if name == "f32" else np.uint16 if name in ("f16", "bf16")
               else np.uint8 for name in KV_TYPES}


def cache_dtype(name: str) -> type:
    """The array dtype of cache type `name`; ValueError in llama.cpp's words for another name
    (kv_cache_type_from_str)."""
    if name not in CACHE_TYPES:
        raise ValueError(f"Unsupported cache type: {name} (allowed values: "
                         f"{', '.join(CACHE_TYPES)})")
    return CACHE_TYPES[name]


def kv_type_name(value: str | int | None) -> str:
    """A cache type given as a -ctk name or a ggml type id (llama-cpp-python's type_k); None is
    the default, f16."""
    if value is None:
        return "f16"
    if isinstance(value, str):
        return value
    names = {int(t): name for name, t in KV_TYPES.items()}
    if int(value) not in names:
        raise ValueError(f"Unsupported cache type: ggml type {value} (allowed values: "
                         f"{', '.join(CACHE_TYPES)})")
    return names[int(value)]


def resolve_flash_attn(flash_attn: str, type_k: str, type_v: str) -> tuple[str, str | None]:
    """-fa on|off|auto with these cache types -> ("on" or "off" or "auto", a log line or None);
    ValueError where llama.cpp's llama_init_from_model refuses the context. A quantized V cache
    needs flash attention: auto turns it on, off refuses. Our kernels are fused either way, so
    the setting changes nothing else."""
    cache_dtype(type_k), cache_dtype(type_v)
    if is_quantized(type_v) and flash_attn != "on":
        if flash_attn == "off":
            raise ValueError("quantized V cache requires flash_attn to be enabled")
        return "on", "enabling flash_attn since it is required for quantized V cache"
    return flash_attn, None


def check_head_sizes(type_k: str, type_v: str, d_k: int, d_v: int) -> None:
    """A block type must divide the head size (llama_init_from_model's check)."""
    for which, name, d in (("K", type_k, d_k), ("V", type_v, d_v)):
        if is_quantized(name) and d % BLOCK:
            raise ValueError(f"{which} cache type {name} with block size {BLOCK} does not divide "
                             f"n_embd_head_{which.lower()}={d}")


class KVCache:
    def __init__(self, n_layer: int, n_seq: int, n_ctx: int, n_head_kv: int, d_k: int, d_v: int,
                 type_k: str = "f16", type_v: str = "f16"):
        self.n_seq, self.n_ctx = n_seq, n_ctx
        self.type_k, self.type_v = type_k, type_v
        shape_k, shape_v, dk, dv = cell_layout(type_k, type_v, n_seq, n_ctx, n_head_kv, d_k, d_v)
        # [seq, pos, head, d_k] (block types: [seq, pos, head, d_k / 32 blocks' bytes])
        self.k = [np.zeros(shape_k, dk) for _ in range(n_layer)]
        self.v = [np.zeros(shape_v, dv) for _ in range(n_layer)]  # [seq, pos, head, d_v]
        self.n_past = np.zeros(n_seq, np.int64)  # filled positions per sequence
        self.rot_k = hadamard(rotation_size(type_k, d_k, whole_head=True))  # [n, n] or None
        self.rot_v = hadamard(rotation_size(type_v, d_v, whole_head=False))

    def rotate_q(self, q: np.ndarray) -> np.ndarray:
        """Queries float32 [n, n_head, d_k] as the rotated keys they meet (q itself if K is not
        rotated)."""
        return q if self.rot_k is None else rotated(q, self.rot_k)

    def unrotate_out(self, out: np.ndarray) -> np.ndarray:
        """The attention output [n, n_head, d_v], a sum of rotated values, rotated back."""
        return out if self.rot_v is None else rotated(out, self.rot_v)

    def describe(self) -> str:
        """llama.cpp's startup line for the cache (llama_kv_cache's constructor)."""
        k = sum(a.nbytes for a in self.k if a is not None) / 2**20
        v = sum(a.nbytes for a in self.v if a is not None) / 2**20
        n_layer = sum(a is not None for a in self.k)
        return (f"llama_kv_cache: size = {k + v:7.2f} MiB ({self.n_ctx * self.n_seq:6d} cells, "
                f"{n_layer:3d} layers, {self.n_seq:2d}/{self.n_seq} seqs), K ({self.type_k}): "
                f"{k:7.2f} MiB, V ({self.type_v}): {v:7.2f} MiB")

    @property
    def types(self) -> tuple[str, str]:
        """(type_k, type_v), as the attention kernels take them."""
        return self.type_k, self.type_v

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.k) + sum(a.nbytes for a in self.v)

    def check_room(self, seq: int, pos0: int, n: int) -> None:
        if not 0 <= seq < self.n_seq:
            raise ValueError(f"sequence id {seq} out of range (n_seq = {self.n_seq})")
        if pos0 + n > self.n_ctx:
            raise ContextFullError(f"sequence {seq}: positions up to {pos0 + n} exceed the "
                                   f"context size {self.n_ctx}")
        if pos0 > self.n_past[seq]:
            raise ValueError(f"sequence {seq}: position {pos0} leaves a gap after "
                             f"{self.n_past[seq]} cached positions")

    def store(self, layer: int, seq: int, pos0: int, k: np.ndarray, v: np.ndarray) -> None:
        """Write float32 k [n, n_head_kv, d_k] and v at positions pos0.. of `seq`."""
        n = k.shape[0]
        self.store_rows(layer, np.full(n, seq), np.arange(pos0, pos0 + n), k, v)

    def store_rows(self, layer: int, seqs: np.ndarray, positions: np.ndarray, k: np.ndarray,
                   v: np.ndarray) -> None:
        """Row i of k [n, n_head_kv, d_k] and v at position positions[i] of sequence seqs[i]
        (the server's decode step: one row per sequence; `store`: a run of one sequence)."""
        if self.rot_k is not None:
            k = rotated(k, self.rot_k)
        if self.rot_v is not None:
            v = rotated(v, self.rot_v)
        if self.type_k == "f16" and self.type_v == "f16":
            store_rows_f16(self.k[layer], self.v[layer], seqs, positions,
                           np.asarray(k, np.float32), np.asarray(v, np.float32))
            return
        for cells, name, x in ((self.k[layer], self.type_k, k), (self.v[layer], self.type_v, v)):
            if name in ("f16", "f32"):
                cells[seqs, positions] = to_cache(x, cells.dtype)
            else:
                store_rows(cells, name, np.asarray(seqs, np.int64),
                           np.asarray(positions, np.int64), x)

    def commit(self, seq: int, n_past: int) -> None:
        """Record that `seq` now holds positions 0..n_past-1 (after all layers stored)."""
        self.n_past[seq] = max(self.n_past[seq], n_past)

    def expect_rollback(self, seq: int) -> None:
        """The next segment of `seq` is a speculative draft that may be trimmed back to any of
        its rows; trimming KV cells is free, so nothing to prepare (a recurrent state is not)."""

    def trim(self, seq: int, n_keep: int) -> int:
        """Forget positions >= n_keep of `seq` (llama_memory_seq_rm from n_keep to the end);
        returns the positions kept (a hybrid cache may keep fewer than asked)."""
        self.n_past[seq] = min(self.n_past[seq], max(0, n_keep))
        return int(self.n_past[seq])

    def clear(self, seq: int | None = None) -> None:
        if seq is None:
            self.n_past[:] = 0
        else:
            self.n_past[seq] = 0


def rotation_size(name: str, d: int, whole_head: bool) -> int:
    """The Hadamard size llama.cpp rotates a quantized K or V with (0: none): for K the largest
    power of two from 64 up that divides the head size (build_input_k_rot), for V 64
    (build_input_v_rot); none unless the type is quantized and the head a multiple of 64."""
    if not is_quantized(name) or d % 64:
        return 0
    n = 64
    while whole_head and d % (2 * n) == 0:
        n *= 2
    return n


def hadamard(n: int) -> np.ndarray | None:
    """The orthonormal Walsh-Hadamard matrix float32 [n, n] (ggml_gen_hadamard: Sylvester's
    doubling from 1 / sqrtf(n)); None for n = 0."""
    if not n:
        return None
    h = np.full((1, 1), np.float32(1) / np.sqrt(np.float32(n)), np.float32)
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


def rotated(x: np.ndarray, rot: np.ndarray) -> np.ndarray:
    """x float32 [..., d] with each run of rot's size multiplied by rot (a Hadamard matrix, by
    the fast transform: kernels/kv_quant.hadamard_rows)."""
    rows = np.ascontiguousarray(x, np.float32).reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    hadamard_rows(rows, rot.shape[0], out)
    return out.reshape(x.shape)


def cell_layout(type_k: str, type_v: str, n_seq: int, n_ctx: int, n_head_kv: int, d_k: int,
                d_v: int) -> tuple[tuple, tuple, type, type]:
    """(shape of K, shape of V, their dtypes) per layer, the types checked."""
    dk, dv = cache_dtype(type_k), cache_dtype(type_v)
    check_head_sizes(type_k, type_v, d_k, d_v)
    return ((n_seq, n_ctx, n_head_kv, row_units(type_k, d_k)),
            (n_seq, n_ctx, n_head_kv, row_units(type_v, d_v)), dk, dv)


def to_cache(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return x.astype(np.float16).view(np.uint16) if dtype == np.uint16 else x

