"""Where a batched decode step's time goes: one token for each of N sequences (the server's step
with N busy slots) against one token of one sequence, in-process, interleaved, same instrumentation
as bench/decode_step.py.

    python bench/batched_step.py [MODEL] [-t 1] [-n 4] [--steps 40] [--no-repack]

The model is loaded as llama-server loads it with --parallel > 1 (Q5_0 / IQ4_NL repacked as Q8_0)
unless --no-repack. Prints ms per step by part for 1 and N sequences, and the step-time ratio: N
parallel streams can reach 2x the aggregate tokens/s of one stream only if this ratio is <= N / 2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decode_step import instrument  # noqa: E402


class Switch:
    """A totals dict that forwards to whichever dict is `current` (one per batch size)."""

    current: dict

    def __getitem__(self, key):
        return self.current[key]

    def __setitem__(self, key, value):
        self.current[key] = value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="gemma3-270m")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--n-seq", type=int, default=4)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--no-repack", action="store_true")
    args = ap.parse_args()

    from llamacpy.memory.batch import Batch, concat
    from llamacpy.engine.context import Context
    from llamacpy.format import open_gguf
    from llamacpy.hub import resolve_model
    from llamacpy.kernels import set_threads
    from llamacpy.models import load_model

    set_threads(args.threads)
    model = load_model(open_gguf(resolve_model(args.model)), repack=not args.no_repack)
    n, prompt = args.n_seq, 64
    ctx = Context(model, n_ctx=n * (prompt + args.steps + 8), n_seq=n)
    for s in range(n):
        ctx.decode(Batch.from_tokens(list(range(100 + s, 100 + s + prompt)), seq=s))
    switch = Switch()
    instrument(model, switch, ctx.cache)
    totals = {1: defaultdict(float), n: defaultdict(float)}
    steps: dict[int, list[float]] = {1: [], n: []}
    warmup = 4
    for i in range(args.steps):
        for k in (1, n):  # interleaved: this VM's speed drifts
            switch.current = totals[k] if i >= warmup else defaultdict(float)
            batch = concat([Batch.from_tokens([7], pos0=prompt + i, seq=s) for s in range(k)])
            t0 = time.perf_counter()
            ctx.decode(batch)
            if i >= warmup:
                steps[k].append(time.perf_counter() - t0)
    m = args.steps - warmup
    print(f"{args.model}, {args.threads} thread(s), {m} steps of 1 and {n} sequences "
          f"(ms per step; medians for the whole step)")
    print(f"| part | 1 sequence | {n} sequences |\n|---|---:|---:|")
    for label in sorted(totals[n]):
        print(f"| {label} | {totals[1][label] / m * 1e3:.2f} | {totals[n][label] / m * 1e3:.2f} |")
    one, many = statistics.median(steps[1]), statistics.median(steps[n])
    print(f"| **step** | **{one * 1e3:.2f}** | **{many * 1e3:.2f}** |")
    print(f"\n{n}-sequence step / 1-sequence step: {many / one:.2f}x "
          f"(aggregate speed-up {n * one / many:.2f}x)")


if __name__ == "__main__":
    main()
