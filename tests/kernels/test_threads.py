"""-t reaches kernels run in threads started later (numba keeps the thread count per thread)."""

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
