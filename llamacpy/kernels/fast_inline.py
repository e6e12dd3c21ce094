"""Faster numba compiles for kernels built from `inline="always"` helpers; the same machine code.

numba inlines an `@njit(inline="always")` helper into its caller at the IR level. For each call
site, `InlineWorker.inline_function` builds the helper's IR afresh (`run_untyped_passes`, which
inlines the helper's own helpers the same way), and `inline_ir` then deep-copies that IR twice,
block by block: once to have a copy to mutate, once for a return value that every caller in
numba discards. Each block's deep copy also copies the function's scope, every variable in it,
so one copy costs blocks x variables. In the multi-token kernels (kernels/matmul.py) and
attention, whose helpers nest three or four deep, those copies were about half of each kernel's
compile time (multi_q8_0: 6.2 s, of which 3.3 s inlining, 2.9 s of it copying).

The IR that `inline_function` has just built is held by nothing else, so while it inlines, the
block copies are skipped: the blocks are used as they are. Every other use of `inline_ir`
(numba's inlining of `@overload(inline=...)` implementations in the typed passes, whose IR numba
keeps and reuses) copies as before. The inlined IR is the same statements in the same order, so
the generated code is identical: bench/cold_start.py `asm` dumps every compiled kernel's
assembly, and the dumps with and without this patch are byte-identical (docs/PERFORMANCE.md,
"Cold start"). Set LLAMACPY_NUMBA_PLAIN_INLINE=1 to compile with numba's own copying.
"""

from __future__ import annotations

import copy
import os
import threading

_local = threading.local()  # numba compiles under one global lock; this is for safety only


class _CopyForInliner:
    """Stands for the `copy` module inside numba.core.inline_closurecall (its only use there is
    `copy.deepcopy(block)` in inline_ir's copy_ir): a block of a freshly built IR is returned
    as it is; anything else is deep-copied."""

    def __init__(self, block_type):
        self._block_type = block_type

    def __getattr__(self, name):
        return getattr(copy, name)

    def deepcopy(self, x, memo=None):
        if memo is None and type(x) is self._block_type and getattr(_local, "fresh", 0):
            return x
        return copy.deepcopy(x, memo)


def _install() -> bool:
    if os.environ.get("LLAMACPY_NUMBA_PLAIN_INLINE", "") not in ("", "0"):
        return False
    try:
        from numba.core import inline_closurecall as icc
        from numba.core import ir
    except ImportError:
        return False
    worker = getattr(icc, "InlineWorker", None)
    inline_function = getattr(worker, "inline_function", None)
    if getattr(icc, "copy", None) is not copy or inline_function is None or \
            not hasattr(worker, "inline_ir") or not hasattr(worker, "run_untyped_passes"):
        return False  # a numba whose inliner is not the one this was written against

    def fresh_inline_function(self, *args, **kwargs):
        _local.fresh = getattr(_local, "fresh", 0) + 1
        try:
            return inline_function(self, *args, **kwargs)
        finally:
            _local.fresh -= 1

    fresh_inline_function.__wrapped__ = inline_function
    icc.copy = _CopyForInliner(ir.Block)
    worker.inline_function = fresh_inline_function
    return True


INSTALLED: bool = _install()
