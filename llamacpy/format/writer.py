"""GGUF writer: header, metadata and tensor infos first, then tensor data streamed in order.

Tensor bytes are produced lazily (one callable per tensor), so quantizing a model never holds more
than one tensor in memory (llama.cpp: gguf_write_to_file, llama_model_quantize_impl).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .constants import (
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    KEY_ALIGNMENT,
    SCALAR_DTYPES,
    SCALAR_FORMATS,
    GGMLType,
    ValueType,
    block_geometry,
)
from .strings import StringArray

_DTYPE_TO_VTYPE = {np.dtype(d): v for v, d in SCALAR_DTYPES.items()}


@dataclass
class TensorToWrite:
    """A tensor's header entry and a callable that returns its bytes when they are written."""

    name: str
    ggml_type: GGMLType
    ne: tuple[int, ...]  # ggml order
    produce: Callable[[], np.ndarray | bytes | Iterable[np.ndarray | bytes]]  # whole or in chunks

    @property
    def nbytes(self) -> int:
        block, size = block_geometry(self.ggml_type)
        n = int(np.prod(self.ne, dtype=np.int64))
        return n // block * size


def guess_value_type(value: Any) -> int:
    """GGUF value type for a Python value (bool, int, float, str, list, numpy array)."""
    if isinstance(value, (bool, np.bool_)):
        return ValueType.BOOL
    if isinstance(value, (int, np.integer)):
        if isinstance(value, np.integer):
            return _DTYPE_TO_VTYPE[np.dtype(type(value))]
        return ValueType.INT32 if -(2**31) <= value < 2**31 else ValueType.INT64
    if isinstance(value, (float, np.floating)):
        return ValueType.FLOAT32 if not isinstance(value, np.float64) else ValueType.FLOAT64
    if isinstance(value, (str, bytes)):
        return ValueType.STRING
    if isinstance(value, (list, tuple, np.ndarray, StringArray)):
        return ValueType.ARRAY
    raise TypeError(f"cannot store {type(value).__name__} in GGUF metadata")


def _pack_string(s: str | bytes) -> bytes:
    raw = s if isinstance(s, bytes) else s.encode("utf-8", errors="surrogateescape")
    return struct.pack("<Q", len(raw)) + raw


def _pack_array(value: Any) -> bytes:
    if isinstance(value, np.ndarray):
        vtype = _DTYPE_TO_VTYPE[value.dtype.newbyteorder("<") if value.dtype.byteorder == ">"
                                else value.dtype]
        return struct.pack("<IQ", vtype, len(value)) + np.ascontiguousarray(value).tobytes()
    if isinstance(value, StringArray):  # straight from its blob, no str per element
        lens = value.byte_lengths().tolist()
        return struct.pack("<IQ", ValueType.STRING, len(lens)) + b"".join(
            struct.pack("<Q", n) + value.raw(i) for i, n in enumerate(lens))
    items = list(value)
    etype = guess_value_type(items[0]) if items else ValueType.UINT8
    head = struct.pack("<IQ", etype, len(items))
    if etype == ValueType.STRING:
        return head + b"".join(_pack_string(s) for s in items)
    if etype == ValueType.ARRAY:
        return head + b"".join(_pack_array(a) for a in items)
    fmt = SCALAR_FORMATS[etype][0]
    return head + b"".join(struct.pack(fmt, v) for v in items)


def pack_value(value: Any, vtype: int | None = None) -> bytes:
    """Type id and encoding of one metadata value."""
    vtype = guess_value_type(value) if vtype is None else vtype
    if vtype == ValueType.STRING:
        body = _pack_string(value)
    elif vtype == ValueType.ARRAY:
        body = _pack_array(value)
    else:
        body = struct.pack(SCALAR_FORMATS[vtype][0], value)
    return struct.pack("<I", vtype) + body


def write_gguf(
    path: str | os.PathLike,
    metadata: dict[str, Any],
    tensors: Iterable[TensorToWrite],
    value_types: dict[str, int] | None = None,
    on_tensor: Callable[[TensorToWrite, int], None] | None = None,
) -> int:
    """Write a GGUF v3 file; returns its size. `value_types` pins the type of given keys."""
    tensors = list(tensors)
    value_types = value_types or {}
    align = int(metadata.get(KEY_ALIGNMENT, GGUF_DEFAULT_ALIGNMENT))
    head = [GGUF_MAGIC, struct.pack("<IQQ", 3, len(tensors), len(metadata))]
    for key, value in metadata.items():
        head.append(_pack_string(key) + pack_value(value, value_types.get(key)))
    offset = 0
    for t in tensors:
        head.append(_pack_string(t.name) + struct.pack("<I", len(t.ne)))
        head.append(struct.pack(f"<{len(t.ne)}Q", *t.ne) + struct.pack("<IQ", t.ggml_type, offset))
        offset += -(-t.nbytes // align) * align
    header = b"".join(head)
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        f.write(header)
        if tensors:  # a file without tensors ends at its metadata (gguf-py writes no padding)
            f.write(b"\0" * (-len(header) % align))
        for i, t in enumerate(tensors):
            data = t.produce()
            chunks = [data] if isinstance(data, (np.ndarray, bytes, memoryview)) else data
            written = 0
            for chunk in chunks:
                raw = memoryview(np.ascontiguousarray(chunk)).cast("B") \
                    if isinstance(chunk, np.ndarray) else memoryview(chunk)
                f.write(raw)
                written += raw.nbytes
            if written != t.nbytes:
                raise ValueError(f"tensor '{t.name}': produced {written} bytes, "
                                 f"expected {t.nbytes} for {t.ggml_type.name} {list(t.ne)}")
            f.write(b"\0" * (-written % align))
            if on_tensor:
                on_tensor(t, i)
        size = f.tell()
    os.replace(tmp, path)
    return size
