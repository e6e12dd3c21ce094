"""F16 matmul by token count, 1 thread: the integer GEMM (kernels/vnni.py, called directly) against
the float path matmul takes with the GEMM off (multi_f16 up to 8 tokens, then dequantize + sgemm),
on a Qwen3.5-vision / MiniLM-sized layer; rounds interleaved, medians of 5.

    NUMBA_NUM_THREADS=1 python bench/f16_crossover.py
"""
import time, statistics, importlib, numpy as np
import llamacpy
from llamacpy.kernels import set_threads, vnni
from llamacpy.format.constants import GGMLType
mm = importlib.import_module("llamacpy.kernels.matmul")
set_threads(1)
rng = np.random.default_rng(0)
for rows, n in [(2304, 768), (3072, 768), (768, 3072)]:
    w = rng.standard_normal((rows, n)).astype("<f2").view(np.uint8)
    for t in [4, 8, 12, 16, 24, 32, 64]:
        X = rng.standard_normal((t, n)).astype(np.float32)
        res = {}
        for rnd in range(5):
            for on in (False, True):
                vnni.ENABLED = on
                if on:  # the int GEMM directly, whatever the limit
                    f = lambda: vnni.vnni_matmul(w, GGMLType.F16, X, np.empty((t, rows), np.float32))
                else:
                    f = lambda: mm.matmul(w, GGMLType.F16, X)
                f()
                t0 = time.perf_counter(); [f() for _ in range(5)]
                res.setdefault(on, []).append((time.perf_counter() - t0) / 5 * 1e3)
        a, b = statistics.median(res[False]), statistics.median(res[True])
        print(f"{rows}x{n} t={t}: float {a:.3f} ms  int {b:.3f} ms  int speed-up {a/b:.2f}x", flush=True)
