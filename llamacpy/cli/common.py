"""Helpers shared by the tools: llama.cpp-style type names, sizes, and error exits."""

from __future__ import annotations

import sys

from ..format.constants import GGMLType


def ggml_type_name(t: GGMLType) -> str:
    """ggml_type_name spelling: q4_K, iq4_nl, f16, bf16."""
    return t.name.lower().replace("_k", "_K")


def mib(nbytes: int) -> float:
    return nbytes / 1024 / 1024


def fail(tool: str, message: str, code: int = 1) -> int:
    print(f"{tool}: error: {message}", file=sys.stderr)
    return code


def progress_bar(done: int, total: int, width: int = 20) -> str:
    filled = width * done // max(total, 1)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def set_threads(n: int) -> None:
    """Threads for numba kernels (-t / nthreads); capped at what numba was started with."""
    if n > 0:
        import numba

        numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
