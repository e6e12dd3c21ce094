"""Load modes, repacking and memory (issue 12): peak RSS and first-token time per --load-mode,
against llama.cpp's use_mmap / use_mlock in the same run; the memory and speed of --repack; and
llama-server inside a memory cgroup of the model's file size + 300 MB.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/load_modes.py modes \\
        [-m MODEL ...] [--modes mmap,none,mlock,mmap+mlock,dio] [--kv f16,q8_0] [--rounds 3]
    ... bench/load_modes.py repack [-m MODEL ...] [--slots 2,4] [--rounds 3]
    ... bench/load_modes.py cgroup [-m MODEL] [--modes mmap,none] [--headroom-mb 300] [--kv q8_0]

`modes`: every (model, KV type, mode, engine) loads in a fresh process, which reads a 128-token
prompt and samples one token, then reports its load time, the time from the start of the load to
that first token, and from /proc/self/status its peak RSS (VmHWM), its private (RssAnon) and
file-backed (RssFile) resident memory and VmLck. Rounds are interleaved; the table gives medians.
The page cache holds the file (warm), as for a server that is restarted.

`repack`: --slots sequences decoding together (a Scheduler with that many slots, 64 new tokens
each) with and without --repack (Q5_0 / IQ4_NL weights re-encoded as Q8_0, Q6_K as bytes): tokens/s of the
batched decode and the private memory it took.

`cgroup`: llama-server with the wrapper's memory flags (-lm MODE --no-repack --no-warmup -c 3096,
and with --kv q8_0 its -ctk q8_0 -ctv q8_0 -fa on) started inside a memory cgroup limited to the file size + 300 MB
with no swap (cgroup v2 memory.max / memory.swap.max, or v1 memory.limit_in_bytes /
memory.memsw.limit_in_bytes: systemd-run needs systemd as PID 1), then three chat requests;
reports whether it served them or was killed, and the cgroup's peak usage.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPT = ("The history of the city begins with a small settlement on the river, where traders "
          "stopped on their way to the coast. ") * 12
LLAMA_CPP_MODES = {"mmap": (True, False), "none": (False, False), "mlock": (False, True),
                   "mmap+mlock": (True, True)}  # llama-cpp-python's use_mmap, use_mlock
GGML_TYPES = {"f16": 1, "q8_0": 8}
STATUS_KEYS = ("VmHWM", "RssAnon", "RssFile", "RssShmem", "VmLck")


def proc_status() -> dict:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in STATUS_KEYS:
            out[key] = int(value.split()[0]) / 1024  # MiB
    return out


# -- one load, in its own process ------------------------------------------------------------

def probe(engine: str, model: str, mode: str, kv: str, threads: int, n_prompt: int) -> dict:
    from llamacpy.hub import resolve_model

    path = str(resolve_model(model))
    t0 = time.perf_counter()
    if engine == "llamacpy":
        from llamacpy import Llama

        fa = {} if kv == "f16" else {"flash_attn": True}  # a quantized V needs it (-fa on)
        llm = Llama(path, n_ctx=4096, n_threads=threads, load_mode=mode, type_k=kv, type_v=kv,
                    verbose=False, **fa)
    else:
        from tests.reference.llamacpp import load_llama

        use_mmap, use_mlock = LLAMA_CPP_MODES[mode]
        kw = {} if kv == "f16" else {"type_k": GGML_TYPES[kv], "type_v": GGML_TYPES[kv],
                                     "flash_attn": True}
        llm = load_llama(Path(path), n_ctx=4096, n_threads=threads, n_threads_batch=threads,
                         use_mmap=use_mmap, use_mlock=use_mlock, **kw)
    t_load = time.perf_counter() - t0
    tokens = llm.tokenize(PROMPT.encode())[:n_prompt]
    out = llm(tokens, max_tokens=1, temperature=0.0)
    t_first = time.perf_counter() - t0
    assert out["usage"]["completion_tokens"] == 1
    return {"load_s": t_load, "first_token_s": t_first, **proc_status()}


def run_child(argv: list[str], timeout: float = 600) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    out = subprocess.run([sys.executable, __file__, *argv], capture_output=True, text=True,
                         timeout=timeout, env=env, cwd=ROOT)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else None


def modes_table(args) -> None:
    configs = [(m, kv, mode, engine) for m in args.models for kv in args.kv
               for mode in args.modes for engine in ("llamacpy", "llama.cpp")
               if not (engine == "llama.cpp" and mode not in LLAMA_CPP_MODES)]
    results: dict[tuple, list[dict]] = {c: [] for c in configs}
    for c in configs[:: max(1, len(args.modes) * 2)]:  # compile / page in once, not timed
        run_child(["probe", "llamacpy", c[0], "mmap", c[1], str(args.threads), "128"])
    for r in range(args.rounds):
        for c in configs:
            model, kv, mode, engine = c
            results[c].append(run_child(["probe", engine.replace(".", ""), model, mode, kv,
                                         str(args.threads), "128"]))
        print(f"round {r + 1} done", file=sys.stderr)
    print("| model | KV | mode | engine | load s | first token s | peak RSS MiB | private "
          "MiB | file-backed MiB | shmem MiB | locked MiB |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for c, rows in results.items():
        errors = [r["error"] for r in rows if "error" in r]
        if errors:
            print(f"| {' | '.join(c)} | {errors[0]} |||||||")
            continue
        cells = [f"{median(rows, k):.2f}" for k in ("load_s", "first_token_s")] + \
                [f"{median(rows, k):.0f}" for k in STATUS_KEYS]
        print(f"| {' | '.join(c)} | {' | '.join(cells)} |")


# -- repacking ---------------------------------------------------------------------------------

def repack_probe(model: str, repack: bool, threads: int, n_slots: int = 2) -> dict:
    from llamacpy.engine.context import Context
    from llamacpy.engine.prompt import Prompt
    from llamacpy.engine.scheduler import Scheduler
    from llamacpy.engine.sequence import Request
    from llamacpy.format import open_gguf
    from llamacpy.hub import resolve_model
    from llamacpy.kernels import set_threads
    from llamacpy.models import load_model
    from llamacpy.sampling import SamplingParams
    from llamacpy.tokenizer import Tokenizer

    set_threads(threads)
    g = open_gguf(str(resolve_model(model)))
    before = proc_status()["RssAnon"]
    m = load_model(g, repack=repack)
    weights = proc_status()["RssAnon"] - before
    tok = Tokenizer.from_gguf(g)
    sched = Scheduler(Context(m, n_ctx=512 * n_slots, n_seq=n_slots), tok)
    prompts = [tok.tokenize(PROMPT[7 * i:])[:64] for i in range(n_slots)]

    def generate(n: int) -> float:
        done = []
        for p in prompts:
            sched.submit(Request(Prompt(list(p)), SamplingParams(temperature=0.0),
                                 n_predict=n, ignore_eos=True, cache_prompt=False),
                         lambda e: done.append(e) if e["type"] == "done" else None)
        while len(done) < n_slots:
            sched.step()
        return sum(e["timings"]["predicted_ms"] for e in done) / n_slots / 1000

    generate(4)  # compile
    seconds = generate(64)
    return {"tg_tok_s": n_slots * 63 / seconds, "weights_private_mib": weights,
            **proc_status()}


def repack_table(args) -> None:
    results = {(m, n, r): [] for m in args.models for n in args.slots for r in (True, False)}
    for m, n, r in results:  # compile once, not timed
        run_child(["repack-probe", m, str(int(r)), str(args.threads), str(n)])
    for _ in range(args.rounds):
        for key in results:
            m, n, r = key
            results[key].append(run_child(["repack-probe", m, str(int(r)), str(args.threads),
                                           str(n)]))
    print("| model | slots | --repack | decode tok/s (all slots) | weights' private MiB | "
          "peak RSS MiB |")
    print("|---|---:|---|---:|---:|---:|")
    for (m, n, r), rows in results.items():
        print(f"| {m} | {n} | {'on' if r else 'off (--no-repack)'} | "
              f"{median(rows, 'tg_tok_s'):.1f} | {median(rows, 'weights_private_mib'):.0f} | "
              f"{median(rows, 'VmHWM'):.0f} |")


# -- a memory cgroup ---------------------------------------------------------------------------

def cgroup_dir(limit: int) -> tuple[Path, str]:
    """A new memory cgroup limited to `limit` bytes with no swap: (its folder, 'v1' or 'v2');
    RuntimeError when none can be made here."""
    own = Path("/proc/self/cgroup").read_text().splitlines()
    v2 = next((ln.split(":", 2)[2] for ln in own if ln.startswith("0::")), None)
    v1 = next((ln.split(":", 2)[2] for ln in own if ":memory:" in ln), None)
    name = f"llamacpy-{os.getpid()}-{time.monotonic_ns()}"
    try:
        if v1 is not None and Path("/sys/fs/cgroup/memory").is_dir():
            d = Path("/sys/fs/cgroup/memory") / v1.lstrip("/") / name
            d.mkdir()
            (d / "memory.limit_in_bytes").write_text(str(limit))
            (d / "memory.memsw.limit_in_bytes").write_text(str(limit))
            return d, "v1"
        if v2 is not None:
            d = Path("/sys/fs/cgroup") / v2.lstrip("/") / name
            d.mkdir()
            (d / "memory.max").write_text(str(limit))
            (d / "memory.swap.max").write_text("0")
            return d, "v2"
    except OSError as e:
        raise RuntimeError(f"cannot make a memory cgroup here: {e}") from None
    raise RuntimeError("no memory cgroup controller is mounted")


def cgroup_peak(d: Path, version: str) -> tuple[float, int]:
    """(peak usage in MiB, OOM kills) of a cgroup."""
    if version == "v1":
        peak = int((d / "memory.max_usage_in_bytes").read_text())
        oom = (d / "memory.oom_control").read_text()
        kills = int(next((ln.split()[1] for ln in oom.splitlines()
                          if ln.startswith("oom_kill ")), "0"))
    else:
        peak_file = d / "memory.peak"
        peak = int(peak_file.read_text()) if peak_file.exists() else 0
        events = dict(ln.split() for ln in (d / "memory.events").read_text().splitlines())
        kills = int(events.get("oom_kill", 0))
    return peak / 2**20, kills


def cgroup_anon(d: Path, version: str) -> float:
    """The cgroup's private (anonymous) memory now, in MiB."""
    stat = dict(ln.split() for ln in (d / "memory.stat").read_text().splitlines())
    return int(stat["rss" if version == "v1" else "anon"]) / 2**20


WRAPPER_KV = ("-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on")  # the wrapper script's cache flags


def serve_in_cgroup(model: str, mode: str, headroom_mb: int, threads: int,
                    kv_flags: tuple[str, ...] = WRAPPER_KV, requests: int = 3,
                    max_tokens: int = 32) -> dict:
    """llama-server with the wrapper's memory flags inside a cgroup of file size + headroom."""
    from tests.server.conftest import free_port

    from llamacpy.hub import resolve_model

    path = resolve_model(model)
    limit = path.stat().st_size + headroom_mb * 10**6
    d, version = cgroup_dir(limit)
    port = free_port()
    cmd = [str(Path(sys.executable).parent / "llama-server"), "-m", str(path), "--load-mode",
           mode, "--no-repack", *kv_flags, "--no-warmup", "--ctx-size", "3096", "--threads",
           str(threads), "--host", "127.0.0.1", "--port", str(port)]
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    launch = ["sh", "-c", f'echo $$ > {d}/cgroup.procs && exec "$@"', "sh", *cmd]
    proc = subprocess.Popen(launch, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
                            text=True)
    served, error, anon = 0, "", 0.0
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.3)
        for i in range(requests if proc.poll() is None else 0):
            body = json.dumps({"messages": [{"role": "user", "content": f"Write a haiku about "
                                             f"the number {i + 1}."}],
                               "max_tokens": max_tokens,
                               "temperature": 0}).encode()
            req = urllib.request.Request(f"{url}/v1/chat/completions", body,
                                         {"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=300) as r:
                    served += r.status == 200
            except OSError as e:
                error = str(e)
                break
        if proc.poll() is None:
            anon = cgroup_anon(d, version)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, stderr = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
        peak, kills = cgroup_peak(d, version)
        try:
            d.rmdir()
        except OSError:
            pass
    return {"model": model, "mode": mode, "limit_mib": limit / 2**20, "cgroup": version,
            "served": served, "requests": requests, "exit": proc.returncode,
            "oom_kills": kills, "peak_mib": peak, "anon_mib": anon, "error": error,
            "stderr_tail": stderr.strip().splitlines()[-1:] if stderr else []}


def cgroup_table(args) -> None:
    print("| model | mode | limit MiB | served | OOM kills | cgroup peak MiB | private MiB "
          "after the requests | exit |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for model in args.models:
        for mode in args.modes:
            r = serve_in_cgroup(model, mode, args.headroom_mb, args.threads,
                                WRAPPER_KV if args.kv == ["q8_0"] else (),
                                max_tokens=args.max_tokens)
            print(f"| {model} | {mode} | {r['limit_mib']:.0f} | {r['served']}/{r['requests']} "
                  f"| {r['oom_kills']} | {r['peak_mib']:.0f} | {r['anon_mib']:.0f} | "
                  f"{r['exit']} |", flush=True)


def main(argv: list[str]) -> None:
    if argv and argv[0] == "probe":
        engine, model, mode, kv, threads, n = argv[1:]
        print(json.dumps(probe("llama.cpp" if engine == "llamacpp" else engine, model, mode, kv,
                               int(threads), int(n))))
        return
    if argv and argv[0] == "repack-probe":
        model, repack, threads, n_slots = argv[1:]
        print(json.dumps(repack_probe(model, repack == "1", int(threads), int(n_slots))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=["modes", "repack", "cgroup"])
    p.add_argument("-m", "--models", nargs="+",
                   default=["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"])
    p.add_argument("--modes", type=lambda s: s.split(","),
                   default=["mmap", "none", "mlock", "mmap+mlock", "dio"])
    p.add_argument("--kv", type=lambda s: s.split(","), default=["f16", "q8_0"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--slots", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4],
                   help="repack: sequences decoding together")
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("--headroom-mb", type=int, default=300,
                   help="the cgroup's limit over the file size (negative: under it)")
    p.add_argument("--max-tokens", type=int, default=32)
    args = p.parse_args(argv)
    {"modes": modes_table, "repack": repack_table, "cgroup": cgroup_table}[args.what](args)


if __name__ == "__main__":
    main(sys.argv[1:])
