"""LLVM's code out of the resident set once the kernels it links have been loaded.

numba links every kernel through LLVM (libllvmlite.so, ~175 MB on disk). Importing numba and
loading a model's cached kernels map 65-95 MiB of that library's code and read-only data into
this process, and nothing runs them again until another kernel compiles or loads. Those pages
are clean copies of the file, so madvise(MADV_DONTNEED) takes them out of the resident set and
a later compile faults them back in from the page cache, as the OS does under memory pressure.
A prompt's peak RSS falls by that much (docs/PERFORMANCE.md, "Issue 17 on Zen 4, 2026-12-07").
They go as soon as numba lets go of its compiler lock, before the kernel just loaded first runs:
each load maps ~10 MiB again, and the kernel's weights would stack on top of them.
LLAMACPY_RELEASE_LLVM=0 keeps them.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
import threading

MADV_DONTNEED = 4
ENABLED = sys.platform.startswith("linux") and os.environ.get("LLAMACPY_RELEASE_LLVM", "1") != "0"
LIBRARY = "libllvmlite"
_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) ")

_lock = threading.Lock()
_ranges: list[tuple[int, int]] | None = None
_symbols: set | frozenset | None = None  # numba's JIT's defined symbols (jit_symbols)
_seen = 0  # their count at the last release


def llvm_ranges(smaps: str = "/proc/self/smaps") -> list[tuple[int, int]]:
    """(start, end) of each mapping of LLVM's library that is not writable and holds no private
    page: only those read back from the file exactly as they are now. The RELRO segment (made
    read-only after the loader relocated it, so its pages are private copies) is left alone."""
    found, current = [], None
    with open(smaps) as lines:
        for line in lines:
            header = _HEADER.match(line)
            if header:
                start, end, perms = header.groups()
                parts = line.split(maxsplit=5)
                path = parts[5].strip() if len(parts) > 5 else ""
                current = (int(start, 16), int(end, 16)) \
                    if LIBRARY in os.path.basename(path) and "w" not in perms else None
            elif current is not None and line.startswith("Anonymous:"):
                if int(line.split()[1]) == 0:
                    found.append(current)
                current = None
    return found


def release() -> int:
    """Drop LLVM's clean pages from this process's resident set, and return the heap that
    compiling and loading freed to the OS; the bytes of LLVM's mappings advised."""
    global _ranges
    if _ranges is None:
        try:
            _ranges = llvm_ranges()
        except (OSError, ValueError):  # no readable /proc (a sandbox): a decode must not fail
            _ranges = []
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    advised = 0
    for start, end in _ranges:
        if libc.madvise(start, end - start, MADV_DONTNEED) == 0:
            advised += end - start
    trim_heap()  # what linking freed goes back too (~10 MiB)
    return advised


def trim_heap() -> None:
    """Give the heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing).

    glibc raises its mmap threshold to the largest block freed so far, so from the second
    prompt on a prompt's buffers come from the heap and stay there when freed: after a Qwen3.5
    stand-in's 512-token prompt, 714 MiB resident instead of 681. ~2 ms."""
    libc = ctypes.CDLL(None)
    if hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def jit_symbols() -> set | frozenset:
    """numba's JIT's set of defined symbols: it grows with every kernel compiled or loaded from
    the cache. Empty (nothing is ever released) where this numba keeps them elsewhere."""
    try:
        from numba.core.registry import cpu_target

        symbols = cpu_target.target_context.codegen()._engine._defined_symbols
        return symbols if isinstance(symbols, set) else frozenset()
    except Exception:
        return frozenset()


class _ReleaseAfterCompile:
    """numba holds its compiler lock while a kernel compiles or loads from the cache; when the
    outermost hold ends, LLVM's pages go (numba.core.event listener, a `Listener` subclass made
    in `install`: numba is imported only then)."""

    def __init__(self):
        self._depth = threading.local()

    def on_start(self, event) -> None:
        self._depth.n = getattr(self._depth, "n", 0) + 1

    def on_end(self, event) -> None:
        self._depth.n = max(getattr(self._depth, "n", 1) - 1, 0)
        if self._depth.n == 0:
            release_if_loaded()


_installed = False


def install() -> None:
    """Release after every kernel compile or cache load (once per process; no-op when disabled)."""
    global _installed
    if _installed or not ENABLED:
        return
    from numba.core import event

    listener = type("ReleaseAfterCompile", (_ReleaseAfterCompile, event.Listener), {})()
    event.register("numba:compiler_lock", listener)
    _installed = True


def release_if_loaded() -> bool:
    """release() if a kernel was compiled or loaded since the last call (one set's length): the
    listener above calls it when numba lets go of its compiler lock, and a new context once for
    what importing numba mapped."""
    global _symbols, _seen
    if _symbols is None:
        _symbols = jit_symbols() if ENABLED else frozenset()
        _seen = -1 if isinstance(_symbols, set) else 0  # the first call drops what numba mapped
    if len(_symbols) == _seen:
        return False
    with _lock:
        _seen = len(_symbols)
        release()
    return True
