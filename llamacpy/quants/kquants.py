"""The 256-weight "k-quant" super-block types: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.

Dequantization mirrors ggml-quants.c `dequantize_row_q*_K` (same float operation order);
quantization is in kquantize.py (sequential float32 numba code, bit-identical to the *_ref C).
"""

from __future__ import annotations

import numpy as np

from ..format.constants import GGMLType
from . import kquantize
from .base import QuantType, register
from .legacy import f16_field, high_bits


def scale_min_k4(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit (scale, min) pairs packed in 12 bytes (get_scale_min_k4): uint8 [n, 8] each."""
    s = scales.astype(np.uint8)
    lo_sc, lo_m = s[:, 0:4] & 63, s[:, 4:8] & 63
    hi_sc = (s[:, 8:12] & 0x0F) | ((s[:, 0:4] >> 6) << 4)
    hi_m = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return np.hstack([lo_sc, hi_sc]), np.hstack([lo_m, hi_m])


def q3_k_scales(scales: np.ndarray) -> np.ndarray:
    """The 16 signed six-bit scales of a Q3_K block (the kmask1/kmask2 unpacking), int8 [n, 16]."""
    low = np.hstack([scales[:, 0:8] & 0x0F, scales[:, 0:8] >> 4])
    k = np.arange(16)
    high = (scales[:, 8 + k % 4] >> (2 * (k // 4)).astype(np.uint8)) & 3
    return (low | (high << 4)).astype(np.int8) - np.int8(32)


def crumbs(qs: np.ndarray) -> np.ndarray:
    """2-bit values of Q2_K/Q3_K quants in output order: uint8 [n, 256] from uint8 [n, 64]."""
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]
    q = qs.reshape(-1, 2, 1, 32) >> shifts  # [n, half, shift, 32]
    return (q & 3).reshape(-1, 256)


@register
class Q2_K(QuantType):
    ggml_type = GGMLType.Q2_K

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        sc = blocks[:, 0:16]
        d, dmin = f16_field(blocks, 80), f16_field(blocks, 82)
        dl = (d * (sc & 0x0F).astype(np.float32))[:, :, None]
        ml = (dmin * (sc >> 4).astype(np.float32))[:, :, None]
        q = crumbs(blocks[:, 16:80]).reshape(-1, 16, 16).astype(np.float32)
        return (dl * q - ml).reshape(-1, 256)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_q2_k(x)


@register
class Q3_K(QuantType):
    ggml_type = GGMLType.Q3_K

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        hmask, qs, scales = blocks[:, 0:32], blocks[:, 32:96], blocks[:, 96:108]
        d = f16_field(blocks, 108)
        dl = (d * q3_k_scales(scales).astype(np.float32))[:, :, None]
        # bit (4*half + shift) of hmask[l] is set when the quant does NOT lose 4
        hbits = high_bits(hmask.reshape(-1, 1), 8).reshape(-1, 32, 8).transpose(0, 2, 1)
        q = crumbs(qs).astype(np.int8) - 4 * (1 - hbits.reshape(-1, 256)).astype(np.int8)
        return (dl * q.reshape(-1, 16, 16).astype(np.float32)).reshape(-1, 256)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_q3_k(x)


def q45_k_scales(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-sub-block (d*scale, dmin*min) of Q4_K/Q5_K, float32 [n, 8, 1] each."""
    d, dmin = f16_field(blocks, 0), f16_field(blocks, 2)
    sc, m = scale_min_k4(blocks[:, 4:16])
    return ((d * sc.astype(np.float32))[:, :, None], (dmin * m.astype(np.float32))[:, :, None])


def nibbles_by_32(qs: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K nibble order: each 32 bytes give 32 low nibbles then 32 high, uint8 [n, 8, 32]."""
    q = qs.reshape(-1, 4, 1, 32) >> np.array([0, 4], dtype=np.uint8)[None, None, :, None]
    return (q & 0x0F).reshape(-1, 8, 32)


@register
class Q4_K(QuantType):
    ggml_type = GGMLType.Q4_K

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        dl, ml = q45_k_scales(blocks)
        q = nibbles_by_32(blocks[:, 16:144]).astype(np.float32)
        return (dl * q - ml).reshape(-1, 256)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_q4_k(x)


@register
class Q5_K(QuantType):
    ggml_type = GGMLType.Q5_K

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        dl, ml = q45_k_scales(blocks)
        # bit s of qh[l] is the fifth bit of quant l in sub-block s
        hbits = high_bits(blocks[:, 16:48].reshape(-1, 1), 8).reshape(-1, 32, 8)
        q = nibbles_by_32(blocks[:, 48:176]) | (hbits.transpose(0, 2, 1) << 4)
        return (dl * q.astype(np.float32) - ml).reshape(-1, 256)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_q5_k(x)


@register
class Q6_K(QuantType):
    ggml_type = GGMLType.Q6_K

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        ql, qh = blocks[:, 0:128].reshape(-1, 2, 64), blocks[:, 128:192].reshape(-1, 2, 1, 32)
        sc = blocks[:, 192:208].view(np.int8).astype(np.float32)
        d = f16_field(blocks, 208)
        low = np.stack([ql[:, :, 0:32] & 0x0F, ql[:, :, 32:64] & 0x0F,
                        ql[:, :, 0:32] >> 4, ql[:, :, 32:64] >> 4], axis=2)  # [n, half, 4, 32]
        high = (qh >> np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]) & 3
        q = (low | (high << 4)).astype(np.int8) - np.int8(32)
        dl = (d * sc)[:, :, None]  # [n, 16, 1]
        return (dl * q.reshape(-1, 16, 16).astype(np.float32)).reshape(-1, 256)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_q6_k(x)
