"""Where a prompt's time goes: one pp512-style batch (random tokens, logits of the last row only,
as llama-bench's pp test), timed by part with bench/decode_step.py's instrumentation.

    python bench/prompt_parts.py MODEL [-t 1] [-p 512] [-r 3]

Prints ms per part (medians over the rounds) and its share; "glue" is the batch time minus the
parts (residual adds, reshapes, embeddings, Python between the calls). Where the prompt goes
through the VNNI kernel (kernels/vnni.py), a second table splits its matmuls into activation
quantization, weight unpacking, the GEMM and the stores (CPU ms, from vnni.PROFILE).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from batched_step import Switch  # noqa: E402
from decode_step import instrument  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    args = ap.parse_args()

    from llamacpy.engine.context import Context
    from llamacpy.format import open_gguf
    from llamacpy.hub import resolve_model
    from llamacpy.kernels import set_threads, vnni
    from llamacpy.memory.batch import Batch
    from llamacpy.models import load_model

    set_threads(args.threads)
    model = load_model(open_gguf(resolve_model(args.model)))
    ctx = Context(model, n_ctx=args.n_prompt + 8)
    rng = np.random.default_rng(0)
    tokens = [int(t) for t in rng.integers(100, model.args.n_vocab - 100, args.n_prompt)]
    ctx.decode(Batch.from_tokens(tokens))  # compile / load every kernel first
    switch = Switch()
    instrument(model, switch, ctx.cache)  # once: it wraps module-level functions
    parts: dict[str, list[float]] = defaultdict(list)
    kernel_parts: dict[str, list[float]] = defaultdict(list)
    steps = []
    for _ in range(args.rounds):
        ctx.cache.clear()
        switch.current = defaultdict(float)
        vnni.PROFILE = {}
        t0 = time.perf_counter()
        ctx.decode(Batch.from_tokens(tokens))
        steps.append(time.perf_counter() - t0)
        for label, s in switch.current.items():
            parts[label].append(s)
        for label, s in vnni.PROFILE.items():
            kernel_parts[label].append(s)
    vnni.PROFILE = None
    step = statistics.median(steps)
    print(f"{args.model}, {args.threads} thread(s), {args.n_prompt} tokens: "
          f"{step * 1e3:.1f} ms, {args.n_prompt / step:.1f} tokens/s")
    print("| part | ms | share |\n|---|---:|---:|")
    named = 0.0
    for label in sorted(parts, key=lambda k: -statistics.median(parts[k])):
        ms = statistics.median(parts[label]) * 1e3
        named += ms
        print(f"| {label} | {ms:.1f} | {100 * ms / (step * 1e3):.0f}% |")
    glue = step * 1e3 - named
    print(f"| glue | {glue:.1f} | {100 * glue / (step * 1e3):.0f}% |")
    if kernel_parts:
        print("\n| VNNI matmuls, by part | CPU ms | share of the batch |\n|---|---:|---:|")
        for label in sorted(kernel_parts, key=lambda k: -statistics.median(kernel_parts[k])):
            ms = statistics.median(kernel_parts[label]) * 1e3
            print(f"| {label} | {ms:.1f} | {100 * ms / (step * 1e3):.0f}% |")


if __name__ == "__main__":
    main()
