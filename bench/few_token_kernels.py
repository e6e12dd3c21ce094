"""The few-token kernels (the server's batched step, speculative verification): the ymm
`multi_*` kernel against its zmm twin, and the zmm kernel against the VNNI prompt GEMM, on one
synthetic matrix, 1 thread, medians of 7.

    python bench/few_token_kernels.py TYPE ROWS N [-T 4,8,16] [--gemm]

Prints ms per call for each token count and the ratio: where the zmm kernel should take over
from the ymm one (`ZMM_KERNELS`), and with --gemm where the VNNI GEMM should take over from it
(`SMALL_BATCH_VNNI`), both in kernels/matmul.py. Needs a CPU with AVX-512BW.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llamacpy.format.constants import GGMLType  # noqa: E402
from llamacpy.kernels import set_threads  # noqa: E402
from llamacpy.kernels import simd  # noqa: E402
from llamacpy.kernels.dequant import weight_view  # noqa: E402
from llamacpy.kernels.vnni import vnni_enabled, vnni_matmul  # noqa: E402
from tests.kernels.test_integer_matvec import activations, synth_blocks  # noqa: E402

mm = importlib.import_module("llamacpy.kernels.matmul")


def median_ms(fn, reps: int = 7) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("type", choices=[t.name for t in mm.ZMM_TWINS])
    ap.add_argument("rows", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("-T", "--tokens", default="4,8,16")
    ap.add_argument("--gemm", action="store_true", help="zmm kernel against the VNNI GEMM")
    args = ap.parse_args()
    if not simd.HAS_AVX512BW or (args.gemm and not vnni_enabled()):
        sys.exit("this CPU has no AVX-512BW (or, with --gemm, no VNNI)")
    set_threads(1)
    t = GGMLType[args.type]
    w = synth_blocks(args.type, args.rows, args.n, seed=1)
    wv = weight_view(w, t)
    ymm = getattr(mm, f"multi_{args.type.lower()}")
    zmm = getattr(mm, f"multi_{args.type.lower()}_zmm")
    other, label = ("VNNI GEMM", "gemm") if args.gemm else ("ymm", "ymm")
    for T in (int(x) for x in args.tokens.split(",")):
        X = activations(args.n * T, T).reshape(T, args.n)
        Y = np.empty((T, args.rows), np.float32)
        if args.gemm:
            base = median_ms(lambda: vnni_matmul(w, t, X, Y))
        else:
            base = median_ms(lambda: ymm(wv, X, Y, 1))
        z = median_ms(lambda: zmm(wv, X, Y, 1))
        print(f"{args.type} {args.rows}x{args.n} T={T}: {other} {base:.2f} ms, zmm {z:.2f} ms "
              f"({base / z:.2f}x {label}/zmm)", flush=True)


if __name__ == "__main__":
    main()
