"""Constrained decoding speed: generation tokens/s under a grammar against free generation, on
the same prompt and the same number of tokens, measured in one run.

    python bench/grammar_speed.py [MODEL] [-t 1] [-n 128] [-r 5] [--grammar schema|json.gbnf]
                                  [--server-threads 2] [--server-n 96] [--no-server]
                                  [--no-in-process]

In process (`Llama`, -t threads): one warm-up constrained generation fixes its token count k
(the seed is the same every round, so every constrained round generates the same k tokens);
then rounds alternate a constrained and a free generation of k tokens (free: ignore_eos). Each
is timed from its first token to its last, so the cached prompt does not count and the grammar's
whole cost does: the mask (llguidance), unpacking it, the masked logits and the sampler.

Server (`llama-server -np 2 -t T`): two concurrent /completion requests whose slots hold two
different JSON schemas in one batch, against two free streams (ignore_eos), same prompts and
token limit; aggregate tokens/s = tokens of both / wall time of the pair.

Prints medians and the constrained / free ratio for both (and the median of each round's own
ratio, steadier when other work comes and goes), and the CPU's pressure
(/proc/pressure/cpu) over the run, since other work on a shared machine moves the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.server.conftest import start_server, stop_server  # noqa: E402

CITIES = {"type": "array", "minItems": 40, "maxItems": 40, "items": {
    "type": "object", "required": ["city", "country", "population"], "properties": {
        "city": {"type": "string", "maxLength": 16}, "country": {"type": "string", "maxLength": 16},
        "population": {"type": "integer", "minimum": 0}}}}
PEOPLE = {"type": "array", "minItems": 40, "maxItems": 40, "items": {
    "type": "object", "required": ["name", "age", "email"], "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email", "maxLength": 32}}}}


def chatml(task: str) -> str:
    return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            f"{task}<|im_end|>\n<|im_start|>assistant\n")


PROMPT = chatml("List forty large cities as a JSON array of objects with city, country and "
                "population.")
PEOPLE_PROMPT = chatml("List forty people as a JSON array of objects with name, age and email.")


def pressure() -> float:
    """The 'some' CPU pressure over the last 60 s (percent of time a task waited for a CPU)."""
    try:
        with open("/proc/pressure/cpu") as fh:
            return float(fh.readline().split()[2].split("=")[1])
    except OSError:
        return float("nan")


def cpu_name() -> str:
    import subprocess
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    name = next((ln.split(":", 1)[1].strip() for ln in out.splitlines()
                 if ln.startswith("Model name")), "?")
    flags = open("/proc/cpuinfo").read().split("flags", 2)[1].split("\n")[0].split()
    simd = [f for f in ("avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")
            if f in flags]
    return f"{name} ({', '.join(simd)})"


# -- in process -----------------------------------------------------------------------------

def generate(llm, tokens: list[int], n: int, grammar, seed: int) -> tuple[int, float]:
    """(tokens generated, tokens/s from the first token to the last)."""
    from llamacpy.engine.prompt import Prompt
    from llamacpy.engine.sequence import Request
    from llamacpy.sampling import SamplingParams
    mask = grammar.mask(llm.tokenizer()) if grammar is not None else None
    request = Request(Prompt(tokens), SamplingParams(temperature=0.7, seed=seed), n_predict=n,
                      ignore_eos=grammar is None, token_mask=mask)
    t_first, count = None, 0
    for event in llm._scheduler.generate(request):
        if event["type"] == "error":
            raise RuntimeError(event["message"])
        if event["type"] == "token":
            count += 1
            if t_first is None:
                t_first = time.perf_counter()
        if event["type"] == "done":
            elapsed = time.perf_counter() - t_first
            return event["n_decoded"], (count - 1) / elapsed


def in_process(model: str, threads: int, n: int, rounds: int, which: str) -> dict:
    from llamacpy import Llama
    from llamacpy.grammar import Grammar
    from tests.grammar.vectors import gbnf_files
    grammar = (Grammar.from_gbnf(gbnf_files()["json.gbnf"]) if which == "json.gbnf"
               else Grammar.from_json_schema(CITIES))
    llm = Llama(model, n_ctx=1024, n_threads=threads, verbose=False)
    tokens = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
    k, _ = generate(llm, tokens, n, grammar, seed=1)  # warm-up; fixes k
    generate(llm, tokens, k, None, seed=1)
    rates = {"constrained": [], "free": []}
    for r in range(rounds):
        order = [("constrained", grammar), ("free", None)]
        for kind, g in order if r % 2 == 0 else order[::-1]:
            got, rate = generate(llm, tokens, k, g, seed=1)
            assert got == k, (kind, got, k)
            rates[kind].append(rate)
    return {"k": k, **{kind: statistics.median(v) for kind, v in rates.items()}, "all": rates}


# -- server ---------------------------------------------------------------------------------

def post(url: str, body: dict) -> dict:
    r = httpx.post(f"{url}/completion", json=body, timeout=600)
    r.raise_for_status()
    return r.json()


def pair(url: str, pool: ThreadPoolExecutor, n: int, constrained: bool) -> float:
    bodies = []
    for prompt, schema in ((PROMPT, CITIES), (PEOPLE_PROMPT, PEOPLE)):
        body = {"prompt": prompt, "n_predict": n, "temperature": 0.7, "seed": 1}
        body.update({"json_schema": schema} if constrained else {"ignore_eos": True})
        bodies.append(body)
    t0 = time.perf_counter()
    done = list(pool.map(lambda b: post(url, b), bodies))
    elapsed = time.perf_counter() - t0
    return sum(d["tokens_predicted"] for d in done) / elapsed


def server(model: str, threads: int, n: int, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        srv = start_server(["-m", model, "-c", "2048", "-np", "2", "-t", str(threads)],
                           f"{tmp}/server.log")
        try:
            with ThreadPoolExecutor(2) as pool:
                pair(srv.url, pool, n, True)  # warm-up: prompts cached, grammars' first masks
                pair(srv.url, pool, n, False)
                rates = {"constrained": [], "free": []}
                for r in range(rounds):
                    for kind in (("constrained", "free") if r % 2 == 0
                                 else ("free", "constrained")):
                        rates[kind].append(pair(srv.url, pool, n, kind == "constrained"))
        finally:
            stop_server(srv)
    return {**{kind: statistics.median(v) for kind, v in rates.items()}, "all": rates}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default="qwen2.5-coder-0.5b")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", type=int, default=128, help="tokens per in-process generation")
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--grammar", choices=["schema", "json.gbnf"], default="schema")
    ap.add_argument("--server-threads", type=int, default=2)
    ap.add_argument("--server-n", type=int, default=96, help="tokens per server stream")
    ap.add_argument("--no-server", action="store_true")
    ap.add_argument("--no-in-process", action="store_true")
    args = ap.parse_args()
    from llamacpy.hub import resolve_model
    model = str(resolve_model(args.model))
    print(f"CPU: {cpu_name()}; model {Path(model).name}", flush=True)
    p0, t0 = pressure(), time.time()
    if not args.no_in_process:
        report_in_process(in_process(model, args.threads, args.n, args.rounds, args.grammar),
                          args)
    if not args.no_server:
        report_server(server(model, args.server_threads, args.server_n, args.rounds), args)
    print(f"CPU pressure (some, avg60): {p0:.0f}% at the start, {pressure():.0f}% at the end; "
          f"{time.time() - t0:.0f} s")


def rounds_text(rates: dict) -> str:
    pairs = [c / f for c, f in zip(rates["constrained"], rates["free"])]
    return (f"median of the rounds' own ratios {statistics.median(pairs):.3f}; rounds: "
            + json.dumps({k: [round(x, 2) for x in v] for k, v in rates.items()}))


def report_in_process(one: dict, args) -> None:
    print(f"in process, -t {args.threads}, {one['k']} tokens, {args.grammar}: constrained "
          f"{one['constrained']:.2f} tok/s, free {one['free']:.2f} tok/s, ratio "
          f"{one['constrained'] / one['free']:.3f}  (rounds: {rounds_text(one['all'])})",
          flush=True)


def report_server(two: dict, args) -> None:
    print(f"server -np 2 -t {args.server_threads}, 2 x {args.server_n} tokens, two schemas in "
          f"one batch: aggregate {two['constrained']:.2f} tok/s, two free streams "
          f"{two['free']:.2f} tok/s, ratio {two['constrained'] / two['free']:.3f}  (rounds: "
          f"{rounds_text(two['all'])})", flush=True)


if __name__ == "__main__":
    main()
