"""llama.cpp and llamacpy on the same model in one run: pp512 and tg128, interleaved rounds.

    python bench/compare_llamacpp.py MODEL [-t THREADS] [-r ROUNDS] [-p 512] [-n 128]
        [--ab VAR=VALUE]

Each engine runs in its own worker process (so peak RSS is its own), loads the model once, and
the driver alternates their rounds: llama.cpp pp, llamacpy pp, llama.cpp tg, llamacpy tg, ...
Both sides go through the same high-level call (`Llama.eval`): llama.cpp through
llama-cpp-python 0.3.36, llamacpy through its compatible class. Prints medians, the ratio
llamacpy / llama.cpp (higher is better), and each process's peak RSS. `--ab VAR=VALUE` adds a
third worker, llamacpy with that environment variable set (e.g. LLAMACPY_VNNI=0), in the same
interleaved rounds.

Where the machine sets OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (these VMs do, putting numpy's
OpenBLAS on its AVX2 kernels), unset both in the command to measure what a user's machine runs:
`env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/compare_llamacpp.py ...`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(engine: str, model: str, threads: int, n_ctx: int) -> None:
    """Serve timing requests on stdin: 'pp N' / 'tg N' -> seconds; 'rss' -> peak KiB."""
    import resource

    if engine == "llama.cpp":
        sys.path.insert(0, str(ROOT))
        from tests.reference.llamacpp import load_llama

        llm = load_llama(model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                         n_threads_batch=threads)
    else:
        from llamacpy import Llama

        llm = Llama(model, n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
                    verbose=False)
    import numpy as np  # after llamacpy, which sets OpenBLAS's thread timeout before it loads

    rng = np.random.default_rng(0)
    n_vocab = llm.n_vocab()
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "rss":
            print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, flush=True)
            continue
        n = int(arg[0])
        tokens = [int(t) for t in rng.integers(100, n_vocab - 100, n)]
        llm.reset()
        t0 = time.perf_counter()
        if cmd == "pp":
            llm.eval(tokens)
        else:
            for t in tokens:
                llm.eval([t])
        print(time.perf_counter() - t0, flush=True)


def start(engine: str, args) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))
    if engine not in ("llama.cpp", "llamacpy"):  # "llamacpy VAR=VALUE"
        var, value = engine.split(" ", 1)[1].split("=", 1)
        env[var] = value
    p = subprocess.Popen([sys.executable, __file__, args.model, "--worker",
                          engine.split(" ")[0], args.model,
                          "-t", str(args.threads), "-c", str(args.ctx)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    for line in p.stdout:  # skip whatever the library logs to stdout while loading
        if line.strip() == "ready":
            return p
    raise RuntimeError(f"{engine} worker failed to start")


def ask(p: subprocess.Popen, line: str) -> float:
    p.stdin.write(line + "\n")
    p.stdin.flush()
    while True:
        reply = p.stdout.readline()
        try:
            return float(reply)
        except ValueError:
            if not reply:
                raise RuntimeError("worker died") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=512)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-c", "--ctx", type=int, default=1024)
    ap.add_argument("--worker", nargs=2, metavar=("ENGINE", "MODEL"))
    ap.add_argument("--json", action="store_true", help="print one JSON line of results")
    ap.add_argument("--ab", metavar="VAR=VALUE",
                    help="also run llamacpy with this environment variable set")
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker[0], args.worker[1], args.threads, args.ctx)
    if not Path(args.model).exists():
        from llamacpy.hub import resolve_model

        args.model = str(resolve_model(args.model))
    names = ["llama.cpp", "llamacpy"] + ([f"llamacpy {args.ab}"] if args.ab else [])
    engines = {name: start(name, args) for name in names}
    times = {(e, k): [] for e in engines for k in ("pp", "tg")}
    for name, p in engines.items():  # warm-up round, excluded
        ask(p, f"pp {args.n_prompt}")
        ask(p, f"tg 8")
    for _ in range(args.rounds):
        for kind, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
            for name, p in engines.items():
                times[(name, kind)].append(ask(p, f"{kind} {n}"))
    report(args, engines, times)


def report(args, engines, times) -> None:
    rss = {name: ask(p, "rss") / 1024 for name, p in engines.items()}
    rate = {key: (args.n_prompt if key[1] == "pp" else args.n_gen) / statistics.median(v)
            for key, v in times.items()}
    print(f"model: {Path(args.model).name}  threads: {args.threads}  rounds: {args.rounds}")
    ours = [name for name in engines if name != "llama.cpp"]
    print("| test | llama.cpp t/s | " + " | ".join(f"{o} t/s | ratio" for o in ours) + " |")
    print("|---|---:|" + "---:|---:|" * len(ours))
    out = {"model": Path(args.model).name, "threads": args.threads, "rss_mib": rss}
    for kind, n in (("pp", args.n_prompt), ("tg", args.n_gen)):
        a = rate[("llama.cpp", kind)]
        cells = [f"{rate[(o, kind)]:.2f} | {rate[(o, kind)] / a:.2f}x" for o in ours]
        print(f"| {kind}{n} | {a:.2f} | " + " | ".join(cells) + " |")
        b = rate[("llamacpy", kind)]
        out[f"{kind}{n}"] = {"llama.cpp": a, "llamacpy": b, "ratio": b / a}
        if args.ab:
            out[f"{kind}{n}"][args.ab] = rate[(ours[1], kind)]
    print("peak RSS: " + ", ".join(f"{name} {v:.0f} MiB ({v / rss['llama.cpp']:.2f}x)"
                                   for name, v in rss.items()))
    if args.json:
        print(json.dumps(out))
    for p in engines.values():
        p.stdin.close()
        p.wait()


if __name__ == "__main__":
    main()
