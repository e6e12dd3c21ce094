"""One prompt-sized matmul per layer shape through the VNNI kernel (kernels/vnni.py), timed whole
and by part (kernels/vnni.py's PROFILE): activation quantization, weight unpacking (pack_*), the
GEMM panels, the stores into the output.

    python bench/vnni_layers.py [-t 512] [-r 7] [--types Q4_K,Q6_K,Q8_0]

Shapes are Qwen2.5-1.5B's (ffn_gate/up 8960 x 1536, ffn_down 1536 x 8960, attn_q 1536 x 1536,
attn_v 256 x 1536) with random blocks (tests/kernels/test_matvec.py's synth_blocks). Prints median
CPU ms per matmul (1 thread: the machine may be shared), its GMAC/s, and the median
CPU ms of each part.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llamacpy  # noqa: E402,F401  (before numpy: OpenBLAS's thread timeout)
import numpy as np  # noqa: E402

from llamacpy.format.constants import GGMLType  # noqa: E402
from llamacpy.kernels import set_threads, vnni  # noqa: E402
from tests.kernels.test_matvec import synth_blocks  # noqa: E402

SHAPES = [(8960, 1536), (1536, 8960), (1536, 1536), (256, 1536)]
PARTS = ("quantize", "unpack", "gemm", "store")


def measure(w, ggml_type, X, out, rounds: int) -> tuple[float, dict[str, float]]:
    """Median ms of the whole matmul and of each part, after one warm-up call."""
    vnni.vnni_matmul(w, ggml_type, X, out)
    whole, parts = [], defaultdict(list)
    for _ in range(rounds):
        vnni.PROFILE = {}
        t0 = time.process_time()
        vnni.vnni_matmul(w, ggml_type, X, out)
        whole.append(time.process_time() - t0)
        for k, v in vnni.PROFILE.items():
            parts[k].append(v)
    vnni.PROFILE = None
    return statistics.median(whole) * 1e3, {k: statistics.median(v) * 1e3 for k, v in parts.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--tokens", type=int, default=512)
    ap.add_argument("-r", "--rounds", type=int, default=7)
    ap.add_argument("--types", default="Q4_K,Q6_K")
    args = ap.parse_args()
    set_threads(1)
    rng = np.random.default_rng(0)
    print("| type | rows x n | matmul ms | GMAC/s | " + " | ".join(f"{p} ms" for p in PARTS)
          + " |\n|---|---|---:|---:|" + "---:|" * len(PARTS))
    for name in args.types.split(","):
        for rows, n in SHAPES:
            w = synth_blocks(name, rows, n, seed=1)
            X = rng.standard_normal((args.tokens, n)).astype(np.float32)
            out = np.empty((args.tokens, rows), np.float32)
            ms, parts = measure(w, GGMLType[name], X, out, args.rounds)
            gmacs = rows * n * args.tokens / ms / 1e6
            print(f"| {name} | {rows} x {n} | {ms:.2f} | {gmacs:.0f} | "
                  + " | ".join(f"{parts.get(p, 0):.2f}" for p in PARTS) + " |", flush=True)


if __name__ == "__main__":
    main()
