"""Kernels and threads: -t reaches kernels run in threads started later (numba keeps the thread
count per thread), and kernels run from several threads at once stay correct."""

from __future__ import annotations

import threading

import numba
import pytest

from llamacpy.kernels import apply_threads_here, get_threads, set_threads


@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="needs two numba threads")
def test_thread_started_later_gets_the_count():
    before = get_threads()
    seen = {}

    def worker(apply: bool) -> None:
        if apply:
            apply_threads_here()
        seen[apply] = get_threads()

    try:
        set_threads(1)
        for apply in (False, True):
            t = threading.Thread(target=worker, args=(apply,))
            t.start()
            t.join()
    finally:
        set_threads(before)
    assert seen[False] == numba.config.NUMBA_NUM_THREADS  # why the server must apply it
    assert seen[True] == 1


def test_kernels_in_two_threads_at_once():
    """With the GIL released (kernels/threading_layer.py) two threads run parallel kernels at the
    same time, as the server's engine and a request thread may: each gets its own results, and
    the layer numba picked is a thread-safe one (workqueue would abort the process)."""
    import numpy as np

    from llamacpy.format.constants import GGMLType
    from llamacpy.kernels import matmul
    from llamacpy.kernels.threading_layer import NOGIL
    from llamacpy.quants import quantize

    rng = np.random.default_rng(0)
    w = quantize(rng.standard_normal((512, 640)).astype(np.float32), GGMLType.Q8_0)
    xs = [rng.standard_normal((n, 640)).astype(np.float32) for n in (1, 4, 1, 4)]
    want = [matmul(w, GGMLType.Q8_0, x) for x in xs]
    got: dict[int, list] = {}

    def worker(i: int) -> None:
        got[i] = [matmul(w, GGMLType.Q8_0, xs[i]) for _ in range(200)]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, runs in got.items():
        assert all(np.array_equal(r, want[i]) for r in runs)
    if NOGIL:
        assert numba.threading_layer() in ("tbb", "omp")


QUIET_AFTER_NUMPY = """
import numpy as np
import llamacpy.kernels as kernels
lib, _ = kernels._openblas()
if lib is None or not hasattr(lib, "openblas_thread_timeout"):
    print("no OpenBLAS")
else:
    print(lib.openblas_thread_timeout())
    a = np.ones((300, 300), np.float32)
    kernels.set_threads(2)
    assert float((a @ a)[0, 0]) == 300.0  # the restarted workers still multiply
"""


def test_openblas_workers_sleep_when_numpy_came_first():
    """A script that imports numpy before llamacpy loads OpenBLAS before OPENBLAS_THREAD_TIMEOUT
    is set; its idle workers then spun on the cores numba's threads needed (a 2-thread prompt
    3.5x slower). Importing the kernels makes OpenBLAS read the variable again."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", QUIET_AFTER_NUMPY], capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    if out.stdout.strip() == "no OpenBLAS":
        pytest.skip("numpy's BLAS is not an OpenBLAS with these entry points")
    assert out.stdout.split() == ["4"]
