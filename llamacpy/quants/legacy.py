"""The 32-weight block types: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (ggml-quants.c, *_ref functions).

Quantization is elementwise float32 arithmetic in the same order as the C code, so numpy gives
bit-identical results; only the per-block max/min searches need care (first index on ties).
"""

from __future__ import annotations

import numpy as np

from ..format.constants import GGMLType
from .base import QuantType, register


def f16_field(blocks: np.ndarray, start: int) -> np.ndarray:
    """float32 [n, 1] from the little-endian fp16 at byte `start` of each block."""
    return blocks[:, start : start + 2].copy().view("<f2").astype(np.float32)


def f16_bytes(values: np.ndarray) -> np.ndarray:
    """uint8 [n, 2] holding float32 values rounded to fp16 (GGML_FP32_TO_FP16; inf past 65504)."""
    with np.errstate(over="ignore"):
        return values.astype("<f2").reshape(-1, 1).view(np.uint8)


def low_high_nibbles(qs: np.ndarray) -> np.ndarray:
    """uint8 [n, 2*k]: the low nibbles of k bytes, then their high nibbles (ggml's 4-bit order)."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def pack_nibbles(q: np.ndarray) -> np.ndarray:
    """Inverse of low_high_nibbles: uint8 [n, 2*k] values < 16 -> uint8 [n, k]."""
    half = q.shape[1] // 2
    return (q[:, :half] | (q[:, half:] << 4)).astype(np.uint8)


def high_bits(qh: np.ndarray, n: int) -> np.ndarray:
    """uint8 [rows, n]: bit j of the little-endian bitfield qh (uint8 [rows, n/8])."""
    return np.unpackbits(qh, axis=1, count=n, bitorder="little")


def pack_high_bits(bits: np.ndarray) -> np.ndarray:
    return np.packbits(bits.astype(np.uint8), axis=1, bitorder="little")


def signed_absmax(x: np.ndarray) -> np.ndarray:
    """The value of largest magnitude per row, first one on ties (keeps its sign).

    An all-zero row gives +0 even when its zeros are -0: the C starts from max = 0.0f and only
    takes strictly larger magnitudes (quantize_row_q4_0_ref), and d = max/-8 keeps that sign.
    """
    idx = np.argmax(np.abs(x), axis=1)
    v = np.take_along_axis(x, idx[:, None], axis=1)
    return np.where(v == 0, np.float32(0), v)


def first_min_max(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-row min and max, each the FIRST occurrence (quantize_row_q4_1_ref's strict `<`/`>`
    scan): only the sign of a zero can tell, and it reaches the stored fp16 min."""
    lo = np.take_along_axis(x, np.argmin(x, axis=1)[:, None], axis=1)
    hi = np.take_along_axis(x, np.argmax(x, axis=1)[:, None], axis=1)
    return lo, hi


def safe_inverse(d: np.ndarray) -> np.ndarray:
    """1/d where d != 0, else 0 (the C code's `id = d ? 1.0f/d : 0.0f`)."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)


@register
class Q4_0(QuantType):
    ggml_type = GGMLType.Q4_0

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        d = f16_field(blocks, 0)
        q = low_high_nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8)
        return d * q.astype(np.float32)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        d = signed_absmax(x) / np.float32(-8)
        q = np.minimum(15, (x * safe_inverse(d) + np.float32(8.5)).astype(np.int8))
        return np.hstack([f16_bytes(d), pack_nibbles(q.astype(np.uint8))])


@register
class Q4_1(QuantType):
    ggml_type = GGMLType.Q4_1

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        d, m = f16_field(blocks, 0), f16_field(blocks, 2)
        return d * low_high_nibbles(blocks[:, 4:]).astype(np.float32) + m

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        lo, hi = first_min_max(x)
        d = (hi - lo) / np.float32(15)
        q = np.minimum(15, ((x - lo) * safe_inverse(d) + np.float32(0.5)).astype(np.int8))
        return np.hstack([f16_bytes(d), f16_bytes(lo), pack_nibbles(q.astype(np.uint8))])


@register
class Q5_0(QuantType):
    ggml_type = GGMLType.Q5_0

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        d = f16_field(blocks, 0)
        q = low_high_nibbles(blocks[:, 6:]) | (high_bits(blocks[:, 2:6], 32) << 4)
        return d * (q.astype(np.int8) - np.int8(16)).astype(np.float32)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        d = signed_absmax(x) / np.float32(-16)
        q = np.minimum(31, (x * safe_inverse(d) + np.float32(16.5)).astype(np.int8))
        q = q.astype(np.uint8)
        return np.hstack([f16_bytes(d), pack_high_bits(q >> 4), pack_nibbles(q & 0x0F)])


@register
class Q5_1(QuantType):
    ggml_type = GGMLType.Q5_1

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        d, m = f16_field(blocks, 0), f16_field(blocks, 2)
        q = low_high_nibbles(blocks[:, 8:]) | (high_bits(blocks[:, 4:8], 32) << 4)
        return d * q.astype(np.float32) + m

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        lo, hi = first_min_max(x)
        d = (hi - lo) / np.float32(31)
        q = ((x - lo) * safe_inverse(d) + np.float32(0.5)).astype(np.int8).astype(np.uint8)
        return np.hstack([f16_bytes(d), f16_bytes(lo), pack_high_bits(q >> 4),
                          pack_nibbles(q & 0x0F)])


@register
class Q8_0(QuantType):
    ggml_type = GGMLType.Q8_0

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return f16_field(blocks, 0) * blocks[:, 2:].view(np.int8).astype(np.float32)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        d = np.abs(x).max(axis=1, keepdims=True) / np.float32(127)
        q = roundf(x * safe_inverse(d)).astype(np.int8)
        return np.hstack([f16_bytes(d), q.view(np.uint8)])


def roundf(v: np.ndarray) -> np.ndarray:
    """C roundf, halves away from zero, exactly: floor(|v| + 0.5) would round 0.49999997 up
    (the float32 sum is 1.0); |v| - floor(|v|) is exact, so compare that with one half."""
    a = np.abs(v)
    whole = np.floor(a)
    return np.copysign(whole + (a - whole >= np.float32(0.5)), v)
