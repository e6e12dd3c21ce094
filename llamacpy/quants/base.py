"""The quant-type registry: one class per ggml block type, found by its type id.

Every class converts whole blocks: `dequantize_blocks` takes uint8 [n_blocks, type_size] and returns
float32 [n_blocks, block_size]; `quantize_blocks` is its inverse, bit-identical to llama.cpp's
reference quantizer (ggml-quants.c `quantize_row_*_ref`, no importance matrix).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..format.constants import GGML_QUANT_SIZES, GGMLType


class UnsupportedTypeError(ValueError):
    """A tensor type llamacpy cannot (de)quantize; the message names it."""


class QuantType:
    """Base class: subclasses set `ggml_type` and implement the two block conversions."""

    ggml_type: ClassVar[GGMLType]
    block_size: ClassVar[int]  # weights per block
    type_size: ClassVar[int]  # bytes per block
    can_quantize: ClassVar[bool] = True

    def dequantize_blocks(self, blocks: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def quantize_blocks(self, x: np.ndarray) -> np.ndarray:
        raise UnsupportedTypeError(f"quantizing to {self.ggml_type.name} is not supported")

    def row_nbytes(self, n_per_row: int) -> int:
        return n_per_row // self.block_size * self.type_size


QUANT_TYPES: dict[GGMLType, QuantType] = {}


def register(cls: type[QuantType]) -> type[QuantType]:
    """Class decorator: fill in block geometry from ggml's table and add to the registry."""
    cls.block_size, cls.type_size = GGML_QUANT_SIZES[cls.ggml_type]
    QUANT_TYPES[cls.ggml_type] = cls()
    return cls


def get_quant(ggml_type: int | str | GGMLType) -> QuantType:
    """The registered QuantType for a type id or name; a clear error for anything else."""
    try:
        t = GGMLType[ggml_type.upper()] if isinstance(ggml_type, str) else GGMLType(ggml_type)
    except (KeyError, ValueError):
        raise UnsupportedTypeError(f"unknown ggml tensor type {ggml_type!r}") from None
    if t not in QUANT_TYPES:
        supported = ", ".join(q.name for q in QUANT_TYPES)
        raise UnsupportedTypeError(
            f"tensor type {t.name} is not supported by llamacpy (supported: {supported})")
    return QUANT_TYPES[t]


def dequantize(data: np.ndarray, ggml_type: int | GGMLType, ne: tuple[int, ...]) -> np.ndarray:
    """Dequantize raw tensor bytes of ggml shape `ne` into float32 of numpy shape reversed(ne)."""
    q = get_quant(ggml_type)
    raw = np.asarray(data).view(np.uint8).reshape(-1, q.type_size)
    return q.dequantize_blocks(raw).reshape(tuple(reversed(ne)))


def quantize(x: np.ndarray, ggml_type: int | GGMLType) -> np.ndarray:
    """Quantize float32 [..., n_per_row] row by row; returns uint8 [..., row bytes]."""
    q = get_quant(ggml_type)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.shape[-1] % q.block_size:
        raise ValueError(f"row length {x.shape[-1]} is not a multiple of the "
                         f"{q.ggml_type.name} block size {q.block_size}")
    out = q.quantize_blocks(x.reshape(-1, q.block_size))
    return out.reshape(*x.shape[:-1], q.row_nbytes(x.shape[-1]))
