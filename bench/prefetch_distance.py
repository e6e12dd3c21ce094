"""The decode kernels' software-prefetch distance on this CPU: every matrix of a model multiplied
back to back by the one-token kernels (bench/matvec_stream.py), with kernels/matvec.py's and
kernels/matmul.py's PREFETCH set to each distance in turn, rounds interleaved (issue 17).

    NUMBA_NUM_THREADS=1 python bench/prefetch_distance.py MODEL.gguf [MODEL ...] \
        [--distances 2048,4096,8192] [-r 5]

A distance may also name one constant of matvec.py, e.g. PREFETCH_BYTE_PAIRS=4096 (the K-quant
byte-pair kernels' own distance), leaving the others as they are. Each distance runs from its own
copy of the package (and so its own numba cache) in a temporary folder, compiled once before the
timed rounds. Prints ms per pass of all matrices and GB/s of weights, medians over the rounds,
for each model and distance.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STREAM = ROOT / "bench" / "matvec_stream.py"
KERNEL_FILES = ("matvec.py", "matmul.py")


def package_copy(base: Path, distance: str) -> Path:
    """A copy of llamacpy under base/<distance> whose kernels prefetch `distance` bytes ahead
    (PREFETCH in matvec.py and matmul.py), or with one NAME=BYTES constant of matvec.py set."""
    dest = base / distance.replace("=", "_")
    shutil.copytree(ROOT / "llamacpy", dest / "llamacpy",
                    ignore=shutil.ignore_patterns("__pycache__"))
    name, _, value = distance.rpartition("=")
    for file in ("matvec.py",) if name else KERNEL_FILES:
        path = dest / "llamacpy" / "kernels" / file
        text, n = re.subn(rf"^{name or 'PREFETCH'} = .*$", f"{name or 'PREFETCH'} = {value}",
                          path.read_text(), count=1, flags=re.M)
        if n != 1:
            sys.exit(f"prefetch_distance: no {name or 'PREFETCH'} line in {path}")
        path.write_text(text)
    return dest


def stream_ms(copy: Path, model: str) -> tuple[float, float]:
    """(ms, GB/s) of matvec_stream's last step_raw line, run from the package copy."""
    env = dict(os.environ, PYTHONPATH=str(copy))
    out = subprocess.run([sys.executable, str(STREAM), model, "--all"], env=env, cwd=copy,
                         capture_output=True, text=True, check=True).stdout
    ms, gbs = re.findall(r"step_raw ([\d.]+) ms\s+([\d.]+) GB/s", out)[-1]
    return float(ms), float(gbs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--distances", default="2048,4096,8192")
    ap.add_argument("-r", "--rounds", type=int, default=5)
    args = ap.parse_args()
    distances = args.distances.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        copies = {d: package_copy(Path(tmp), d) for d in distances}
        for model in args.models:
            for d in distances:  # compile each copy's kernels before the timed rounds
                stream_ms(copies[d], model)
            runs: dict = {d: [] for d in distances}
            for _ in range(args.rounds):
                for d in distances:
                    runs[d].append(stream_ms(copies[d], model))
            print(f"{Path(model).name}:", flush=True)
            for d in distances:
                ms = statistics.median(r[0] for r in runs[d])
                gbs = statistics.median(r[1] for r in runs[d])
                print(f"  {d:>26}: {ms:8.2f} ms, {gbs:5.1f} GB/s", flush=True)


if __name__ == "__main__":
    main()
