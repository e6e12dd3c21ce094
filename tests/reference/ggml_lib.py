"""ctypes access to llama.cpp's own quantizer (`ggml_quantize_chunk` in libggml-base.so).

The library comes from a llama-cpp-python install: the reference venv /work/ref/venv, any
importable `llama_cpp`, or the path in $LLAMACPY_LIBGGML. Tests skip when none is found.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os

import numpy as np

from llamacpy.quants import get_quant

REF_VENV = "/work/ref/venv"
LIB_NAME = "libggml-base.so"


def _candidates() -> list[str]:
    paths = [os.environ.get("LLAMACPY_LIBGGML", "")]
    paths += sorted(glob.glob(f"{REF_VENV}/lib/python3*/site-packages/llama_cpp/lib/{LIB_NAME}"))
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        paths += [os.path.join(p, "lib", LIB_NAME) for p in spec.submodule_search_locations]
    return [p for p in paths if p]


def find_libggml() -> str | None:
    """Path of a libggml-base.so exporting ggml_quantize_chunk, or None when there is none."""
    for path in _candidates():
        if os.path.isfile(path):
            return path
    return None


@functools.cache
def _lib() -> ctypes.CDLL:
    path = find_libggml()
    if path is None:
        raise RuntimeError("libggml-base.so not found: install llama-cpp-python 0.3.36")
    lib = ctypes.CDLL(path)
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                   ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
    return lib


def ggml_quantize(x: np.ndarray, type_id: int) -> np.ndarray:
    """llama.cpp's bytes for float32 rows x [nrows, n_per_row]: uint8 [nrows, row bytes].

    Calls ggml_quantize_chunk(type, x, dst, 0, nrows, n_per_row, imatrix=NULL).
    """
    x = np.ascontiguousarray(x, dtype=np.float32)
    nrows, n_per_row = x.shape
    row_bytes = get_quant(type_id).row_nbytes(n_per_row)
    dst = np.zeros((nrows, row_bytes), dtype=np.uint8)
    written = _lib().ggml_quantize_chunk(int(type_id), x.ctypes.data, dst.ctypes.data, 0,
                                         nrows, n_per_row, None)
    assert written == dst.nbytes, (written, dst.nbytes)
    return dst
