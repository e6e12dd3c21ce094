"""Many streaming clients at once, and clients that leave mid-stream.

These bound counts and correctness only: how fast the server answers depends on the machine and
its load, so the timeouts here are generous hang limits, and speed belongs in bench/
(bench/server_soak.py runs the timed soak)."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.server.load import one_stream, rss_mib

N_CLIENTS, ROUNDS, MAX_TOKENS = 16, 2, 24  # 16 concurrent clients, each streaming 2 answers
HANG_S = 600  # a request, or a slot becoming idle, that takes longer than this is a hang


def idle_slots(url: str) -> bool:
    return not any(s["is_processing"] for s in httpx.get(f"{url}/slots", timeout=HANG_S).json())


def wait_idle(url: str) -> None:
    deadline = time.monotonic() + HANG_S
    while not idle_slots(url):
        assert time.monotonic() < deadline, f"a slot was still busy after {HANG_S} s"
        time.sleep(0.05)


async def stream_rounds(url: str) -> tuple[list[int], list[str]]:
    """N_CLIENTS clients at once, each streaming ROUNDS chat answers back to back; returns the
    completion tokens of every answer and a line for every failed one."""
    tokens: list[int] = []
    failures: list[str] = []

    async def client(c: int) -> None:
        async with httpx.AsyncClient(timeout=HANG_S) as http:
            for i in range(ROUNDS):
                try:
                    tokens.append(await one_stream(http, url, c * 1000 + i, MAX_TOKENS))
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    failures.append(f"client {c} request {i}: {e!r}")

    await asyncio.gather(*(client(c) for c in range(N_CLIENTS)))
    return tokens, failures


def test_sixteen_streaming_clients(smollm_server):
    rss_start = rss_mib(smollm_server.proc.pid)
    tokens, failures = asyncio.run(stream_rounds(smollm_server.url))
    assert not failures, failures[:3]
    # every answer well formed (one_stream checks the stream, [DONE], finish reason and usage)
    assert len(tokens) == N_CLIENTS * ROUNDS
    assert all(0 <= n <= MAX_TOKENS for n in tokens) and sum(tokens) > 0, tokens
    wait_idle(smollm_server.url)
    rss_end = rss_mib(smollm_server.proc.pid)
    assert rss_end - rss_start < 150, f"server memory grew {rss_start:.0f} -> {rss_end:.0f} MiB"


def test_disconnect_frees_the_slot(smollm_server):
    body = {"prompt": "Tell me everything about the history of Europe.", "n_predict": 2000,
            "stream": True, "temperature": 0.8}
    with httpx.Client(timeout=HANG_S) as client:
        with client.stream("POST", f"{smollm_server.url}/completion", json=body) as r:
            lines = 0
            for line in r.iter_lines():
                lines += bool(line)
                if lines >= 5:
                    break  # leave: closes the connection mid-stream
    # freed at the next decode step; 2000 tokens would take far longer than a step
    wait_idle(smollm_server.url)
    metrics = httpx.get(f"{smollm_server.url}/metrics", timeout=HANG_S).text
    predicted = [float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("llamacpp:tokens_predicted_total")]
    assert predicted  # the server is alive and counting
