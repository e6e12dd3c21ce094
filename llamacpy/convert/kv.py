"""An ordered metadata table with llama.cpp's value type for every key (gguf-py GGUFWriter.add_*):
a key set twice keeps its first place and takes the new value, as there."""

from __future__ import annotations

from typing import Any

from ..format.constants import ValueType

U32, I32, F32, BOOL, STR, ARR = (ValueType.UINT32, ValueType.INT32, ValueType.FLOAT32,
                                 ValueType.BOOL, ValueType.STRING, ValueType.ARRAY)


class KV:
    """Metadata in write order: key -> (value, value type)."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[Any, int]] = {}

    def put(self, key: str, value: Any, vtype: int) -> None:
        self.items[key] = (value, vtype)

    def u32(self, key: str, value: int) -> None:
        self.put(key, int(value), U32)

    def f32(self, key: str, value: float) -> None:
        self.put(key, float(value), F32)

    def boolean(self, key: str, value: bool) -> None:
        self.put(key, bool(value), BOOL)

    def string(self, key: str, value: str) -> None:
        self.put(key, value, STR)

    def array(self, key: str, value: list) -> None:
        self.put(key, list(value), ARR)

    def remove(self, key: str) -> None:
        self.items.pop(key, None)

    def values(self) -> dict[str, Any]:
        return {k: v for k, (v, _) in self.items.items()}

    def types(self) -> dict[str, int]:
        return {k: t for k, (_, t) in self.items.items()}

    def put_i32(self, key: str, value: int) -> None:
        self.put(key, int(value), I32)
