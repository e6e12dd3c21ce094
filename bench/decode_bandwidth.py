"""Decode against the machine's memory bandwidth, in one run: a STREAM-like read (a numba
parallel sum over a 1 GiB array, best of 5) at each thread count, then tg on MODEL at the same
thread counts, as bytes of weights read per token / time per token.

    python bench/decode_bandwidth.py MODEL [-t 1,2] [-n 64]

Bytes per token: every 2-D weight a decode step multiplies by, which is every tensor but the
token embedding unless the model ties its output projection to it (then the embedding is read
once per token as the output matrix). Prints GB/s and the share of the read bandwidth.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import llamacpy  # noqa: E402, F401  (before numpy: it sets OpenBLAS's thread timeout)
import numba  # noqa: E402
import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402


@njit(parallel=True, fastmath=True, cache=True)
def _read_sum(rows):
    """Sum of a float32 [chunks, m] array, its rows in parallel (vectorised row sums): every
    byte read once, nothing written."""
    part = np.zeros(rows.shape[0], np.float32)
    for c in prange(rows.shape[0]):
        part[c] = rows[c].sum()
    return part.sum()


def read_bandwidth(threads: int, nbytes: int = 1 << 30) -> float:
    """GB/s of the best of 5 reads of a buffer of `nbytes`."""
    numba.set_num_threads(threads)
    a = np.ones(nbytes // 4, np.float32).reshape(64, -1)
    _read_sum(a)
    best = min(_timed(lambda: _read_sum(a)) for _ in range(5))
    return nbytes / best / 1e9


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def weight_bytes(path: str) -> int:
    from llamacpy.format import open_gguf

    g = open_gguf(path)
    names = g.tensors
    total = sum(t.nbytes for n, t in names.items() if len(t.ne) == 2 and n != "token_embd.weight")
    if "output.weight" not in names:  # tied: the embedding is the output matrix
        total += names["token_embd.weight"].nbytes
    return total


def tokens_per_second(path: str, threads: int, n: int) -> float:
    from llamacpy import Llama

    llm = Llama(path, n_ctx=512, n_threads=threads, verbose=False)
    llm.eval([1, 2, 3, 4])
    t0 = time.perf_counter()
    for k in range(n):
        llm.eval([100 + k])
    return n / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", default="1,2")
    ap.add_argument("-n", "--n-gen", type=int, default=64)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    from llamacpy.hub import resolve_model

    path = str(resolve_model(args.model))
    if args.one:
        return one(path, args.one, args.n_gen)
    print(f"{args.model}: {weight_bytes(path) / 1e6:.0f} MB of weights per token")
    for t in args.threads.split(","):  # one process per thread count, as a user runs it
        env = dict(os.environ, OMP_NUM_THREADS=t, OPENBLAS_NUM_THREADS=t)
        subprocess.run([sys.executable, __file__, args.model, "--one", t, "-n",
                        str(args.n_gen)], check=True, env=env)


def one(path: str, threads: int, n_gen: int) -> None:
    tps = tokens_per_second(path, threads, n_gen)
    bw = read_bandwidth(threads)
    got = weight_bytes(path) * tps / 1e9
    print(f"{threads} thread(s): read {bw:.1f} GB/s; decode {tps:.2f} tokens/s = {got:.1f} "
          f"GB/s of weights, {100 * got / bw:.0f}% of the read bandwidth", flush=True)


if __name__ == "__main__":
    main()
