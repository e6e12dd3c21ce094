"""A prompt's speed and peak RSS at each size of the integer GEMM's unpacked weight panels
(kernels/vnni.py PANEL_BYTES, per thread), one process per run, settings alternating.

    python bench/prompt_peak.py MODEL [--panel-kib 4096 1024] [-r 2] [--prompts 4] [-t 1]

Each process loads MODEL (at -t threads), then runs `--prompts` pp512s of random tokens, each
followed by a one-token decode. Prints pp512 t/s (median of all but the first prompt, which loads
the kernels), the resident set after the last prompt and the process's peak: from the second
prompt on, the peak is the resident set plus what a prompt holds while it runs.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def worker(model: str, panel_kib: int, prompts: int, threads: int) -> dict:
    import llamacpy.kernels.vnni as vnni

    vnni.PANEL_BYTES = panel_kib << 10
    from llamacpy import Llama

    import numpy as np

    llm = Llama(model, n_ctx=1024, n_batch=512, n_ubatch=512, n_threads=threads,
                verbose=False)
    rng = np.random.default_rng(0)
    speeds = []
    for _ in range(prompts):
        tokens = [int(t) for t in rng.integers(100, llm.n_vocab() - 100, 512)]
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(tokens)
        speeds.append(512 / (time.perf_counter() - t0))
        llm.reset()
        llm.eval([5])
    return {"pp512": statistics.median(speeds[1:]), "rest": rss_mib(),
            "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--panel-kib", type=int, nargs="+", default=[4096, 1024])
    ap.add_argument("-r", "--rounds", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is not None:
        print(json.dumps(worker(args.model, args.worker, args.prompts, args.threads)))
        return
    runs: dict[int, list[dict]] = {kib: [] for kib in args.panel_kib}
    for _ in range(args.rounds):
        for kib in args.panel_kib:
            out = subprocess.run([sys.executable, __file__, args.model, "--worker", str(kib),
                                  "--prompts", str(args.prompts), "-t", str(args.threads)],
                                 capture_output=True, text=True, check=True)
            runs[kib].append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"{Path(args.model).name}, {args.threads} thread(s), {args.rounds} processes a setting")
    print("| panel | pp512 t/s | rest MiB | peak MiB |\n|---:|---|---|---|")
    for kib, rs in runs.items():
        cell = lambda key, fmt: " / ".join(format(r[key], fmt) for r in rs)  # noqa: E731
        print(f"| {kib} KiB | {cell('pp512', '.1f')} | {cell('rest', '.1f')} | "
              f"{cell('peak', '.1f')} |")


if __name__ == "__main__":
    main()
