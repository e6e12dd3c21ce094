"""Kernel benchmark: matvec (decode) and matmul (prompt) per weight type, JIT warm-up excluded.

    python bench/bench_kernels.py [--threads 1] [--types Q4_K,Q6_K] [--repeat 20] [--doc PATH]

matvec runs on a big 2-D tensor of each type from the catalogue models (an ffn weight where there
is one) and on a synthetic 2048 x 4096 matrix for types the models lack. "hot" repeats the same
tensor (it sits in L2/L3); "stream" cycles through that tensor's siblings in every layer (or row
chunks of an output matrix), the decode access pattern: weights come from DRAM once the set
outgrows the L3. Gw/s counts weights,
GB/s the weight bytes read. matmul reports GFLOP/s (2 * tokens * rows * n per call).
--doc rewrites the "## Kernels" section of that markdown file with the table and the command.

    python bench/bench_kernels.py --ab-repack gemma3-270m [--tokens 1,4] [--repeat 15]

times, interleaved in one process (alternating which goes first), one decode pass over every
Q5_0 / IQ4_NL matrix of a model's layers with its direct kernel against the same pass over their
Q8_0 repacks (Linear's repack_q8_0), per tensor name and for all of them in layer order.
"""

from __future__ import annotations

import argparse
import platform
import re
import sys
import time
from pathlib import Path

import numpy as np

from llamacpy.format.constants import GGML_QUANT_SIZES, GGMLType
from llamacpy.kernels import matmul, matvec, set_threads
from llamacpy.kernels.dequant import row_length
from llamacpy.kernels.repack import repack_as_q8_0

ALL_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K",
             "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"]
FP16_FIELDS = {"Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
               "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
               "IQ4_NL": [0], "IQ4_XS": [0]}
SYNTH_SHAPE = (2048, 4096)  # rows, n: the size of a real ffn matrix of a ~1B model
MAX_WEIGHTS = 1 << 24  # bigger real tensors are measured in row chunks of this size


def median_time(fn, repeat: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def synthetic(name: str, rows: int, n: int) -> np.ndarray:
    """Random blocks with small positive fp16 scales (speed does not depend on the values)."""
    rng = np.random.default_rng(0)
    if name in ("F32", "F16", "BF16"):
        x = rng.standard_normal((rows, n)).astype(np.float32)
        if name == "BF16":
            return (x.view(np.uint32) >> 16).astype("<u2").view(np.uint8)
        return x.astype("<f4" if name == "F32" else "<f2").view(np.uint8)
    block, size = GGML_QUANT_SIZES[GGMLType[name]]
    b = rng.integers(0, 256, (rows, n // block, size), dtype=np.uint8)
    for f in FP16_FIELDS[name]:
        b[:, :, f : f + 2] = np.full((rows, n // block, 1), 0.01, "<f2").view(np.uint8)
    return b.reshape(rows, -1)


def real_tensors(name: str) -> tuple[str, list[np.ndarray]] | None:
    """(label, [block views]) for the biggest 2-D tensor of this type (an ffn weight if any):
    that tensor and its same-shaped siblings in the other layers, or, for a tensor bigger than
    MAX_WEIGHTS (an output / embedding matrix), consecutive row chunks of it. None when no
    catalogue model has the type."""
    from llamacpy.format import open_gguf
    from llamacpy.hub import CATALOG, pull

    best = None
    for model in CATALOG:
        f = open_gguf(pull(model, quiet=True))
        for t in f.tensors.values():
            if t.ggml_type.name == name and len(t.ne) == 2:
                key = ("ffn" in t.name, t.n_elements)
                if best is None or key > best[0]:
                    best = (key, model, f, t)
    if best is None:
        return None
    _, model, f, t = best
    if t.n_elements > MAX_WEIGHTS:
        blocks, chunk = t.blocks(), MAX_WEIGHTS // t.ne[0]
        group = [blocks[r : r + chunk] for r in range(0, t.ne[1] - chunk + 1, chunk)]
        return f"{model}:{t.name} (row chunks)", group
    if not t.name.startswith("blk."):
        return f"{model}:{t.name}", [t.blocks()]
    suffix = t.name.split(".", 2)[2]
    group = [s.blocks() for s in f.tensors.values()
             if s.name.endswith("." + suffix) and s.ggml_type == t.ggml_type and s.ne == t.ne]
    return f"{model}:blk.N.{suffix}", group


def bench_type(name: str, repeat: int, tokens: list[int], use_real: bool) -> list[dict]:
    found = real_tensors(name) if use_real else None
    if found is None:
        label, group = "synthetic", [synthetic(name, *SYNTH_SHAPE)]
    else:
        label, group = found
    rows = [run_one(name, label, group, repeat, tokens)]
    if name in ("Q5_0", "IQ4_NL"):  # the exact Q8_0 repack Linear offers
        rows.append(run_one("Q8_0", f"{name} repacked as Q8_0",
                            [repack_as_q8_0(w, GGMLType[name]) for w in group], repeat, tokens))
    return rows


def run_one(name: str, label: str, group: list[np.ndarray], repeat: int, tokens: list[int]):
    t = GGMLType[name]
    w = group[0]
    rows, n = w.shape[0], row_length(w.shape[1], t)
    x = np.random.default_rng(1).standard_normal(n).astype(np.float32)
    y = np.empty(rows, np.float32)
    hot = median_time(lambda: matvec(w, t, x, y), repeat)
    cycle = iter(range(1 << 62))
    stream = median_time(lambda: matvec(group[next(cycle) % len(group)], t, x, y),
                         max(repeat, len(group))) if len(group) > 1 else None
    res = dict(type=name, tensor=label, shape=f"{rows}x{n}", mb=w.nbytes / 1e6,
               gws=rows * n / hot / 1e9, gbs=w.nbytes / hot / 1e9,
               stream_gbs=None if stream is None else w.nbytes / stream / 1e9,
               n_stream=len(group))
    for n_tok in tokens:
        X = np.random.default_rng(2).standard_normal((n_tok, n)).astype(np.float32)
        out = np.empty((n_tok, rows), np.float32)
        sec = median_time(lambda: matmul(w, t, X, out), max(3, repeat // 4), warmup=1)
        res[f"mm{n_tok}"] = 2 * n_tok * rows * n / sec / 1e9
    return res


def ab_repack(model: str, tokens: list[int], rounds: int) -> str:
    """Markdown table: ms per pass (median of `rounds`), direct kernel vs Q8_0 repack."""
    from llamacpy.format import open_gguf
    from llamacpy.hub import pull
    from llamacpy.kernels.dequant import call_kernel
    from llamacpy.kernels.matmul import MULTI_KERNELS, row_chunks
    from llamacpy.kernels.matvec import MATVEC_KERNELS

    f = open_gguf(pull(model, quiet=True))
    mats = [t for t in f.tensors.values() if t.name.startswith("blk.") and len(t.ne) == 2
            and t.ggml_type.name in ("Q5_0", "IQ4_NL")]
    groups = {"all, layer order": mats}
    for t in mats:
        groups.setdefault("blk.N." + t.name.split(".", 2)[2], []).append(t)
    packed = {t.name: repack_as_q8_0(t.blocks(), t.ggml_type) for t in mats}
    lines = ["| tensors | tokens | MB direct | direct ms | Q8_0 repack ms | direct / repack |",
             "|---|---|---|---|---|---|"]
    for n_tok in tokens:
        for label, group in groups.items():
            calls = {"direct": [], "repack": []}
            for t in group:
                rows, n = int(t.ne[1]), int(t.ne[0])
                X = np.random.default_rng(2).standard_normal((n_tok, n)).astype(np.float32)
                Y = np.empty((n_tok, rows), np.float32)
                for kind, w, typ in (("direct", t.blocks(), t.ggml_type),
                                     ("repack", packed[t.name], GGMLType.Q8_0)):
                    if n_tok == 1:
                        calls[kind].append((MATVEC_KERNELS[typ], w, X[0], Y[0]))
                    else:
                        calls[kind].append((MULTI_KERNELS[typ], w, X, Y, row_chunks(rows)))
            times = {"direct": [], "repack": []}
            for r in range(rounds + 2):
                for kind in (("direct", "repack") if r % 2 else ("repack", "direct")):
                    t0 = time.perf_counter()
                    for c in calls[kind]:
                        call_kernel(*c)
                    if r >= 2:  # two warm-up rounds (and JIT)
                        times[kind].append(time.perf_counter() - t0)
            a, b = (float(np.median(times[k])) * 1e3 for k in ("direct", "repack"))
            mb = sum(t.blocks().nbytes for t in group) / 1e6
            lines.append(f"| {label} ({len(group)}) | {n_tok} | {mb:.1f} | {a:.3f} | {b:.3f} | "
                         f"{a / b:.2f} |")
    return "\n".join(lines)


def table(results: list[dict], tokens: list[int]) -> str:
    head = ("| type | tensor | rows x n | MB | matvec Gw/s | matvec GB/s | stream GB/s | "
            + " | ".join(f"matmul {k} tok GFLOP/s" for k in tokens) + " |")
    lines = [head, "|" + "---|" * (7 + len(tokens))]
    for r in results:
        stream = "-" if r["stream_gbs"] is None else f"{r['stream_gbs']:.1f} ({r['n_stream']})"
        mm = " | ".join(f"{r[f'mm{k}']:.1f}" for k in tokens)
        lines.append(f"| {r['type']} | {r['tensor']} | {r['shape']} | {r['mb']:.1f} | "
                     f"{r['gws']:.2f} | {r['gbs']:.2f} | {stream} | {mm} |")
    return "\n".join(lines)


def write_doc(path: Path, text: str) -> None:
    """Replace (or append) the '## Kernels' section of a markdown file."""
    old = path.read_text() if path.exists() else "# Performance\n"
    section = f"## Kernels\n\n{text}\n\n"
    pattern = re.compile(r"^## Kernels\n.*?(?=^## |\Z)", re.S | re.M)
    new = pattern.sub(section, old) if pattern.search(old) else old.rstrip("\n") + "\n\n" + section
    new = new.rstrip("\n") + "\n"
    path.write_text(new)


def cpu_name() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
        return re.search(r"model name\s*:\s*(.*)", info).group(1).strip()
    except (OSError, AttributeError):
        return platform.processor() or platform.machine()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", "-t", type=int, default=1)
    p.add_argument("--types", default=",".join(ALL_TYPES), help="comma-separated ggml types")
    p.add_argument("--repeat", type=int, default=20, help="timed runs per measurement (median)")
    p.add_argument("--tokens", default="32,512", help="matmul batch sizes")
    p.add_argument("--synthetic", action="store_true", help="skip the catalogue models")
    p.add_argument("--doc", type=Path, help="markdown file whose '## Kernels' section to rewrite")
    p.add_argument("--ab-repack", metavar="MODEL", help="direct Q5_0/IQ4_NL vs Q8_0 repack")
    args = p.parse_args(argv)
    set_threads(args.threads)
    tokens = [int(k) for k in args.tokens.split(",") if k]
    if args.ab_repack:
        print(ab_repack(args.ab_repack, tokens, args.repeat))
        return
    results = []
    for name in args.types.upper().split(","):
        results += bench_type(name, args.repeat, tokens, not args.synthetic)
        print(f"{name} done", file=sys.stderr, flush=True)
    md = table(results, tokens)
    print(md)
    if args.doc:
        cmd = " ".join(["python bench/bench_kernels.py", *(sys.argv[1:] if argv is None else argv)])
        cpu = cpu_name()
        write_doc(args.doc, f"Command: `{cmd.strip()}` ({args.threads} thread(s), {cpu}, "
                            f"median of {args.repeat} runs after warm-up)\n\n{md}")


if __name__ == "__main__":
    main()
