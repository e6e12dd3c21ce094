"""Safetensors checkpoints read lazily through numpy memory maps: no torch, one tensor at a time.

A checkpoint is `model*.safetensors` (or the parts named by `model.safetensors.index.json`); tensors
come out in llama.cpp's order: parts sorted by name, tensors sorted by name within a part
(gguf-py SafetensorsLocal, as the safetensors package orders them).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

LFS_MAGIC = b"version https://git-lfs.github.com/spec"
INDEX_FILE = "model.safetensors.index.json"
DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
          "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


class ConvertError(Exception):
    """A checkpoint that cannot be converted; the message is the one line the user sees."""


@dataclass(frozen=True)
class SourceTensor:
    """One tensor of a safetensors file: where its bytes are, read only when `load` is called."""

    name: str
    dtype: str  # safetensors dtype name: F32, F16, BF16, ...
    shape: tuple[int, ...]
    path: Path
    offset: int  # absolute byte offset in the file
    nbytes: int

    def load(self) -> np.ndarray:
        """The tensor as F32 or F16 (llama.cpp converts every other dtype to float32 first)."""
        count = int(np.prod(self.shape, dtype=np.int64))
        if count == 0:
            return np.zeros(self.shape, np.float32)
        raw = np.memmap(self.path, dtype=DTYPES[self.dtype], mode="r", offset=self.offset,
                        shape=(count,)).reshape(self.shape)
        if self.dtype == "BF16":
            return bf16_to_f32(raw)
        if self.dtype in ("F32", "F16"):
            return raw
        return raw.astype(np.float32)


def bf16_to_f32(raw: np.ndarray, chunk: int = 1 << 22) -> np.ndarray:
    """BF16 bits to float32, a chunk at a time, so no uint32 temporaries of the whole tensor."""
    out = np.empty(raw.shape, np.float32)
    flat_in, flat_out = raw.reshape(-1), out.reshape(-1).view(np.uint32)
    for i in range(0, flat_in.size, chunk):
        flat_out[i:i + chunk] = flat_in[i:i + chunk]
        flat_out[i:i + chunk] <<= 16
    return out


def is_lfs_pointer(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(len(LFS_MAGIC)) == LFS_MAGIC


def read_header(path: Path) -> dict[str, SourceTensor]:
    """Tensor table of one safetensors file, checked against the file's size."""
    size = path.stat().st_size
    if size >= len(LFS_MAGIC) and is_lfs_pointer(path):
        raise ConvertError(f"{path.name}: these are LFS pointers, not weights "
                           "(run 'git lfs pull' in the model folder)")
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ConvertError(f"{path.name}: truncated safetensors file ({size} bytes)")
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise ConvertError(f"{path.name}: truncated safetensors header "
                               f"(needs {8 + n} bytes, the file has {size})")
        try:
            meta = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConvertError(f"{path.name}: corrupt safetensors header ({e})") from None
    return _tensor_table(path, meta, 8 + n, size)


def _tensor_table(path: Path, meta: dict, start: int, size: int) -> dict[str, SourceTensor]:
    tensors = {}
    for name, info in meta.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
            t = SourceTensor(name, info["dtype"], tuple(info["shape"]), path, start + begin,
                             end - begin)
        except (KeyError, TypeError, ValueError):
            raise ConvertError(f"{path.name}: corrupt safetensors entry for '{name}'") from None
        if t.dtype not in DTYPES:
            raise ConvertError(f"{path.name}: tensor '{name}' has dtype {t.dtype}, "
                               f"not one of {', '.join(DTYPES)}")
        if t.offset + t.nbytes > size:
            raise ConvertError(f"{path.name}: truncated safetensors file: '{name}' ends at byte "
                               f"{t.offset + t.nbytes}, the file has {size}")
        tensors[name] = t
    return dict(sorted(tensors.items()))


def part_names(model_dir: Path) -> list[str]:
    """Files of the checkpoint, in llama.cpp's order (ModelBase.index_tensors)."""
    index = model_dir / INDEX_FILE
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ConvertError(f"{INDEX_FILE}: no 'weight_map' in it") from None
        return sorted(dict.fromkeys(weight_map.values()))
    return sorted(f for f in os.listdir(model_dir)
                  if f.startswith("model") and f.endswith(".safetensors"))


def index_checkpoint(model_dir: Path) -> dict[str, SourceTensor]:
    """Every tensor of the checkpoint by its Hugging Face name; nothing is read but headers."""
    parts = part_names(model_dir)
    if not parts:
        if any(f.endswith(".bin") for f in os.listdir(model_dir)):
            raise ConvertError(f"{model_dir}: only PyTorch .bin weights found; llamacpy reads "
                               "safetensors (save the model with safe_serialization=True)")
        raise ConvertError(f"{model_dir}: no model*.safetensors weights found")
    tensors: dict[str, SourceTensor] = {}
    for part in parts:
        path = model_dir / part
        if not path.is_file():
            raise ConvertError(f"{part}: listed in {INDEX_FILE} but missing")
        tensors.update(read_header(path))
    _check_index(model_dir, tensors)
    return tensors


def _check_index(model_dir: Path, tensors: dict[str, SourceTensor]) -> None:
    index = model_dir / INDEX_FILE
    if not index.is_file():
        return
    listed = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"])
    missing = sorted(listed - set(tensors))
    if missing:
        raise ConvertError(f"{INDEX_FILE} lists tensors no part holds: {', '.join(missing[:5])}")
