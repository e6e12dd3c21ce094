"""GGUF reader: memory-maps the file (or reads it into private memory) and exposes metadata and
zero-copy tensor views.

Load modes are llama.cpp's --load-mode (llama_model_loader, llama_mmap, llama_mlock): `mmap`
(and `auto`) map the file read-only, so its pages are page cache the kernel may drop and read
again; `none` reads the file into private anonymous memory; `mlock` is that private memory
locked; `mmap+mlock` maps and locks the mapping; `dio` reads it with O_DIRECT, bypassing the page
cache (buffered reads where the file system has no direct I/O). An mlock the system refuses
(RLIMIT_MEMLOCK) warns with llama.cpp's line and the model stays loaded, unlocked.

Every count, length and offset is checked against the bytes that remain before it is used, so a
broken file fails with one `GGUFError` naming what is wrong and where (llama.cpp: gguf_init_from_file).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import re
import resource
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .constants import (
    GGML_MAX_DIMS,
    GGUF_DEFAULT_ALIGNMENT,
    GGUF_MAGIC,
    GGUF_VERSIONS,
    KEY_ALIGNMENT,
    KEY_SPLIT_COUNT,
    KEY_SPLIT_NO,
    SCALAR_DTYPES,
    SCALAR_FORMATS,
    GGMLType,
    ValueType,
    block_geometry,
    type_name,
)
from .strings import StringArray

SPLIT_PATTERN = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
MAX_STRING_BYTES = 1 << 30  # no key or token string is near this; a larger one is a corrupt length
LOAD_MODES = ("auto", "none", "mmap", "mlock", "mmap+mlock", "dio")  # llama_load_mode_name
READ_CHUNK = 64 << 20  # bytes per read() when loading into private memory


def check_load_mode(mode: str) -> str:
    """`mode` if it is one of llama.cpp's load modes, else ValueError (llama_load_mode_from_str)."""
    if mode not in LOAD_MODES:
        raise ValueError(f"unknown load mode: {mode} (expected one of {', '.join(LOAD_MODES)})")
    return mode


def resolved_load_mode(mode: str) -> str:
    """The mode a load really uses: `auto` is mmap on a CPU (llama-model.cpp load_tensors)."""
    return "mmap" if check_load_mode(mode) == "auto" else mode


def warn(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class GGUFError(ValueError):
    """A GGUF file that cannot be read: the message names the file, what is wrong and where."""


@dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a GGUF file, its bytes a view into the mapped file (no copy)."""

    name: str
    ggml_type: GGMLType
    ne: tuple[int, ...]  # ggml order: ne[0] is the row length (contiguous)
    offset: int  # absolute byte offset of the data in its file
    data: np.ndarray = field(repr=False)  # uint8 [nbytes], view of the mmap

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order: (..., rows, row length)."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.ne, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)

    def blocks(self) -> np.ndarray:
        """The data as uint8 [rows, bytes per row] (zero-copy)."""
        n_rows = self.n_elements // self.ne[0]
        return self.data.reshape(n_rows, -1)


class _Cursor:
    """Bounds-checked little-endian decoding over a bytes-like buffer."""

    def __init__(self, buf: memoryview, path: str, size: int):
        self.buf, self.path, self.size, self.pos = buf, path, size, 0

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what} (at byte offset {self.pos})")

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"file truncated while reading {what}: needs {n} bytes, "
                            f"{self.size - self.pos} remain")

    def scalar(self, fmt: str, nbytes: int, what: str):
        self.need(nbytes, what)
        (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += nbytes
        return value

    def u32(self, what: str) -> int:
        return self.scalar("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("<Q", 8, what)

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        if n > MAX_STRING_BYTES:
            self.pos -= 8
            raise self.fail(f"absurd length {n} for {what}")
        self.need(n, what)
        raw = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return raw.decode("utf-8", errors="surrogateescape")


def _read_value(cur: _Cursor, vtype: int, key: str, depth: int = 0) -> Any:
    if vtype in SCALAR_FORMATS:
        fmt, size = SCALAR_FORMATS[vtype]
        return cur.scalar(fmt, size, f"value of '{key}'")
    if vtype == ValueType.STRING:
        return cur.string(f"value of '{key}'")
    if vtype == ValueType.ARRAY:
        return _read_array(cur, key, depth)
    cur.pos -= 4
    raise cur.fail(f"unknown metadata value type {vtype} for key '{key}'")


def _read_array(cur: _Cursor, key: str, depth: int) -> Any:
    if depth > 8:
        raise cur.fail(f"arrays nested too deep in key '{key}'")
    etype = cur.u32(f"array element type of '{key}'")
    count = cur.u64(f"array length of '{key}'")
    if etype in SCALAR_DTYPES:
        size = SCALAR_FORMATS[etype][1]
        if count > (cur.size - cur.pos) // size:
            raise cur.fail(f"array '{key}' claims {count} elements, more than the file holds")
        arr = np.frombuffer(cur.buf, dtype=SCALAR_DTYPES[etype], count=count, offset=cur.pos)
        cur.pos += count * size
        return arr
    min_size = 8 if etype == ValueType.STRING else 12
    if etype not in (ValueType.STRING, ValueType.ARRAY):
        raise cur.fail(f"unknown array element type {etype} in key '{key}'")
    if count > (cur.size - cur.pos) // min_size:
        raise cur.fail(f"array '{key}' claims {count} elements, more than the file holds")
    if etype == ValueType.STRING:
        return _read_string_array(cur, key, count)
    return [_read_array(cur, key, depth + 1) for _ in range(count)]


def _read_string_array(cur: _Cursor, key: str, count: int) -> StringArray:
    # Hot on 150k-260k token vocabularies: one local loop that only reads the lengths; the
    # text is then cut out of the buffer in one numpy step, with no str per element.
    buf, pos, size = cur.buf, cur.pos, cur.size
    unpack = struct.Struct("<Q").unpack_from
    start, lens = pos, [0] * count
    for i in range(count):
        if pos + 8 > size:
            cur.pos = pos
            raise cur.fail(f"file truncated in string #{i} of array '{key}'")
        (n,) = unpack(buf, pos)
        if n > size - pos - 8:
            cur.pos = pos
            raise cur.fail(f"string #{i} of array '{key}' has length {n}, past the end of file")
        lens[i] = n
        pos += 8 + n
    cur.pos = pos
    offsets = np.zeros(count + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    region = np.frombuffer(buf, np.uint8, count=pos - start, offset=start)
    text = np.ones(len(region), bool)
    heads = offsets[:-1] + 8 * np.arange(count, dtype=np.int64)  # each length field
    for k in range(8):
        text[heads + k] = False
    return StringArray(region[text].tobytes(), offsets)


@dataclass
class _TensorInfo:
    name: str
    ne: tuple[int, ...]
    ggml_type: GGMLType
    rel_offset: int
    nbytes: int


class GGUFFile:
    """One GGUF file (or all parts of a split model) opened read-only through mmap.

    `metadata` maps keys to Python values (numeric arrays are zero-copy numpy views);
    `tensors` maps names to `GGUFTensor` in file order.
    """

    def __init__(self, path: str | os.PathLike, load_mode: str = "mmap"):
        self.path = str(path)
        self.load_mode = resolved_load_mode(load_mode)
        self.locked = 0  # bytes mlock() locked (llama_mlock's size)
        self.metadata: dict[str, Any] = {}
        self.value_types: dict[str, int] = {}
        self.tensors: dict[str, GGUFTensor] = {}
        self.parts: list[_Part] = []
        for part_path in split_paths(self.path):
            part = _Part(part_path, self.load_mode)
            self.parts.append(part)
            if self.load_mode.endswith("mlock"):
                self.locked += part.lock(self.locked)
            if not self.metadata:
                self.metadata, self.value_types = part.metadata, part.value_types
            for t in part.tensors:
                if t.name in self.tensors:
                    raise GGUFError(f"{part_path}: duplicate tensor name '{t.name}'")
                self.tensors[t.name] = t
        self.version = self.parts[0].version
        self.alignment = self.parts[0].alignment

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def require(self, key: str) -> Any:
        """A metadata value that must be present; a missing key is an error naming it."""
        if key not in self.metadata:
            raise GGUFError(f"{self.path}: required metadata key '{key}' is missing")
        return self.metadata[key]

    def tensor(self, name: str) -> GGUFTensor:
        if name not in self.tensors:
            raise GGUFError(f"{self.path}: tensor '{name}' not found")
        return self.tensors[name]

    @property
    def nbytes(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def mapped(self) -> bool:
        """True when the tensors are views of the file's pages (mmap), False for private memory."""
        return self.load_mode in ("mmap", "mmap+mlock")

    def release(self, tensor: GGUFTensor) -> None:
        """Drop a tensor's pages from memory (mapped: they stay readable from the file; private
        memory: they are freed): for tensors a model has copied into another layout and will
        not read again."""
        for p in self.parts:
            if p.array is not None and np.shares_memory(tensor.data, p.array):
                p.release(tensor.offset, tensor.nbytes)

    def close(self) -> None:
        self.tensors.clear()
        for p in self.parts:
            p.close()

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Part:
    """One physical .gguf file: mapped, or read into private memory (see the load modes)."""

    def __init__(self, path: str, load_mode: str = "mmap"):
        self.path = path
        try:
            self._fh = open(path, "rb")
        except OSError as e:
            raise GGUFError(f"{path}: cannot open: {e.strerror}") from None
        self.size = os.fstat(self._fh.fileno()).st_size
        if self.size == 0:
            self._fh.close()
            raise GGUFError(f"{path}: file is empty")
        if load_mode in ("mmap", "mmap+mlock"):
            self._mmap = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)
        else:
            self._mmap = self._read_private(load_mode == "dio")
        self.buf = memoryview(self._mmap)[: self.size]
        self.array = np.frombuffer(self._mmap, dtype=np.uint8, count=self.size)
        self.array.flags.writeable = False  # private memory too: tensors are read-only views
        try:
            self._parse()
        except GGUFError:
            self.close()
            raise

    def _read_private(self, direct: bool) -> mmap.mmap:
        """The whole file in anonymous memory (llama.cpp's --load-mode none / mlock / dio: a
        host buffer filled by llama_file::read_raw), with O_DIRECT when `direct`."""
        fd, align = self._fh.fileno(), mmap.PAGESIZE
        if direct:
            try:
                fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
                align = max(align, os.fstat(fd).st_blksize)
            except OSError as e:
                warn(f"Failed to open file '{self.path}' with error: {e.strerror}. Falling back "
                     f"to buffered I/O")
                fd, direct = self._fh.fileno(), False
        # private anonymous pages (mmap's default for -1 is shared memory), page-aligned as
        # O_DIRECT needs
        buf = mmap.mmap(-1, -(-self.size // align) * align,
                        flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        view, pos = memoryview(buf), 0
        try:
            while pos < self.size:
                n = os.preadv(fd, [view[pos : min(pos + READ_CHUNK, len(buf))]], pos)
                if n <= 0:
                    raise GGUFError(f"{self.path}: read error at byte {pos} of {self.size}")
                pos += n
        except OSError as e:
            raise GGUFError(f"{self.path}: read error: {e.strerror}") from None
        finally:
            view.release()
            if direct:
                os.close(fd)
        return buf

    def lock(self, locked_before: int) -> int:
        """mlock() this part's bytes (populating a mapping); returns the bytes locked, 0 with
        llama_mlock's warning when the system refuses (RLIMIT_MEMLOCK)."""
        libc = ctypes.CDLL(None, use_errno=True)
        addr = ctypes.c_void_p(self.array.ctypes.data)
        if libc.mlock(addr, ctypes.c_size_t(self.size)) == 0:
            return self.size
        err = ctypes.get_errno()
        soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        suggest = err == errno.ENOMEM and not (hard == resource.RLIM_INFINITY
                                               or hard > soft + self.size)
        warn(f"warning: failed to mlock {self.size}-byte buffer (after previously locking "
             f"{locked_before} bytes): {os.strerror(err)}"
             + ("\nTry increasing RLIMIT_MEMLOCK ('ulimit -l' as root)." if suggest else ""))
        return 0

    def _parse(self) -> None:
        cur = _Cursor(self.buf, self.path, self.size)
        cur.need(4, "magic")
        magic = bytes(self.buf[:4])
        if magic != GGUF_MAGIC:
            raise cur.fail(f"not a GGUF file: magic is {magic!r}, expected b'GGUF'")
        cur.pos = 4
        self.version = cur.u32("version")
        if self.version not in GGUF_VERSIONS:
            hint = " (big-endian file?)" if self.version & 0xFFFF == 0 else ""
            raise cur.fail(f"unsupported GGUF version {self.version}{hint}; supported: 2, 3")
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        # smallest metadata entry: 8+1 key, 4 type, 1 value; tensor info: 8+1 name, 4, 8, 4, 8
        for count, what, least in ((n_kv, "metadata", 14), (n_tensors, "tensor", 33)):
            if count * least > self.size - cur.pos:
                raise cur.fail(f"{what} count {count} needs at least {count * least} bytes but "
                               f"only {self.size - cur.pos} remain (truncated file or corrupt count)")
        self.metadata, self.value_types = self._read_metadata(cur, n_kv)
        infos = [self._read_tensor_info(cur, i) for i in range(n_tensors)]
        self.alignment = self._alignment(cur)
        data_start = -(-cur.pos // self.alignment) * self.alignment
        self.tensors = [self._bind(cur, info, data_start) for info in infos]

    def _read_metadata(self, cur: _Cursor, n_kv: int) -> tuple[dict, dict]:
        metadata: dict[str, Any] = {}
        types: dict[str, int] = {}
        for i in range(n_kv):
            key = cur.string(f"key of metadata entry #{i}")
            if key in metadata:
                raise cur.fail(f"duplicate metadata key '{key}'")
            vtype = cur.u32(f"value type of '{key}'")
            metadata[key] = _read_value(cur, vtype, key)
            types[key] = vtype
        return metadata, types

    def _read_tensor_info(self, cur: _Cursor, i: int) -> _TensorInfo:
        name = cur.string(f"name of tensor #{i}")
        n_dims = cur.u32(f"dimension count of tensor '{name}'")
        if not 1 <= n_dims <= GGML_MAX_DIMS:
            raise cur.fail(f"tensor '{name}' has {n_dims} dimensions (1..{GGML_MAX_DIMS} allowed)")
        ne = tuple(cur.u64(f"dimension {d} of tensor '{name}'") for d in range(n_dims))
        type_id = cur.u32(f"type of tensor '{name}'")
        rel_offset = cur.u64(f"data offset of tensor '{name}'")
        try:
            ggml_type = GGMLType(type_id)
            block, block_bytes = block_geometry(ggml_type)
        except (ValueError, KeyError):
            raise cur.fail(f"tensor '{name}' has {type_name(type_id)}") from None
        if any(n <= 0 or n >= 1 << 62 for n in ne):
            raise cur.fail(f"tensor '{name}' has an invalid shape {list(ne)}")
        n_elements = 1
        for n in ne:
            n_elements *= n
        if n_elements >= 1 << 62:
            raise cur.fail(f"tensor '{name}' shape {list(ne)} is absurdly large")
        if ne[0] % block:
            raise cur.fail(f"tensor '{name}' row length {ne[0]} is not a multiple of "
                           f"{ggml_type.name} block size {block}")
        nbytes = n_elements // block * block_bytes
        return _TensorInfo(name, ne, ggml_type, rel_offset, nbytes)

    def _alignment(self, cur: _Cursor) -> int:
        align = self.metadata.get(KEY_ALIGNMENT, GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(align, int) or align <= 0 or align & (align - 1):
            raise cur.fail(f"'{KEY_ALIGNMENT}' is {align!r}, not a power of two")
        return align

    def _bind(self, cur: _Cursor, info: _TensorInfo, data_start: int) -> GGUFTensor:
        if info.rel_offset % self.alignment:
            raise cur.fail(f"tensor '{info.name}' data offset {info.rel_offset} is not "
                           f"aligned to {self.alignment}")
        start = data_start + info.rel_offset
        if start + info.nbytes > self.size:
            raise GGUFError(
                f"{self.path}: tensor '{info.name}' data [{start}, {start + info.nbytes}) lies "
                f"past the end of the file ({self.size} bytes); the file is truncated or corrupt"
            )
        view = self.array[start : start + info.nbytes]
        return GGUFTensor(info.name, info.ggml_type, info.ne, start, view)

    def release(self, offset: int, nbytes: int) -> None:
        page = mmap.PAGESIZE
        start, stop = -(-offset // page) * page, (offset + nbytes) // page * page
        if stop > start and hasattr(mmap, "MADV_DONTNEED"):
            try:  # private memory: the pages are freed for good (the tensor is not read again)
                self._mmap.madvise(mmap.MADV_DONTNEED, start, stop - start)
            except OSError:
                pass  # locked pages (mlock) cannot be dropped: they stay


    def close(self) -> None:
        self.array = None
        self.tensors = []
        try:
            self.buf.release()
            self._mmap.close()
        except (BufferError, AttributeError):
            pass  # views still alive elsewhere: the mapping closes when they go
        self._fh.close()


def split_paths(path: str) -> list[str]:
    """All parts of a split model given any one part (`name-00002-of-00003.gguf`), else [path]."""
    m = SPLIT_PATTERN.match(os.path.basename(path))
    if not m:
        return [path]
    count = int(m["count"])
    folder = os.path.dirname(path)
    parts = [os.path.join(folder, f"{m['prefix']}-{i:05d}-of-{count:05d}.gguf")
             for i in range(1, count + 1)]
    missing = [p for p in parts if not Path(p).exists()]
    if missing:
        raise GGUFError(f"{path}: split model is missing part(s): {', '.join(missing)}")
    return parts


def open_gguf(path: str | os.PathLike, load_mode: str = "mmap") -> GGUFFile:
    """Open a GGUF file (or a split model by any of its parts); `load_mode` is one of
    LOAD_MODES (llama.cpp's --load-mode)."""
    return GGUFFile(path, load_mode)
