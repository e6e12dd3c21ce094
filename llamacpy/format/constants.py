"""GGUF and ggml constants: tensor types, block sizes, metadata value types and key names.

The enums and key names come from the `gguf` package (llama.cpp's own gguf-py) so type ids never
drift from llama.cpp; this module only adds what our reader and tools need on top.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


def _gguf_constants():
    """gguf-py's constants module (stdlib imports only) without running gguf/__init__, which
    also imports its reader, writer, vocabulary code and sentencepiece: 2.8 MB of RSS that
    inference never uses. Where gguf is already imported, its own module; the enums of a copy
    compare and hash as their integer values, so they mix with gguf's."""
    if "gguf.constants" in sys.modules:
        return sys.modules["gguf.constants"]
    package = importlib.util.find_spec("gguf")
    path = Path(package.submodule_search_locations[0]) / "constants.py"
    spec = importlib.util.spec_from_file_location(f"{__name__}._gguf", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_gguf = _gguf_constants()
GGML_QUANT_SIZES = _gguf.GGML_QUANT_SIZES
GGMLType = _gguf.GGMLQuantizationType
FileType = _gguf.LlamaFileType
ValueType = _gguf.GGUFValueType
Keys = _gguf.Keys  # metadata key names (llama.cpp's LLM_KV names)

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
