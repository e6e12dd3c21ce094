"""Many streaming clients at once, and clients that leave mid-stream."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.server.load import rss_mib, run_load

N_CLIENTS, SECONDS = 16, 20  # bench/server_soak.py runs the 60-second version


def test_sixteen_streaming_clients(smollm_server):
    rss_start = rss_mib(smollm_server.proc.pid)
    result = asyncio.run(run_load(smollm_server.url, N_CLIENTS, SECONDS))
    assert not result.failures, result.failures[:3]
    assert result.completed >= N_CLIENTS  # every client got at least one full answer
    rss_end = rss_mib(smollm_server.proc.pid)
    assert rss_end - rss_start < 150, f"server memory grew {rss_start:.0f} -> {rss_end:.0f} MiB"
    slots = httpx.get(f"{smollm_server.url}/slots").json()
    assert not any(s["is_processing"] for s in slots)


def test_disconnect_frees_the_slot(smollm_server):
    body = {"prompt": "Tell me everything about the history of Europe.", "n_predict": 2000,
            "stream": True, "temperature": 0.8}
    with httpx.Client(timeout=120) as client:
        with client.stream("POST", f"{smollm_server.url}/completion", json=body) as r:
            lines = 0
            for line in r.iter_lines():
                lines += bool(line)
                if lines >= 5:
                    break  # leave: closes the connection mid-stream
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not any(s["is_processing"] for s in httpx.get(f"{smollm_server.url}/slots").json()):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the slot was still busy 5 s after the client left")
    metrics = httpx.get(f"{smollm_server.url}/metrics").text
    predicted = [float(line.split()[-1]) for line in metrics.splitlines()
                 if line.startswith("llamacpp:tokens_predicted_total")]
    assert predicted  # the server is alive and counting
