"""Plain float types: F32, F16, BF16 (ggml.c: ggml_fp32_to_fp16_row, ggml_fp32_to_bf16_row_ref)."""

from __future__ import annotations

import numpy as np

from ..format.constants import GGMLType
from .base import QuantType, register


@register
class F32(QuantType):
    ggml_type = GGMLType.F32

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return blocks.view("<f4").astype(np.float32, copy=False)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return x.astype("<f4").view(np.uint8)


@register
class F16(QuantType):
    ggml_type = GGMLType.F16

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return blocks.view("<f2").astype(np.float32)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        # numpy rounds to nearest even, as ggml's F16C and software paths do; beyond the fp16
        # range both give inf, so numpy's overflow warning is noise
        with np.errstate(over="ignore"):
            return x.astype("<f2").view(np.uint8)


@register
class BF16(QuantType):
    ggml_type = GGMLType.BF16

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        return (blocks.view("<u2").astype(np.uint32) << 16).view(np.float32)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return fp32_to_bf16_bits(x).view(np.uint8)


def fp32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even; NaNs stay quiet NaNs (ggml_compute_fp32_to_bf16)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype("<u2")
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((u >> 16) | 64).astype("<u2"), rounded)
