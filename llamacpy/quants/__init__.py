"""Tensor types: one class per ggml block type, registered by type id (see base.py)."""

from . import floats, iquants, kquants, legacy  # noqa: F401  (registers the classes)
from .base import QUANT_TYPES, QuantType, UnsupportedTypeError, dequantize, get_quant, quantize

__all__ = ["QUANT_TYPES", "QuantType", "UnsupportedTypeError", "dequantize", "get_quant", "quantize"]
