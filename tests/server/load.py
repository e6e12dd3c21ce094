"""Concurrent streaming clients against a running llama-server (shared by the test and the soak
benchmark): each client streams chat completions back to back and checks every response."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

import httpx


@dataclass
class LoadResult:
    completed: int = 0
    tokens: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


async def one_stream(client: httpx.AsyncClient, url: str, i: int, max_tokens: int) -> int:
    """One streamed chat completion; returns its completion tokens or raises on a bad stream."""
    body = {"messages": [{"role": "user", "content": f"Write line {i} of a poem about rivers."}],
            "max_tokens": max_tokens, "temperature": 0.7, "seed": i, "stream": True,
            "stream_options": {"include_usage": True}}
    finish, usage, text, done = None, None, "", False
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise AssertionError(f"status {r.status_code}: {await r.aread()!r}")
        async for line in r.aiter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            assert "error" not in chunk, chunk
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
                if choice["finish_reason"]:
                    assert finish is None, "two finish chunks"
                    finish = choice["finish_reason"]
            usage = chunk.get("usage") or usage
    assert done and finish in ("stop", "length") and usage, (done, finish, usage)
    assert usage["completion_tokens"] <= max_tokens
    return usage["completion_tokens"]


async def run_load(url: str, n_clients: int, seconds: float, max_tokens: int = 24) -> LoadResult:
    result, deadline = LoadResult(), time.monotonic() + seconds
    t0 = time.monotonic()

    async def client_loop(c: int) -> None:
        async with httpx.AsyncClient(timeout=300) as client:
            i = 0
            while time.monotonic() < deadline:
                try:
                    n = await one_stream(client, url, c * 1000 + i, max_tokens)
                    result.tokens += n  # after the await: no update lost between clients
                    result.completed += 1
                except Exception as e:  # noqa: BLE001 - every failure is reported
                    result.failures.append(f"client {c} request {i}: {e!r}")
                i += 1

    await asyncio.gather(*(client_loop(c) for c in range(n_clients)))
    result.seconds = time.monotonic() - t0
    return result


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0
