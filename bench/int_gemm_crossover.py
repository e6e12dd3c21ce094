"""The integer prompt GEMM (kernels/vnni.py: vpdpwssd on AVX-512 VNNI, vpmaddwd on AVX2) against
dequantize + sgemm (kernels/matmul.py `_tiled`) on one synthetic matrix per type, by token count:
where the GEMM should take over (`AVX2_FROM_TOKENS` on AVX2). 1 thread, rounds interleaved,
medians of 5, wall ms per call.

    python bench/int_gemm_crossover.py [-T 16,64,256,512] [--types Q8_0,Q5_0,Q4_K,Q6_K,...]

Shapes are Qwen2.5-Coder-0.5B's and Gemma 3 270M's FFN layers. Prints each type's ms for both
paths and the ratio (sgemm / GEMM: above 1, the GEMM is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llamacpy  # noqa: E402,F401  (before numpy: OpenBLAS's thread timeout)
import numpy as np  # noqa: E402

from llamacpy.format.constants import GGMLType  # noqa: E402
from llamacpy.kernels import set_threads, vnni  # noqa: E402
from llamacpy.kernels.matmul import _tiled  # noqa: E402
from tests.kernels.test_matvec import synth_blocks  # noqa: E402

SHAPES = {"Q8_0": (4864, 896), "Q5_0": (4864, 896), "Q4_K": (1536, 1536), "Q6_K": (1536, 1536),
          "Q4_1": (1536, 576), "IQ4_NL": (2048, 640), "Q4_0": (2048, 640)}


def timed(f, rounds: int) -> float:
    t0 = time.perf_counter()
    for _ in range(rounds):
        f()
    return (time.perf_counter() - t0) / rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-T", "--tokens", default="16,64,256,512")
    ap.add_argument("--types", default=",".join(SHAPES))
    args = ap.parse_args()
    set_threads(1)
    rng = np.random.default_rng(0)
    counts = [int(v) for v in args.tokens.split(",")]
    print("| type | rows x n | " + " | ".join(f"{t} tokens: GEMM / sgemm ms" for t in counts)
          + " |\n|---|---|" + "---|" * len(counts))
    for name in args.types.split(","):
        rows, n = SHAPES[name]
        w, ggml_type = synth_blocks(name, rows, n, seed=1), GGMLType[name]
        cells = []
        for T in counts:
            X = rng.standard_normal((T, n)).astype(np.float32)
            out = np.empty((T, rows), np.float32)
            paths = (lambda: vnni.vnni_matmul(w, ggml_type, X, out),
                     lambda: _tiled(w, ggml_type, X, out))
            for f in paths:
                f()
            reps = max(1, 64 // T)
            ts = [[], []]
            for _ in range(5):
                for i, f in enumerate(paths):
                    ts[i].append(timed(f, reps))
            g, s = (statistics.median(v) * 1e3 for v in ts)
            cells.append(f"{g:.2f} / {s:.2f} ({s / g:.2f}x)")
        print(f"| {name} | {rows} x {n} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
