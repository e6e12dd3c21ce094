"""Whether the kernels may release the GIL, and the numba threading layer that makes it safe.

With nogil, the server's HTTP thread runs while the engine computes, and a second thread may start
a parallel kernel while one runs: numba's tbb and omp layers allow that, its built-in workqueue
layer aborts the process on it. So the kernels release the GIL only when a thread-safe layer
loads (numba then picks it: THREADING_LAYER "threadsafe"); with workqueue alone they keep the GIL,
as before, and calls from several threads take turns.
"""

from __future__ import annotations

import numba


def _threadsafe_layer_loads() -> bool:
    for pool in ("tbbpool", "omppool"):
        try:
            __import__(f"numba.np.ufunc.{pool}")
            return True
        except ImportError:  # the TBB or OpenMP runtime library is missing
            continue
    return False


def _choose() -> bool:
    layer = numba.config.THREADING_LAYER
    if layer in ("tbb", "omp", "threadsafe", "safe"):
        return True  # the user chose a thread-safe layer (numba fails loudly if it is missing)
    if layer != "default" or not _threadsafe_layer_loads():
        return False  # workqueue, forksafe (may be workqueue) or nothing better installed
    numba.config.THREADING_LAYER = "threadsafe"
    return True


NOGIL: bool = _choose()
