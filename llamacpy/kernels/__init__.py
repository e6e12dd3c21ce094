"""@njit kernels, no model knowledge: matvec (decode), matmul (prompt), dequantize (get_rows).

The kernels release the GIL (kernels/threading_layer.py: where numba has a thread-safe threading
layer): while one computes, the server's HTTP thread (streaming chunks, parsing requests) runs on
another core instead of waiting for the step to end."""

from __future__ import annotations

import ctypes
import glob
import os

import numba
import numpy as np

from . import cache_stamp  # noqa: F401  (before any kernel is defined: cache stamps)
from . import runtime  # noqa: F401  (before any kernel compiles: fp16 routines)
from . import fast_inline  # noqa: F401  (before any kernel compiles: cheaper inlining)
from .compiler_pages import install as release_llvm_after_compiles
from .dequant import dequantize_rows
from .matmul import matmul
from .matvec import matvec

release_llvm_after_compiles()  # before any kernel loads: its LLVM pages go before it runs

__all__ = ["dequantize_rows", "get_threads", "matmul", "matvec", "set_threads"]

# OpenBLAS entry points as numpy's bundled scipy-openblas and plain builds name them.
_BLAS_SET_THREADS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                     "openblas_set_num_threads64_", "openblas_set_num_threads")


def _openblas():
    """The loaded OpenBLAS and its set_num_threads, or (None, None) (another BLAS, or none)."""
    libs = os.path.join(os.path.dirname(np.__file__), "..", "numpy.libs", "*openblas*")
    for path in glob.glob(libs) + [None]:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in _BLAS_SET_THREADS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                return lib, fn
    return None, None


def _openblas_setter():
    """The loaded OpenBLAS's set_num_threads, or None."""
    return _openblas()[1]


def quiet_openblas_workers() -> bool:
    """Make OpenBLAS's idle workers sleep at once where numpy loaded it before llamacpy set
    OPENBLAS_THREAD_TIMEOUT (a script that imports numpy first): they would spin ~0.1 s after
    each call on the cores numba's threads need next, and a 2-thread prompt ran 3.5x slower.
    OpenBLAS reads the variable when it loads, so it is read again and the workers restarted
    (they start again with the next threaded call). True if they were."""
    lib, _ = _openblas()
    wanted = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "")
    needed = ("openblas_thread_timeout", "openblas_read_env", "blas_thread_shutdown_")
    if lib is None or not wanted.isdigit() or not all(hasattr(lib, n) for n in needed):
        return False
    if lib.openblas_thread_timeout() == int(wanted):
        return False
    lib.openblas_read_env()
    lib.blas_thread_shutdown_()
    return True


quiet_openblas_workers()  # where numpy was imported first


_requested_threads: int | None = None  # the last set_threads, for threads started later


def set_threads(n: int) -> int:
    """Use n threads for the numba kernels and for BLAS (llama.cpp's -t); returns the count set."""
    global _requested_threads
    n = max(1, min(int(n), numba.config.NUMBA_NUM_THREADS))
    numba.set_num_threads(n)
    _requested_threads = n
    setter = _openblas_setter()
    if setter is not None:
        setter(n)
    return n


def apply_threads_here() -> None:
    """numba's thread count belongs to the calling thread: a thread started after set_threads
    (the server's loader and engine) must call this, or its kernels use every core."""
    if _requested_threads is not None:
        numba.set_num_threads(_requested_threads)


def get_threads() -> int:
    return numba.get_num_threads()
