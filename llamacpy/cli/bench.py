"""llama-bench: prompt processing (pp) and generation (tg) speed, as llama.cpp's tools/llama-bench.

    llama-bench -m MODEL [-p 512] [-n 128] [-pg 512,128] [-t N] [-r 5] [-b 2048] [-ub 512]
                [-ctk f16,q8_0] [-ctv f16,q8_0] [-fa on|off|auto] [-o md|csv|json|jsonl]

Each test runs once to warm up (JIT, caches), then -r timed repetitions on a fresh context;
t/s is reported as mean ± sd, like llama.cpp. -ctk, -ctv and -fa take comma lists: every
combination runs, and the table shows type_k, type_v and fa when they differ from the default.
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from ..memory.batch import Batch
from ..engine.context import Context
from ..format import open_gguf
from ..hub import resolve_model
from ..kernels import set_threads
from ..memory.kv_cache import resolve_flash_attn
from ..models import load_model
from .args import flash_attn_value
from .common import mib

TOOL = "llama-bench"
FTYPE_NAMES = {0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
               10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
               14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium",
               18: "Q6_K", 25: "IQ4_NL - 4.5 bpw", 30: "IQ4_XS - 4.25 bpw", 32: "BF16"}


@dataclass
class Test:
    n_prompt: int
    n_gen: int

    @property
    def name(self) -> str:
        if self.n_prompt and self.n_gen:
            return f"pp{self.n_prompt}+tg{self.n_gen}"
        return f"pp{self.n_prompt}" if self.n_prompt else f"tg{self.n_gen}"


@dataclass
class Result:
    test: Test
    samples_ns: list[int] = field(default_factory=list)
    info: dict = field(default_factory=dict)  # type_k, type_v, flash_attn of this run

    @property
    def samples_ts(self) -> list[float]:
        n = self.test.n_prompt + self.test.n_gen
        return [n * 1e9 / ns for ns in self.samples_ns]


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=TOOL, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--model", required=True)
    p.add_argument("-p", "--n-prompt", default="512")
    p.add_argument("-n", "--n-gen", default="128")
    p.add_argument("-pg", default=None, help="pp,tg: prompt then generation in one test")
    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("-r", "--repetitions", type=int, default=5)
    p.add_argument("-b", "--batch-size", type=int, default=2048)
    p.add_argument("-ub", "--ubatch-size", type=int, default=512)
    p.add_argument("-ctk", "--cache-type-k", default="f16", help="KV cache type(s) for K")
    p.add_argument("-ctv", "--cache-type-v", default="f16", help="KV cache type(s) for V")
    p.add_argument("-fa", "--flash-attn", default="auto", help="on, off or auto (a list too)")
    p.add_argument("-o", "--output", choices=["md", "csv", "json", "jsonl"], default="md")
    p.add_argument("-ngl", "--n-gpu-layers", default="0")
    return p.parse_args(argv)


def tests_from(args) -> list[Test]:
    tests = [Test(int(n), 0) for n in str(args.n_prompt).split(",") if int(n) > 0]
    tests += [Test(0, int(n)) for n in str(args.n_gen).split(",") if int(n) > 0]
    if args.pg:
        pp, tg = (int(v) for v in args.pg.split(","))
        tests.append(Test(pp, tg))
    return tests


# -fa as llama-bench records it (llama_flash_attn_type)
FLASH_ATTN_IDS = {"auto": -1, "off": 0, "on": 1}


def kv_instances(args) -> list[tuple[str, str, str]]:
    """(type_k, type_v, flash_attn) for every combination of the -ctk, -ctv and -fa lists."""
    fa = []
    for value in args.flash_attn.split(","):
        try:
            fa.append(flash_attn_value(value))
        except argparse.ArgumentTypeError as e:
            raise ValueError(str(e)) from None
    return list(itertools.product(args.cache_type_k.split(","), args.cache_type_v.split(","), fa))


def run_once(model, test: Test, n_ubatch: int, rng: np.random.Generator,
             kv: tuple[str, str] = ("f16", "f16")) -> int:
    """One timed run on a fresh context: ns for the prompt batch and/or token-by-token decode."""
    ctx = Context(model, n_ctx=max(test.n_prompt + test.n_gen + 1, 16), n_ubatch=n_ubatch,
                  type_k=kv[0], type_v=kv[1])
    n_vocab = model.args.n_vocab
    t0 = time.perf_counter_ns()
    pos = 0
    if test.n_prompt:
        ctx.decode(Batch.from_tokens(rng.integers(0, n_vocab, test.n_prompt)))
        pos = test.n_prompt
    token = int(rng.integers(0, n_vocab))
    for i in range(test.n_gen):
        logits = ctx.decode(Batch.from_tokens([token], pos0=pos + i))
        token = int(logits[-1].argmax())
    return time.perf_counter_ns() - t0


def describe(gguf) -> dict:
    arch = gguf.get("general.architecture", "?")
    label = gguf.get("general.size_label") or ""
    ftype = FTYPE_NAMES.get(int(gguf.get("general.file_type", -1)), "?")
    n_params = sum(t.n_elements for t in gguf.tensors.values())
    size = sum(t.nbytes for t in gguf.tensors.values())
    return {"model_type": f"{arch} {label} {ftype}".replace("  ", " "), "model_size": size,
            "model_n_params": n_params}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.n_gpu_layers not in ("0", "99", "auto"):
        print(f"{TOOL}: warning: no GPU available; -ngl ignored", file=sys.stderr)
    threads = args.threads or 2
    set_threads(threads)
    path = resolve_model(args.model)
    gguf = open_gguf(path)
    model = load_model(gguf)
    info = describe(gguf) | {"model_filename": str(path), "n_threads": threads,
                             "n_batch": args.batch_size, "n_ubatch": args.ubatch_size,
                             "cpu_info": platform.processor() or platform.machine(),
                             "backends": "CPU"}
    rng = np.random.default_rng(0)
    results = []
    try:
        instances = kv_instances(args)
    except ValueError as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    for type_k, type_v, fa in instances:
        try:  # llama_init_from_model's checks (the types, -fa with a quantized V)
            _, note = resolve_flash_attn(fa, type_k, type_v)
            Context(model, n_ctx=16, type_k=type_k, type_v=type_v)
        except ValueError as e:
            print(f"llama_init_from_model: {e}\nmain: error: failed to create context with "
                  f"model '{path}'", file=sys.stderr)
            return 1
        if note:
            print(f"llama_init_from_model: {note}", file=sys.stderr)
        kv = {"type_k": type_k, "type_v": type_v, "flash_attn": FLASH_ATTN_IDS[fa]}
        for test in tests_from(args):
            run_once(model, test, args.ubatch_size, rng, (type_k, type_v))  # warm-up, excluded
            r = Result(test, info=kv)
            for _ in range(args.repetitions):
                r.samples_ns.append(run_once(model, test, args.ubatch_size, rng,
                                             (type_k, type_v)))
            results.append(r)
            if args.output == "jsonl":
                print(json.dumps(record(info, r)), flush=True)
    print(render(args.output, info, results, shown_kv_columns(args)), end="")
    return 0


def shown_kv_columns(args) -> list[str]:
    """type_k, type_v and flash_attn are table columns when set to other than the default
    (llama-bench's markdown printer)."""
    given = {"type_k": args.cache_type_k, "type_v": args.cache_type_v,
             "flash_attn": args.flash_attn}
    default = {"type_k": "f16", "type_v": "f16", "flash_attn": "auto"}
    return [k for k in given if given[k] != default[k]]


def record(info: dict, r: Result) -> dict:
    ts = r.samples_ts
    return {**info, **r.info, "n_prompt": r.test.n_prompt, "n_gen": r.test.n_gen,
            "avg_ns": int(statistics.mean(r.samples_ns)),
            "stddev_ns": int(statistics.pstdev(r.samples_ns) if len(ts) < 2 else
                             statistics.stdev(r.samples_ns)),
            "avg_ts": statistics.mean(ts),
            "stddev_ts": statistics.stdev(ts) if len(ts) > 1 else 0.0,
            "samples_ns": r.samples_ns, "samples_ts": ts}


# markdown columns between threads and test: (field, header, width), as llama-bench's
MD_KV_COLUMNS = {"type_k": ("type_k", 6), "type_v": ("type_v", 6), "flash_attn": ("fa", 3)}


def render(fmt: str, info: dict, results: list[Result], kv_columns: list[str] = ()) -> str:
    rows = [record(info, r) for r in results]
    if fmt == "jsonl":
        return ""
    if fmt == "json":
        return json.dumps(rows, indent=2) + "\n"
    if fmt == "csv":
        out = io.StringIO()
        w = csv.DictWriter(out, fieldnames=[k for k in rows[0] if not k.startswith("samples")],
                           extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
        return out.getvalue()
    cols = [MD_KV_COLUMNS[c] for c in kv_columns]
    head = "| model                          |       size |     params | backend    | threads |" \
           + "".join(f" {name:>{w}} |" for name, w in cols) + \
           "            test |                  t/s |\n" \
           "| ------------------------------ | ---------: | ---------: | ---------- | ------: |" \
           + "".join(f" {'-' * (w - 1)}: |" for _, w in cols) + \
           " --------------: | -------------------: |\n"
    lines = []
    for r, row in zip(results, rows):
        size = f"{mib(row['model_size']):.2f} MiB"
        params = f"{row['model_n_params'] / 1e6:.2f} M"
        ts = f"{row['avg_ts']:.2f} ± {row['stddev_ts']:.2f}"
        kv = "".join(f" {row[c]!s:>{w}} |" for c, (_, w) in zip(kv_columns, cols))
        lines.append(f"| {row['model_type']:<30} | {size:>10} | {params:>10} | CPU        | "
                     f"{row['n_threads']:>7} |{kv} {r.test.name:>15} | {ts:>20} |")
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
