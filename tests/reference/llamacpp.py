"""llama.cpp itself through llama-cpp-python 0.3.36 (optional: tests skip when it is absent).

Import this module only where llama_cpp may be missing; `available()` tells.
"""

from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path


def available() -> bool:
    return importlib.util.find_spec("llama_cpp") is not None


def model_quantize(path_in: Path, path_out: Path, ftype: int, nthread: int = 2, **flags) -> None:
    """llama_model_quantize with default params except ftype, nthread and the given fields
    (allow_requantize, quantize_output_tensor, pure, output_tensor_type, token_embedding_type)."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = nthread
    for key, value in flags.items():
        setattr(params, key, value)
    rc = llama_cpp.llama_model_quantize(str(path_in).encode(), str(path_out).encode(),
                                        ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize failed with {rc}")


def patch_default_params() -> None:
    """Make llama_model_default_params return use_extra_bufts off, for the high-level Llama too:
    the default AMX/repack path crashes in llama_decode on these machines. Idempotent."""
    import llama_cpp
    import llama_cpp.llama as high_level

    original = llama_cpp.llama_model_default_params
    if getattr(original, "patched", False):
        return

    def params():
        p = original()
        p.use_extra_bufts = False
        return p

    params.patched = True
    llama_cpp.llama_model_default_params = params
    high_level.llama_cpp.llama_model_default_params = params


def load_llama(path: Path, **kwargs):
    """llama_cpp.Llama with use_extra_bufts off (see patch_default_params)."""
    import llama_cpp

    patch_default_params()
    kwargs.setdefault("verbose", False)
    return llama_cpp.Llama(model_path=str(path), **kwargs)
