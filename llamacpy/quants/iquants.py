"""Non-linear 4-bit types: IQ4_NL (32-weight blocks) and IQ4_XS (256-weight super-blocks)."""

from __future__ import annotations

import numpy as np

from ..format.constants import GGMLType
from . import kquantize
from .base import QuantType, register
from .legacy import f16_field, low_high_nibbles

# kvalues_iq4nl in ggml-common.h: the 16 levels of the non-linear 4-bit grid
IQ4_NL_GRID = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                       dtype=np.int8)


@register
class IQ4_NL(QuantType):
    ggml_type = GGMLType.IQ4_NL

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        d = f16_field(blocks, 0)
        return d * IQ4_NL_GRID[low_high_nibbles(blocks[:, 2:18])].astype(np.float32)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_iq4_nl(x)


@register
class IQ4_XS(QuantType):
    ggml_type = GGMLType.IQ4_XS

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        d = f16_field(blocks, 0)
        scales_h = blocks[:, 2:4].copy().view("<u2").astype(np.int32)  # [n, 1]
        ib = np.arange(8)
        low = (blocks[:, 4 + ib // 2] >> (4 * (ib % 2)).astype(np.uint8)) & 0x0F
        ls = low.astype(np.int32) | (((scales_h >> (2 * ib)) & 3) << 4)
        dl = (d * (ls - 32).astype(np.float32))[:, :, None]  # [n, 8, 1]
        q = low_high_nibbles(blocks[:, 8:136].reshape(-1, 16)).reshape(-1, 8, 32)
        return (dl * IQ4_NL_GRID[q].astype(np.float32)).reshape(-1, 256)

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        return kquantize.quantize_iq4_xs(x)
