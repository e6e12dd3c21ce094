"""What one decode of T rows costs (a speculative verification: T rows of one sequence, every
row's logits) after a prefix, against T = 1.

    python bench/decode_rows.py MODEL [-T 1 2 4 8 13] [--prefix 300] [-r 3]

Prints the best of `-r` decodes per T, in ms, and per row. Run with NUMBA_NUM_THREADS=1
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for one thread.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from llamacpy.engine.context import Context  # noqa: E402
from llamacpy.format import open_gguf  # noqa: E402
from llamacpy.hub import resolve_model  # noqa: E402
from llamacpy.memory.batch import Batch  # noqa: E402
from llamacpy.models import load_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-T", type=int, nargs="+", default=[1, 2, 4, 8, 13])
    ap.add_argument("--prefix", type=int, default=300)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    args = ap.parse_args()
    model = load_model(open_gguf(resolve_model(args.model)))
    ctx = Context(model, n_ctx=args.prefix + max(args.T) + 16)
    rng = np.random.default_rng(0)
    n_vocab = model.args.n_vocab
    prefix = [int(t) for t in rng.integers(100, n_vocab - 100, args.prefix)]
    print(f"{args.model}: {args.prefix}-token prefix, best of {args.rounds}")
    for T in args.T:
        best = float("inf")
        for _ in range(args.rounds):
            ctx.cache.clear()
            ctx.decode(Batch.from_tokens(prefix))
            rows = [int(t) for t in rng.integers(100, n_vocab - 100, T)]
            batch = Batch.from_tokens(rows, pos0=args.prefix, all_logits=True)
            t0 = time.perf_counter()
            ctx.decode(batch)
            best = min(best, time.perf_counter() - t0)
        print(f"T = {T:3d}: {1000 * best:8.1f} ms  {1000 * best / T:7.1f} ms per row", flush=True)


if __name__ == "__main__":
    main()
