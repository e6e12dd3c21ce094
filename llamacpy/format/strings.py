"""`StringArray`: a GGUF string array kept as one UTF-8 blob and its offsets.

A 262k-token vocabulary as Python str objects costs ~20 MiB more than its text: each str has a
49-73 byte header. Here the text is one bytes object and the offsets one int64 array, and a
string is made when it is asked for. It reads like a list of str (invalid UTF-8 kept as
surrogate escapes, as the reader always did).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Iterable, Iterator

import numpy as np

_ERRORS = "surrogateescape"


class StringArray(Sequence):
    """Strings i = blob[offsets[i]:offsets[i + 1]], decoded on access."""

    __slots__ = ("blob", "offsets", "_off")

    def __init__(self, blob: bytes, offsets: np.ndarray):
        if len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(blob):
            raise ValueError("StringArray: offsets must run from 0 to the blob's length")
        self.blob = blob
        self.offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        self._off = memoryview(self.offsets)  # indexing a memoryview gives ints at C speed

    @classmethod
    def from_strings(cls, items: Iterable[str | bytes]) -> StringArray:
        if isinstance(items, StringArray):
            return items
        raws = [s if isinstance(s, bytes) else s.encode("utf-8", _ERRORS) for s in items]
        offsets = np.zeros(len(raws) + 1, np.int64)
        np.cumsum([len(r) for r in raws], out=offsets[1:])
        return cls(b"".join(raws), offsets)

    def __reduce__(self):
        return StringArray, (self.blob, self.offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, i: int) -> bytes:
        """The UTF-8 bytes of string i."""
        off = self._off
        return self.blob[off[i] : off[i + 1]]

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("StringArray index out of range")
        off = self._off
        return self.blob[off[i] : off[i + 1]].decode("utf-8", _ERRORS)

    def __iter__(self) -> Iterator[str]:
        blob, off = self.blob, self._off
        for i in range(len(self)):
            yield blob[off[i] : off[i + 1]].decode("utf-8", _ERRORS)

    def byte_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def tolist(self) -> list[str]:
        return list(self)

    def __eq__(self, other) -> bool:
        if isinstance(other, StringArray):
            return self.blob == other.blob and np.array_equal(self.offsets, other.offsets)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    __hash__ = None  # mutable-looking like a list: not hashable

    def __repr__(self) -> str:
        return repr(self.tolist())
