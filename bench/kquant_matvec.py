"""Q4_K / Q6_K decode matvecs from L2 and from DRAM: GB/s of weights, so a kernel that is as slow
from L2 as from DRAM shows itself compute-bound (issue 17, the byte-pair kernels).

    NUMBA_NUM_THREADS=1 python bench/kquant_matvec.py [--kernels matvec_q4_k_zmm,matvec_q4_k]

L2: one 256 x 1536 matrix, called repeatedly. DRAM: 1 GiB of 1536 x 8960 matrices, each called
once per pass. Synthetic blocks (tests/kernels/test_matvec.py's), best of 7 passes.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.kernels.test_matvec import synth_blocks  # noqa: E402

mv = importlib.import_module("llamacpy.kernels.matvec")
BLOCK_BYTES = {"q4_k": 144, "q6_k": 210}
DEFAULT = ["matvec_q4_k_zmm", "matvec_q4_k", "matvec_q6_k_zmm", "matvec_q6_k"]


def gb_per_s(kernel_name: str, rows: int, n: int, from_dram: bool) -> float:
    kind = "_".join(kernel_name.split("_")[1:3])
    kernel = getattr(mv, kernel_name)
    row_bytes = n // 256 * BLOCK_BYTES[kind]
    count = max(1, (1 << 30) // (rows * row_bytes)) if from_dram else 1
    ws = [synth_blocks(kind.upper(), rows, n, seed=s) for s in range(count)]
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    y = np.empty(rows, np.float32)
    kernel(ws[0], x, y)
    best = np.inf
    for _ in range(7):
        t0 = time.perf_counter()
        for w in ws:
            kernel(w, x, y)
        best = min(best, (time.perf_counter() - t0) / count)
    return rows * row_bytes / best / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", default=",".join(DEFAULT))
    for name in ap.parse_args().kernels.split(","):
        print(f"{name}: L2 {gb_per_s(name, 256, 1536, False):.1f} GB/s, "
              f"DRAM {gb_per_s(name, 1536, 8960, True):.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
