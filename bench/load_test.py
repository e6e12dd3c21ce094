"""Load test for llama-server: concurrent streaming clients for a fixed time, a fifth of them
leaving mid-stream, every completed stream checked chunk by chunk, the slots and the server's
memory checked afterwards.

    python bench/load_test.py [-m smollm2-135m] [--clients 32] [--duration 120] [-np 4] [-c 4096]
    python bench/load_test.py --url http://127.0.0.1:8080 [--pid PID]   # a server already running

Each client loops until the duration is over, sending streamed requests to /v1/chat/completions,
/completion and /v1/completions (n_predict 16-128, prompts of which most share one of a few long
prefixes, so slots are chosen and reused by prefix). The first fifth of the clients close the
connection after a random number of chunks. Checks (the exit status is 1 if any fails):

- every stream that ran to its end is well formed: `data:` lines of JSON in llama.cpp's chunk
  shapes, one finish_reason (stop_type on /completion), usage and timings in the final chunks,
  `[DONE]` last on the OpenAI routes, no error event in a 200 stream; no non-200 answer;
- no request hangs (each chunk within --read-timeout; every client done within --grace after the
  end);
- afterwards every slot of GET /slots is idle within --idle-timeout, and /health answers 200;
- a probe: a long stream left after three chunks frees its slot within --idle-timeout;
- the server's RSS at the end is at most --rss-limit above its RSS after the warm-up: the first
  sample once --warmup seconds have passed and --warmup-requests streams have completed (so
  every slot has decoded a whole request; before that, first use still maps kernels and KV-cache
  pages in);
- a server started here exits with status 0 on SIGTERM.

Loopback only; the run's length is bounded by --duration + --grace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# Shared prompt prefixes (a few hundred tokens each): requests that start with the same one can
# reuse a slot's cached prefix.
TOPICS = ["rivers", "mountains", "the sea", "cities", "forests", "the night sky", "deserts",
          "winter", "old libraries", "trains"]
PREFIXES = [
    " ".join(f"Paragraph {k}: a note on {topic}, its history, the people who study it, and the "
             f"stories told about it over the years." for k in range(1, 1 + 4 * (j + 2)))
    for j, topic in enumerate(TOPICS[:4])
]
SYSTEM = "You are a helpful assistant. Answer briefly and clearly."


@dataclass
class Stats:
    started: int = 0
    completed: dict[str, int] = field(default_factory=dict)  # route -> complete, checked streams
    disconnects: int = 0
    tokens: int = 0  # completion tokens of complete streams (usage / tokens_predicted)
    chunks: int = 0  # data chunks received, complete and cut streams alike
    statuses: dict[int, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    ttft: list[float] = field(default_factory=list)  # seconds to the first content chunk
    durations: list[float] = field(default_factory=list)  # seconds per complete stream
    finishes: dict[str, int] = field(default_factory=dict)

    def fail(self, what: str) -> None:
        self.errors.append(what)


class Malformed(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Malformed(what)


# -- requests ---------------------------------------------------------------------------------

def make_request(rng: random.Random, client: int, i: int) -> tuple[str, dict, int]:
    """(route, body, n_predict) for one request."""
    n_predict = rng.randint(16, 128)
    shared = rng.random() < 0.7
    topic = rng.choice(TOPICS)
    question = f"Client {client}, request {i}: write {rng.randint(2, 6)} sentences about {topic}."
    prefix = rng.choice(PREFIXES) if shared else f"A short note ({rng.random():.6f})."
    sampling = {"temperature": rng.choice([0.0, 0.7, 1.0]), "seed": rng.randrange(1 << 30)}
    if rng.random() < 0.2:
        sampling["ignore_eos"] = True  # runs to n_predict: the "length" path
    if rng.random() < 0.15:
        sampling["stop"] = [".", "\n\n"]  # the stop-string path
    route = rng.choices(["/v1/chat/completions", "/completion", "/v1/completions"],
                        weights=[5, 3, 2])[0]
    if route == "/v1/chat/completions":
        body = {"messages": [{"role": "system", "content": f"{SYSTEM}\n\n{prefix}"},
                             {"role": "user", "content": question}],
                "max_tokens": n_predict, "stream": True, **sampling}
        if rng.random() < 0.75:
            body["stream_options"] = {"include_usage": True}
    elif route == "/completion":
        body = {"prompt": f"{prefix}\n\nQuestion: {question}\nAnswer:", "n_predict": n_predict,
                "stream": True, "cache_prompt": True, **sampling}
    else:
        body = {"prompt": f"{prefix}\n\nQuestion: {question}\nAnswer:", "max_tokens": n_predict,
                "stream": True, **sampling}
    return route, body, n_predict


# -- stream checks ----------------------------------------------------------------------------

class StreamCheck:
    """Checks one stream chunk by chunk in llama.cpp's shapes; `finish()` checks its end."""

    def __init__(self, route: str, body: dict, n_predict: int):
        self.route, self.body, self.n_predict = route, body, n_predict
        self.kind = {"/v1/chat/completions": "chat", "/completion": "native"}.get(route, "text")
        self.chunks: list[dict] = []
        self.done = False
        self.finish_reason: str | None = None
        self.usage: dict | None = None
        self.first_content: float | None = None

    def line(self, line: str) -> None:
        if not line:
            return  # the blank line after each event
        check(not self.done, f"data after [DONE]: {line[:80]!r}")
        check(line.startswith("data: "), f"not a data line: {line[:80]!r}")
        payload = line[6:]
        if payload == "[DONE]":
            check(self.kind != "native", "[DONE] on /completion")
            self.done = True
            return
        try:
            chunk = json.loads(payload)
        except json.JSONDecodeError as e:
            raise Malformed(f"invalid JSON ({e}): {payload[:80]!r}") from None
        check(isinstance(chunk, dict), f"chunk is not an object: {payload[:80]!r}")
        check("error" not in chunk, f"error event in a 200 stream: {payload[:200]}")
        getattr(self, self.kind)(chunk)
        self.chunks.append(chunk)

    def _content(self, text) -> None:
        check(isinstance(text, str), f"content is not a string: {text!r}")
        if text and self.first_content is None:
            self.first_content = time.monotonic()

    def chat(self, chunk: dict) -> None:
        check(chunk.get("object") == "chat.completion.chunk", f"object {chunk.get('object')!r}")
        for key, typ in (("id", str), ("model", str), ("created", int), ("choices", list)):
            check(isinstance(chunk.get(key), typ), f"chat chunk without {key}: {chunk}")
        if self.chunks:
            check(chunk["id"] == self.chunks[0]["id"], "the id changed within the stream")
        else:
            check(len(chunk["choices"]) == 1 and
                  chunk["choices"][0]["delta"].get("role") == "assistant",
                  f"first chat chunk without role assistant: {chunk}")
        if "usage" in chunk and chunk["usage"] is not None:
            self._usage(chunk["usage"])
        for choice in chunk["choices"]:
            check(choice.get("index") == 0, f"choice index {choice.get('index')!r}")
            delta = choice.get("delta")
            check(isinstance(delta, dict), f"choice without delta: {choice}")
            for key in ("content", "reasoning_content"):
                if delta.get(key) is not None:
                    check(self.finish_reason is None, "content after the finish_reason")
                    self._content(delta[key])
            self._finish(choice.get("finish_reason", "missing"))

    def text(self, chunk: dict) -> None:
        check(chunk.get("object") == "text_completion", f"object {chunk.get('object')!r}")
        check(isinstance(chunk.get("id"), str) and isinstance(chunk.get("choices"), list),
              f"text chunk without id/choices: {chunk}")
        if chunk.get("usage") is not None:
            self._usage(chunk["usage"])
        for choice in chunk["choices"]:
            check(choice.get("index") == 0, f"choice index {choice.get('index')!r}")
            if choice.get("text"):
                check(self.finish_reason is None, "text after the finish_reason")
            self._content(choice.get("text"))
            self._finish(choice.get("finish_reason", "missing"))

    def native(self, chunk: dict) -> None:
        check(self.finish_reason is None, "a chunk after stop: true")
        self._content(chunk.get("content"))
        check(isinstance(chunk.get("stop"), bool), f"native chunk without stop: {chunk}")
        check(isinstance(chunk.get("tokens_predicted", 0), int), "tokens_predicted not an int")
        if chunk["stop"]:
            check(chunk.get("stop_type") in ("eos", "word", "limit"),
                  f"stop_type {chunk.get('stop_type')!r}")
            check(isinstance(chunk.get("tokens_evaluated"), int), "no tokens_evaluated")
            self.finish_reason = chunk["stop_type"]
            n = chunk.get("tokens_predicted")
            check(isinstance(n, int) and 1 <= n <= self.n_predict,
                  f"tokens_predicted {n!r} (n_predict {self.n_predict})")
            self.usage = {"completion_tokens": n, "prompt_tokens": chunk["tokens_evaluated"]}

    def _finish(self, reason) -> None:
        check(reason in (None, "stop", "length"), f"finish_reason {reason!r}")
        if reason is not None:
            check(self.finish_reason is None, "two finish_reasons")
            self.finish_reason = reason

    def _usage(self, usage: dict) -> None:
        check(self.usage is None, "usage twice")
        check(isinstance(usage, dict) and all(isinstance(usage.get(k), int) for k in
              ("prompt_tokens", "completion_tokens", "total_tokens")), f"usage {usage!r}")
        check(usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"],
              f"usage does not add up: {usage}")
        check(1 <= usage["completion_tokens"] <= self.n_predict,
              f"completion_tokens {usage['completion_tokens']} (max {self.n_predict})")
        self.usage = usage

    def finish(self) -> int:
        """Checks the end of a complete stream; returns its completion tokens."""
        check(bool(self.chunks), "an empty stream")
        check(self.finish_reason is not None, "no finish_reason / stop chunk")
        last = self.chunks[-1]
        timings = last.get("timings")
        check(isinstance(timings, dict) and all(isinstance(timings.get(k), (int, float)) for k in
              ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms")),
              f"no timings in the final chunk: {str(last)[:300]}")
        if self.kind == "native":
            check(last.get("stop") is True, "the last chunk is not stop: true")
        else:
            check(self.done, "no [DONE] at the end")
        wants_usage = self.kind == "text" or (self.body.get("stream_options") or {}).get(
            "include_usage")
        if wants_usage:
            check(self.usage is not None and "usage" in last,
                  "usage missing from the final chunk")
        if self.usage is None:  # chat without include_usage: timings carry the count
            n = timings["predicted_n"]
        else:
            n = self.usage["completion_tokens"]
            check(timings["predicted_n"] == n,
                  f"timings.predicted_n {timings['predicted_n']} != completion tokens {n}")
        check(1 <= n <= self.n_predict, f"{n} completion tokens (max {self.n_predict})")
        if self.finish_reason in ("length", "limit"):
            check(n == self.n_predict, f"finish 'length' after {n} of {self.n_predict} tokens")
        if self.body.get("ignore_eos") and not self.body.get("stop"):
            check(n == self.n_predict, f"ignore_eos stopped after {n} of {self.n_predict}")
        return n


async def one_request(http: httpx.AsyncClient, route: str, body: dict, n_predict: int,
                      cut_after: int | None, stats: Stats, tag: str) -> None:
    """One streamed request: checked to its end, or closed after `cut_after` chunks."""
    stats.started += 1
    t0 = time.monotonic()
    sc = StreamCheck(route, body, n_predict)
    n_chunks = 0
    try:
        async with http.stream("POST", route, json=body) as r:
            stats.statuses[r.status_code] = stats.statuses.get(r.status_code, 0) + 1
            if r.status_code != 200:
                text = (await r.aread())[:300]
                stats.fail(f"{tag} {route}: status {r.status_code}: {text!r}")
                return
            ctype = r.headers.get("content-type", "")
            check(ctype.startswith("text/event-stream"), f"content-type {ctype!r}")
            async for line in r.aiter_lines():
                sc.line(line)
                if line:
                    n_chunks += 1
                    stats.chunks += 1
                if cut_after is not None and n_chunks >= cut_after and not sc.done \
                        and sc.finish_reason is None:
                    stats.disconnects += 1  # leaving the block closes the connection
                    return
        n = sc.finish()
    except Malformed as e:
        stats.fail(f"{tag} {route}: malformed stream: {e}")
        return
    except httpx.ReadTimeout:
        stats.fail(f"{tag} {route}: no chunk for the read timeout (hang?) after {n_chunks} chunks")
        return
    except httpx.HTTPError as e:
        stats.fail(f"{tag} {route}: {type(e).__name__}: {e} after {n_chunks} chunks")
        return
    stats.completed[route] = stats.completed.get(route, 0) + 1
    stats.finishes[sc.finish_reason] = stats.finishes.get(sc.finish_reason, 0) + 1
    stats.tokens += n
    stats.durations.append(time.monotonic() - t0)
    if sc.first_content is not None:
        stats.ttft.append(sc.first_content - t0)


async def client_loop(url: str, c: int, leaves: bool, deadline: float, stats: Stats,
                      seed: int, read_timeout: float) -> None:
    rng = random.Random(seed * 1000 + c)
    timeout = httpx.Timeout(connect=10, read=read_timeout, write=10, pool=10)
    async with httpx.AsyncClient(base_url=url, timeout=timeout) as http:
        i = 0
        while time.monotonic() < deadline:
            route, body, n_predict = make_request(rng, c, i)
            cut = rng.randint(1, 12) if leaves else None
            await one_request(http, route, body, n_predict, cut, stats, f"client {c} #{i}")
            i += 1


# -- the server -------------------------------------------------------------------------------

def rss_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(args, log_path: Path) -> tuple[subprocess.Popen, str]:
    exe = Path(sys.executable).with_name("llama-server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "llamacpy", "server"]
    port = free_port()
    cmd += ["-m", args.model, "-np", str(args.parallel), "-c", str(args.ctx_size),
            "--host", "127.0.0.1", "--port", str(port), *(["-t", str(args.threads)]
                                                          if args.threads else [])]
    print("server:", " ".join(cmd), flush=True)
    log = open(log_path, "w")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}:\n"
                               f"{log_path.read_text(errors='replace')[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.25)
    proc.kill()
    raise TimeoutError(f"llama-server not ready after {args.start_timeout} s:\n"
                       f"{log_path.read_text(errors='replace')[-3000:]}")


def stop_server(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -9
    return proc.returncode


async def wait_idle(http: httpx.AsyncClient, timeout: float) -> tuple[float | None, list]:
    """Seconds until every slot is idle (None if not within `timeout`) and the last /slots."""
    t0 = time.monotonic()
    slots: list = []
    while True:
        try:
            r = await http.get("/slots")
            slots = r.json() if r.status_code == 200 else [{"status": r.status_code}]
            if r.status_code == 200 and all(not s.get("is_processing") for s in slots):
                return time.monotonic() - t0, slots
        except (httpx.HTTPError, ValueError) as e:
            slots = [{"error": repr(e)}]
        if time.monotonic() - t0 > timeout:
            return None, slots
        await asyncio.sleep(0.1)


async def disconnect_probe(http: httpx.AsyncClient, timeout: float) -> tuple[float | None, str]:
    """A long stream closed after three chunks: seconds until its slot is idle again."""
    body = {"prompt": "Count slowly from one to one thousand:", "n_predict": 400,
            "ignore_eos": True, "stream": True, "temperature": 0.0}
    n = 0
    async with http.stream("POST", "/completion", json=body) as r:
        if r.status_code != 200:
            return None, f"probe status {r.status_code}"
        async for line in r.aiter_lines():
            n += bool(line)
            if n >= 3:
                break
    t0 = time.monotonic()
    busy_seen = False
    while time.monotonic() - t0 < timeout:
        slots = (await http.get("/slots")).json()
        if any(s.get("is_processing") for s in slots):
            busy_seen = True
        else:
            return time.monotonic() - t0, "" if busy_seen else "(slot already idle at first look)"
        await asyncio.sleep(0.05)
    return None, f"a slot still busy {timeout} s after the client left: {slots}"


async def run(args, url: str, pid: int | None) -> tuple[Stats, dict, list[str]]:
    stats, report, failures = Stats(), {}, []
    rss: list[tuple[float, float, int]] = []  # (seconds since start, MiB, requests complete)
    t_start = time.monotonic()
    deadline = t_start + args.duration
    n_leave = round(args.clients * args.disconnect_fraction)

    async def sample() -> None:
        while pid is not None:
            v = rss_mib(pid)
            if v is not None:
                rss.append((time.monotonic() - t_start, v, sum(stats.completed.values())))
            await asyncio.sleep(1.0)

    sampler = asyncio.create_task(sample())
    tasks = [asyncio.create_task(client_loop(url, c, c < n_leave, deadline, stats, args.seed,
                                             args.read_timeout))
             for c in range(args.clients)]
    done, pending = await asyncio.wait(tasks, timeout=args.duration + args.grace)
    for t in pending:
        t.cancel()
    if pending:
        failures.append(f"{len(pending)} client(s) still in a request {args.grace:.0f} s after "
                        f"the end (hang)")
    for t in done:
        if t.exception() is not None:
            failures.append(f"a client crashed: {t.exception()!r}")
    report["seconds"] = time.monotonic() - t_start
    report["n_leave"] = n_leave

    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        idle, slots = await wait_idle(http, args.idle_timeout)
        report["idle_after_s"] = idle
        if idle is None:
            failures.append(f"slots not idle {args.idle_timeout} s after the run: {slots}")
        report["slots"] = slots
        try:
            h = await http.get("/health")
            report["health"] = h.status_code
        except httpx.HTTPError as e:
            report["health"] = repr(e)
        if report["health"] != 200:
            failures.append(f"/health after the run: {report['health']}")
        if args.probe and idle is not None:
            try:
                t_free, note = await disconnect_probe(http, args.idle_timeout)
            except httpx.HTTPError as e:
                t_free, note = None, repr(e)
            report["probe_free_s"], report["probe_note"] = t_free, note
            if t_free is None:
                failures.append(f"disconnect probe: {note}")
    sampler.cancel()
    if pid is not None:
        end = rss_mib(pid)
        if end is not None:
            rss.append((time.monotonic() - t_start, end, sum(stats.completed.values())))
        warm = [(t, v) for t, v, n in rss if t >= args.warmup and n >= args.warmup_requests]
        if warm and end is not None:
            report["rss_warm_at"], report["rss_start"] = warm[0]
            report["rss_end"] = end
            report["rss_peak"] = max(v for _, v, _ in rss)
            report["rss_first"] = rss[0][1]
            report["rss_timeline"] = [(t, v) for t, v, _ in rss[::15]]
            growth = end / warm[0][1] - 1
            report["rss_growth"] = growth
            if growth > args.rss_limit:
                failures.append(f"RSS grew {growth:+.1%} (limit {args.rss_limit:.0%}): "
                                f"{warm[0]:.0f} -> {end:.0f} MiB")
        else:
            failures.append("no RSS sample after the warm-up (too few streams completed?)")
    return stats, report, failures


def summary(args, stats: Stats, report: dict, failures: list[str]) -> None:
    secs = report["seconds"]
    n_done = sum(stats.completed.values())
    routes = ", ".join(f"{k} {v}" for k, v in sorted(stats.completed.items()))
    n5xx = sum(v for k, v in stats.statuses.items() if k >= 500)
    print(f"\n{args.clients} clients ({report['n_leave']} leaving mid-stream), {secs:.0f} s "
          f"(duration {args.duration:.0f} s + draining)")
    print(f"  requests: {stats.started} started, {n_done} complete and well formed ({routes}), "
          f"{stats.disconnects} disconnected mid-stream, {len(stats.errors)} errors")
    print(f"  statuses: {dict(sorted(stats.statuses.items()))}; 5xx: {n5xx}; "
          f"finish: {dict(sorted(stats.finishes.items()))}")
    print(f"  tokens: {stats.tokens} in complete streams ({stats.tokens / secs:.1f} tokens/s "
          f"aggregate), {stats.chunks} chunks received in all")
    if stats.ttft:
        q = statistics.quantiles(stats.ttft, n=20) if len(stats.ttft) > 1 else stats.ttft * 19
        d = statistics.quantiles(stats.durations, n=20) if len(stats.durations) > 1 \
            else stats.durations * 19
        print(f"  time to first token: median {statistics.median(stats.ttft):.2f} s, p95 "
              f"{q[18]:.2f} s; request time: median {statistics.median(stats.durations):.2f} s, "
              f"p95 {d[18]:.2f} s")
    idle = report.get("idle_after_s")
    print(f"  slots idle {'after %.2f s' % idle if idle is not None else 'NOT reached'}; "
          f"/health {report.get('health')}", end="")
    if "probe_free_s" in report:
        p = report["probe_free_s"]
        print(f"; probe: slot freed {'%.2f s' % p if p is not None else 'NEVER'} after the "
              f"client left {report.get('probe_note', '')}", end="")
    print()
    if "rss_start" in report:
        print(f"  server RSS: {report['rss_first']:.0f} MiB at the first sample, "
              f"{report['rss_start']:.0f} MiB after the warm-up ({report['rss_warm_at']:.0f} s), "
              f"{report['rss_end']:.0f} MiB at the end ({report['rss_growth']:+.1%}), "
              f"peak {report['rss_peak']:.0f} MiB")
        print("  RSS timeline: " + ", ".join(f"{t:.0f} s {v:.0f}" for t, v in
                                             report["rss_timeline"]) + " MiB")
    for e in stats.errors[:10]:
        print("  error:", e)
    if len(stats.errors) > 10:
        print(f"  ... {len(stats.errors) - 10} more errors")
    for f in failures:
        print("  FAILED:", f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", default="smollm2-135m")
    ap.add_argument("--url", help="a running llama-server (then --pid for its RSS)")
    ap.add_argument("--pid", type=int, help="the running server's process id (with --url)")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--duration", type=float, default=120, help="seconds of load")
    ap.add_argument("--disconnect-fraction", type=float, default=0.2)
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-c", "--ctx-size", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=0, help="server -t (0: its default)")
    ap.add_argument("--warmup", type=float, default=15,
                    help="seconds into the run of the RSS baseline (capped at duration / 4)")
    ap.add_argument("--warmup-requests", type=int, default=None,
                    help="complete streams before the RSS baseline (default: -np)")
    ap.add_argument("--rss-limit", type=float, default=0.10, help="allowed RSS growth")
    ap.add_argument("--read-timeout", type=float, default=300,
                    help="longest wait for the headers or one chunk before a request counts as "
                         "hung (a stream starts once its prompt is decoded: queued requests wait)")
    ap.add_argument("--grace", type=float, default=300,
                    help="seconds after the duration for in-flight requests to end")
    ap.add_argument("--idle-timeout", type=float, default=5,
                    help="seconds for the slots to become idle after the run / the probe")
    ap.add_argument("--no-probe", dest="probe", action="store_false",
                    help="skip the disconnect probe after the run")
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", type=Path, help="the started server's log file")
    args = ap.parse_args()
    args.warmup = min(args.warmup, args.duration / 4)
    if args.warmup_requests is None:
        args.warmup_requests = args.parallel

    proc = None
    if args.url:
        url, pid = args.url.rstrip("/"), args.pid
        if not url.startswith(("http://127.0.0.1", "http://localhost", "http://[::1]")):
            sys.exit("--url must be a loopback address")
    else:
        log = args.log or Path(tempfile.mkdtemp(prefix="llamacpy-load-")) / "server.log"
        t0 = time.monotonic()
        proc, url = start_server(args, log)
        pid = proc.pid
        print(f"server ready after {time.monotonic() - t0:.1f} s (log: {log})", flush=True)
    code = 0
    try:
        stats, report, failures = asyncio.run(run(args, url, pid))
    finally:
        if proc is not None:
            code = stop_server(proc)
    if proc is not None and code != 0:
        failures.append(f"the server exited with status {code} on SIGTERM")
    n5xx = sum(v for k, v in stats.statuses.items() if k >= 500)
    if n5xx:
        failures.append(f"{n5xx} 5xx answers")
    if stats.errors:
        failures.append(f"{len(stats.errors)} request errors (malformed, non-200 or hung)")
    if not sum(stats.completed.values()):
        failures.append("no request completed")
    summary(args, stats, report, failures)
    if proc is not None:
        print(f"  server exit status on SIGTERM: {code}")
    print("FAILED" if failures else "OK")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
