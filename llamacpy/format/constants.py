"""GGUF and ggml constants: tensor types, block sizes, metadata value types and key names.

The enums come from the `gguf` package (llama.cpp's own gguf-py) so type ids never drift from
llama.cpp; this module only adds what our reader and tools need on top.
"""

from __future__ import annotations

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType

GGMLType = GGMLQuantizationType
FileType = LlamaFileType
ValueType = GGUFValueType

GGUF_MAGIC = b"GGUF"
GGUF_VERSIONS = (2, 3)  # version 1 used 32-bit counts and is rejected by llama.cpp too
GGUF_DEFAULT_ALIGNMENT = 32
GGML_MAX_DIMS = 4

# Metadata keys used by the format layer and the tools (llama.cpp: gguf.cpp, llama-arch.cpp).
KEY_ALIGNMENT = "general.alignment"
KEY_ARCHITECTURE = "general.architecture"
KEY_NAME = "general.name"
KEY_FILE_TYPE = "general.file_type"
KEY_QUANT_VERSION = "general.quantization_version"
KEY_SPLIT_NO = "split.no"
KEY_SPLIT_COUNT = "split.count"
KEY_SPLIT_TENSORS_COUNT = "split.tensors.count"

GGML_QUANT_VERSION = 2

# Fixed-size metadata scalars: value type -> (struct format, byte size).
SCALAR_FORMATS: dict[int, tuple[str, int]] = {
    ValueType.UINT8: ("<B", 1),
    ValueType.INT8: ("<b", 1),
    ValueType.UINT16: ("<H", 2),
    ValueType.INT16: ("<h", 2),
    ValueType.UINT32: ("<I", 4),
    ValueType.INT32: ("<i", 4),
    ValueType.FLOAT32: ("<f", 4),
    ValueType.BOOL: ("<?", 1),
    ValueType.UINT64: ("<Q", 8),
    ValueType.INT64: ("<q", 8),
    ValueType.FLOAT64: ("<d", 8),
}

# numpy dtypes for zero-copy numeric arrays in metadata.
SCALAR_DTYPES: dict[int, str] = {
    ValueType.UINT8: "<u1",
    ValueType.INT8: "<i1",
    ValueType.UINT16: "<u2",
    ValueType.INT16: "<i2",
    ValueType.UINT32: "<u4",
    ValueType.INT32: "<i4",
    ValueType.FLOAT32: "<f4",
    ValueType.BOOL: "?",
    ValueType.UINT64: "<u8",
    ValueType.INT64: "<i8",
    ValueType.FLOAT64: "<f8",
}


def type_name(type_id: int) -> str:
    """Name of a ggml tensor type id, or 'unknown type N'."""
    try:
        return GGMLType(type_id).name
    except ValueError:
        return f"unknown type {type_id}"


def block_geometry(ggml_type: int) -> tuple[int, int]:
    """(weights per block, bytes per block) of a ggml type; KeyError for unknown ids."""
    return GGML_QUANT_SIZES[GGMLType(ggml_type)]


def row_nbytes(ggml_type: int, n_per_row: int) -> int:
    """Bytes of one row of `n_per_row` weights (ggml_row_size)."""
    block, size = block_geometry(ggml_type)
    return n_per_row // block * size
