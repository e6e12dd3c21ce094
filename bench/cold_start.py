"""Cold start: llama-server's start to /health 200, and the first request's time to first token
against warm ones, on an empty numba cache (a fresh machine) or a filled one.

    .venv/bin/python bench/cold_start.py serve [-m MODEL ...] [--modes fresh,aot,warm,no-warmup]
                                               [--repeat 3] [--requests 5] [-t THREADS]
    .venv/bin/python bench/cold_start.py compile -m MODEL [-np 2] [-j 2]   # seconds per kernel
    .venv/bin/python bench/cold_start.py asm OUT.s [-m MODEL ...]    # every compiled kernel's asm

MODEL is a path or a catalogue name; `all-types` is `llamacpy warmup`'s tiny model of every type.

serve modes: `fresh`: an empty NUMBA_CACHE_DIR (numba's cache as on a fresh clone), the server
warms up (compiles) before /health says 200; `aot`: an empty cache filled by `llamacpy warmup
MODEL` first (timed), as scripts/setup.sh does; `warm`: the cache the previous mode left;
`no-warmup`: an empty cache and --no-warmup (the first request compiles). Each run starts the
server, polls /health every 20 ms, then sends `--requests` streaming chat requests, each a
different question of the same token count with cache_prompt false, and times the first
content token; the first request against the median of the others is the ratio reported.

`compile` warms a model up in this process with numba's compile timed per kernel (nested
compiles inside a kernel are part of its figure; with -j N, helper processes compile part of
them, engine/warmup.py). Empty caches for serve's modes are made here; for compile and asm set
NUMBA_CACHE_DIR to an empty directory yourself. `asm` writes the assembly of every kernel the
warm-ups compiled, symbol names normalised: run it with and without
LLAMACPY_NUMBA_PLAIN_INLINE=1 on empty caches and compare the files (kernels/fast_inline.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = Path(sys.executable).parent
QUESTIONS = ["What is the capital of France?", "What is the capital of Spain?",
             "What is the capital of Italy?", "What is the capital of Japan?",
             "What is the capital of Egypt?", "What is the capital of Kenya?",
             "What is the capital of Chile?", "What is the capital of Nepal?"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, t0: float, limit: float = 900) -> float:
    while time.perf_counter() - t0 < limit:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.02)
    raise TimeoutError("server not ready")


def ttft(url: str, question: str, max_tokens: int = 4) -> tuple[float, int]:
    """Seconds to the first streamed content token, and the prompt's token count."""
    body = {"messages": [{"role": "user", "content": question}], "stream": True,
            "max_tokens": max_tokens, "temperature": 0, "cache_prompt": False,
            "stream_options": {"include_usage": True}}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    t0 = time.perf_counter()
    first, n_prompt = None, -1
    with urllib.request.urlopen(req, timeout=900) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            delta = (chunk.get("choices") or [{}])[0].get("delta", {})
            if first is None and (delta.get("content") or delta.get("reasoning_content")):
                first = time.perf_counter() - t0
            if chunk.get("usage"):
                n_prompt = chunk["usage"]["prompt_tokens"]
    return (first if first is not None else time.perf_counter() - t0), n_prompt


def run_server(model: str, cache: str, warmup: bool, threads: int, n_requests: int) -> dict:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(VENV_BIN / "llama-server"), "-m", model, "--port", str(port), "-c", "2048"]
    if threads > 0:
        cmd += ["-t", str(threads)]
    if not warmup:
        cmd.append("--no-warmup")
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    log = tempfile.NamedTemporaryFile("w+", prefix="cold-start-", suffix=".log")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = wait_ready(url, proc, t0)
        times = [ttft(url, q) for q in QUESTIONS[:n_requests]]
    except Exception as e:
        detail = e.read().decode() if isinstance(e, urllib.error.HTTPError) else ""
        log.seek(0)
        raise RuntimeError(f"{e} {detail}\nserver log:\n{log.read()[-3000:]}") from e
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    first, rest = times[0][0], [t for t, _ in times[1:]]
    warm = statistics.median(rest) if rest else float("nan")
    return {"ready_s": ready, "first_ttft_s": first, "warm_ttft_s": warm,
            "ratio": first / warm if rest else float("nan"),
            "prompt_tokens": sorted({n for _, n in times})}


def aot(model: str, cache: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([str(VENV_BIN / "llamacpy"), "warmup", "-q", model], check=True,
                   env=dict(os.environ, NUMBA_CACHE_DIR=cache))
    return time.perf_counter() - t0


def cmd_serve(args) -> None:
    rows = []
    for model in args.model:
        for rep in range(args.repeat):
            cache = None
            for mode in args.modes.split(","):
                if mode != "warm" or cache is None:
                    if cache:
                        shutil.rmtree(cache, ignore_errors=True)
                    cache = tempfile.mkdtemp(prefix="numba-cache-")
                row = {"model": model, "mode": mode, "rep": rep}
                try:
                    if mode == "aot":
                        row["aot_s"] = aot(model, cache)
                    row |= run_server(model, cache, mode != "no-warmup", args.threads,
                                      args.requests)
                except Exception as e:  # noqa: BLE001 - reported, left out of the medians
                    print(f"{model} {mode} rep {rep} failed: {e}", file=sys.stderr, flush=True)
                    continue
                rows.append(row)
                print(json.dumps(row), flush=True)
            shutil.rmtree(cache, ignore_errors=True)
    print("\nmedians over repeats")
    print("| model | mode | llamacpy warmup s | start to /health 200 s | first TTFT s | "
          "warm TTFT s | first / warm |")
    print("|---|---|---|---|---|---|---|")
    for model in args.model:
        for mode in args.modes.split(","):
            sel = [r for r in rows if r["model"] == model and r["mode"] == mode]
            if not sel:
                continue
            med = lambda k: statistics.median(r[k] for r in sel)  # noqa: E731
            aot_s = f"{med('aot_s'):.1f}" if mode == "aot" else "-"
            print(f"| {model} | {mode} | {aot_s} | {med('ready_s'):.1f} | "
                  f"{med('first_ttft_s'):.3f} | {med('warm_ttft_s'):.3f} | "
                  f"{med('ratio'):.2f} |")


def load_context(model: str, n_seq: int):
    from llamacpy.engine.context import Context
    from llamacpy.engine.warmup import Source
    from llamacpy.format import open_gguf
    from llamacpy.hub import resolve_model
    from llamacpy.models import load_model
    from llamacpy.tokenizer import Tokenizer

    if model == "all-types":  # llamacpy warmup's tiny model of every tensor type
        from llamacpy.cli.warmup import write_all_types_model

        path = write_all_types_model(Path(tempfile.mkdtemp()) / "all-types.gguf")
    else:
        path = resolve_model(model)
    g = open_gguf(path)
    m = load_model(g, repack=n_seq > 1)
    tok = Tokenizer.from_gguf(g) if "tokenizer.ggml.tokens" in g.metadata else None
    return Context(m, n_ctx=256 * n_seq, n_seq=n_seq), tok, Source(str(path), n_seq > 1)


def cmd_compile(args) -> None:
    from numba.core import dispatcher

    times, depth = [], [0]
    original = dispatcher.Dispatcher.compile

    def timed(self, sig):
        depth[0] += 1
        t = time.perf_counter()
        try:
            return original(self, sig)
        finally:
            depth[0] -= 1
            if depth[0] == 0:
                times.append((time.perf_counter() - t, self.py_func.__qualname__))

    dispatcher.Dispatcher.compile = timed
    from llamacpy.engine.warmup import warm_up

    t0 = time.perf_counter()
    for model in args.model:
        ctx, tok, source = load_context(model, args.parallel)
        for label, seconds in warm_up(ctx, tok, source=source, jobs=args.jobs):
            print(f"{model}: {label}: {seconds:.2f} s")
    total = time.perf_counter() - t0
    print(f"\nwarm-up {total:.1f} s, of which compiling (or loading) {len(times)} kernels "
          f"{sum(t for t, _ in times):.1f} s")
    for t, name in sorted(times, reverse=True):
        print(f"{t:7.2f} s  {name}")


def cmd_asm(args) -> None:
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import llamacpy.kernels
    from llamacpy.engine.warmup import warm_up

    for model in args.model:
        for n_seq in (1, 2):
            warm_up(*load_context(model, n_seq)[:2])
    out = []
    for info in pkgutil.iter_modules(llamacpy.kernels.__path__):
        mod = importlib.import_module(f"llamacpy.kernels.{info.name}")
        for name, obj in sorted(vars(mod).items()):
            if isinstance(obj, CPUDispatcher) and obj.__module__ == mod.__name__:
                for sig, asm in sorted(obj.inspect_asm().items(), key=lambda kv: str(kv[0])):
                    asm = re.sub(r"_ZN\S+|\.L\w+|__gufunc\S+|\b\d{6,}\b", "X", asm)
                    out.append(f"### {mod.__name__}.{name} {sig}\n{asm}")
    Path(args.out).write_text("\n".join(out))
    print(f"{len(out)} compiled kernels -> {args.out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("-m", "--model", action="append")
    s.add_argument("--modes", default="fresh,warm,aot,no-warmup")
    s.add_argument("--repeat", type=int, default=3)
    s.add_argument("--requests", type=int, default=5)
    s.add_argument("-t", "--threads", type=int, default=0)
    c = sub.add_parser("compile")
    c.add_argument("-m", "--model", action="append")
    c.add_argument("-np", "--parallel", type=int, default=1)
    c.add_argument("-j", "--jobs", type=int, default=1, help="compiling processes (default 1)")
    a = sub.add_parser("asm")
    a.add_argument("out")
    a.add_argument("-m", "--model", action="append")
    args = ap.parse_args()
    args.model = args.model or ["qwen2.5-coder-0.5b", "gemma3-270m"]
    {"serve": cmd_serve, "compile": cmd_compile, "asm": cmd_asm}[args.cmd](args)


if __name__ == "__main__":
    main()
