"""Runtime support the JIT-compiled kernels may call. On a target without F16C (the portable
build, NUMBA_CPU_NAME=generic), LLVM lowers fp16 <-> fp32 conversions to the compiler runtime's
__extendhfsf2 / __truncsfhf2, which numba's JIT cannot resolve on its own: the process would
abort with "Symbol not found". libgcc_s (GCC >= 12) exports both; load it before any kernel
compiles."""

from __future__ import annotations

from llvmlite import binding

HALF_FLOAT_LIBRARIES = ("libgcc_s.so.1", "libgcc_s.so")


def load_half_float_support() -> str | None:
    """The library now providing the fp16 conversion routines, or None if none loaded."""
    for name in HALF_FLOAT_LIBRARIES:
        try:
            binding.load_library_permanently(name)
            return name
        except RuntimeError:
            continue
    return None


HALF_FLOAT_SUPPORT = load_half_float_support()
