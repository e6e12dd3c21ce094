"""Scaling on Ray Serve: plain llama-server against serve-ray with 1 and with 2 replicas (1
thread each), 8 concurrent streaming chat clients, in interleaved rounds of one run.

    python bench/ray_scaling.py [MODEL ...] [-n 64] [-r 3] [-c 8] [-np 8]

For each model (default gemma3-270m and qwen2.5-coder-0.5b) it starts `llama-server -t 1 -np
NP` and one local Ray with two serve-ray applications of the same flags, at /r1 (1 replica)
and /r2 (2 replicas); every replica has the same NP slots, so only the replica count
differs. Then rounds: the three in a rotating order, each C streaming chats of exactly n
tokens (temperature 0, ignore_eos). Prints per configuration the median aggregate tokens/s,
p50/p95 time to first token over all rounds, CPU seconds of the serving processes per round,
and the ratios 2 replicas / 1 replica and Serve / plain llama-server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server.conftest import free_port, start_server, stop_server


async def chat(client: httpx.AsyncClient, url: str, n: int, i: int) -> tuple[float, int]:
    """One streamed chat: (seconds to the first content token, completion tokens)."""
    body = {"messages": [{"role": "user", "content": f"Tell story number {i} about a ship."}],
            "max_tokens": n, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    t0, ttft, tokens = time.perf_counter(), None, 0
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if ttft is None and any(c["delta"].get("content") for c in chunk["choices"]):
                ttft = time.perf_counter() - t0
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    return ttft, tokens


async def one_round(url: str, clients: int, n: int) -> tuple[float, list[float]]:
    async with httpx.AsyncClient(timeout=900) as client:
        t0 = time.perf_counter()
        out = await asyncio.gather(*(chat(client, url, n, i) for i in range(clients)))
        wall = time.perf_counter() - t0
    assert all(tokens == n for _, tokens in out), out
    return sum(t for _, t in out) / wall, [ttft for ttft, _ in out]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def serving_processes(root: psutil.Process, exclude_self: bool) -> list[psutil.Process]:
    """A process and its descendants (Ray's: the driver's children, not the driver, whose
    threads are the benchmark's clients)."""
    kids = root.children(recursive=True)
    return kids if exclude_self else [root, *kids]


def start_ray(model: str, np_: int, ctx: int) -> str:
    import ray
    from ray import serve

    from llamacpy.serve_ray.app import build
    from llamacpy.serve_ray.config import config_from_argv

    os.environ.pop("RAY_ADDRESS", None)
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    for name, replicas in (("r1", 1), ("r2", 2)):
        cfg = config_from_argv(["-m", model, "--replicas", str(replicas), "-np", str(np_),
                                "-c", str(ctx)])
        serve.run(build(cfg), name=name, route_prefix=f"/{name}")
    return f"http://127.0.0.1:{port}"


def stop_ray() -> None:
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def bench_model(model: str, args) -> dict:
    ctx = 1024 * args.parallel
    log = Path(tempfile.mkdtemp()) / "llama-server.log"
    plain = start_server(["-m", model, "-t", "1", "-np", str(args.parallel), "-c", str(ctx)],
                         str(log))
    base = start_ray(model, args.parallel, ctx)
    me = psutil.Process()
    configs = {"llama-server": (plain.url, serving_processes(psutil.Process(plain.proc.pid),
                                                             False)),
               "serve 1 replica": (f"{base}/r1", None), "serve 2 replicas": (f"{base}/r2", None)}
    results = {name: {"tps": [], "ttft": [], "cpu": []} for name in configs}
    results["rss"] = {"llama-server": rss_mib(configs["llama-server"][1]),
                      "ray (3 replicas, 2 ingresses, Ray's processes)":
                          rss_mib(serving_processes(me, True))}
    try:
        for url, _ in configs.values():  # warm: every replica's first requests
            asyncio.run(one_round(url, args.clients, 8))
        for r in range(args.rounds):
            names = list(configs)
            names = names[r % 3:] + names[:r % 3]
            for name in names:
                url, procs = configs[name]
                procs = procs or serving_processes(me, True)
                c0 = cpu_seconds(procs)
                tps, ttfts = asyncio.run(one_round(url, args.clients, args.n))
                results[name]["cpu"].append(cpu_seconds(procs) - c0)
                results[name]["tps"].append(tps)
                results[name]["ttft"] += ttfts
                print(f"  round {r + 1} {name}: {tps:.1f} tokens/s", file=sys.stderr, flush=True)
    finally:
        stop_ray()
        stop_server(plain)
    return results


def rss_mib(procs: list[psutil.Process]) -> float:
    return sum(p.memory_info().rss for p in procs if p.is_running()) / 2**20


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def report(model: str, results: dict, args) -> None:
    print(f"\n{model}: {args.clients} streaming chats x {args.n} tokens, {args.rounds} rounds, "
          f"-t 1 -np {args.parallel} per server/replica")
    print("| configuration | tokens/s (median) | TTFT p50 (s) | TTFT p95 (s) | CPU s per round |")
    print("|---|---|---|---|---|")
    med = {}
    rss = results.pop("rss")
    for name, r in results.items():
        med[name] = statistics.median(r["tps"])
        print(f"| {name} | {med[name]:.1f} | {pct(r['ttft'], 0.5):.2f} | "
              f"{pct(r['ttft'], 0.95):.2f} | {statistics.median(r['cpu']):.1f} |")
    print(f"2 replicas / 1 replica: {med['serve 2 replicas'] / med['serve 1 replica']:.2f}x; "
          f"Serve 1 replica / llama-server: "
          f"{med['serve 1 replica'] / med['llama-server']:.3f} "
          f"(overhead {100 * (1 - med['serve 1 replica'] / med['llama-server']):.1f}%)")
    extra = statistics.median(results["serve 1 replica"]["cpu"]) - \
        statistics.median(results["llama-server"]["cpu"])
    print(f"Serve path CPU per streamed token: {1000 * extra / (args.clients * args.n):.2f} ms; "
          f"RSS after start (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in rss.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", default=["gemma3-270m", "qwen2.5-coder-0.5b"])
    ap.add_argument("-n", type=int, default=64, help="tokens per chat")
    ap.add_argument("-r", "--rounds", type=int, default=3)
    ap.add_argument("-c", "--clients", type=int, default=8)
    ap.add_argument("-np", "--parallel", type=int, default=8)
    args = ap.parse_args()
    print(f"load average before: {os.getloadavg()}; CPUs: {os.cpu_count()}", flush=True)
    for model in args.models:
        report(model, bench_model(model, args), args)
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
