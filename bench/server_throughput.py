"""Server throughput: aggregate generation tokens/s with 1 and with N parallel streams, against
the same engine's own llama-bench tg figure, measured in one run.

    python bench/server_throughput.py [MODEL] [-t 1] [-np 4] [-n 128] [-r 3]

Starts `llama-server -np N -t T` on MODEL (default gemma3-270m), warms it up, then alternates
rounds: one stream of n tokens, N concurrent streams of n tokens each (temperature 0 and
ignore_eos, so every stream generates exactly n tokens), and `llama-bench -n n -r 1` in a
subprocess while the server idles. Prints medians of aggregate tokens/s,
the N-stream / 1-stream ratio, and single-stream speed against `llama-bench -n n`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server.conftest import start_server, stop_server  # noqa: E402


async def stream(client: httpx.AsyncClient, url: str, n: int, seed: int) -> int:
    body = {"prompt": f"Story number {seed}: Once upon a time", "n_predict": n, "stream": True,
            "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    tokens = 0
    async with client.stream("POST", f"{url}/completion", json=body) as r:
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                chunk = json.loads(line[6:])
                if chunk.get("stop"):
                    tokens = chunk["tokens_predicted"]
    return tokens


async def aggregate(url: str, n_streams: int, n: int) -> float:
    async with httpx.AsyncClient(timeout=600) as client:
        t0 = time.perf_counter()
        counts = await asyncio.gather(*(stream(client, url, n, s) for s in range(n_streams)))
        return sum(counts) / (time.perf_counter() - t0)


def llama_bench_tg(model: str, threads: int, n: int) -> float:
    out = subprocess.run([sys.executable, "-m", "llamacpy", "bench", "-m", model, "-p", "0",
                          "-n", str(n), "-t", str(threads), "-r", "1", "-o", "json"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)[0]["avg_ts"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default="gemma3-270m")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-n", "--n-gen", type=int, default=128)
    ap.add_argument("-r", "--rounds", type=int, default=3)
    args = ap.parse_args()
    log = Path(tempfile.mkdtemp()) / "server.log"
    server = start_server(["-m", args.model, "-t", str(args.threads), "-np", str(args.parallel),
                           "-c", str(args.parallel * (args.n_gen + 64))], str(log))
    try:
        asyncio.run(aggregate(server.url, args.parallel, 8))  # warm-up
        single, multi, bench = [], [], []
        for _ in range(args.rounds):  # interleaved: this VM's speed drifts between minutes
            single.append(asyncio.run(aggregate(server.url, 1, args.n_gen)))
            multi.append(asyncio.run(aggregate(server.url, args.parallel, args.n_gen)))
            bench.append(llama_bench_tg(args.model, args.threads, args.n_gen))  # server idle
    finally:
        stop_server(server)
    s, m, bench = statistics.median(single), statistics.median(multi), statistics.median(bench)
    print(f"model {args.model}, {args.threads} thread(s), {args.parallel} slots, "
          f"{args.n_gen} tokens per stream, {args.rounds} rounds (medians)")
    print("| measurement | tokens/s |\n|---|---:|")
    print(f"| llama-bench tg{args.n_gen} (same engine, no server) | {bench:.2f} |")
    print(f"| server, 1 stream | {s:.2f} |")
    print(f"| server, {args.parallel} streams (aggregate) | {m:.2f} |")
    print(f"\n{args.parallel} streams / 1 stream: {m / s:.2f}x;  "
          f"1 stream / llama-bench tg: {s / bench:.2f}x")


if __name__ == "__main__":
    main()
