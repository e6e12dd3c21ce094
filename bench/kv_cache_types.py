"""Quantized KV cache (-ctk / -ctv): decode speed, KV memory and accuracy of each cache type
against the f16 cache, ours and llama.cpp's (llama-cpp-python) in the same run.

    python bench/kv_cache_types.py [MODEL] [-t 1] [-p 256] [-n 64] [-r 3] [--types f16 q8_0]
                                   [--kld-tokens 1024] [--kld-ubatch 512 1]

Decode: a P-token prompt, then N single-token decode steps (the text's own next tokens, so both
engines do the same work whatever they would sample), timed from the first step to the last;
rounds interleave the types and the engines after one warm-up each, and the figure is the median.
K/V types other than f16 run llama.cpp with flash_attn on (a quantized V needs it; f16 runs it
both ways). KV bytes: our cache arrays for n_ctx = P + N; llama.cpp's cells are ggml_row_size of
the same rows, the same bytes. KLD: teacher-forced logits of tests/golden/perplexity/text.txt in
512-token chunks (ubatch 512: the prompt path; ubatch 1: the decode kernels, over the first
--kld-decode-tokens tokens), mean KL(f16 cache || type) per token, for ours and for llama.cpp.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llamacpy.engine.context import Context  # noqa: E402
from llamacpy.format import open_gguf  # noqa: E402
from llamacpy.hub import resolve_model  # noqa: E402
from llamacpy.kernels import set_threads  # noqa: E402
from llamacpy.kernels.kv_quant import KV_TYPES, is_quantized  # noqa: E402
from llamacpy.memory.batch import Batch  # noqa: E402
from llamacpy.models import load_model  # noqa: E402
from llamacpy.tokenizer import Tokenizer  # noqa: E402
from tests.reference import llamacpp  # noqa: E402

TEXT = ROOT / "tests" / "golden" / "perplexity" / "text.txt"
CHUNK = 512


class Ours:
    name = "llamacpy"

    def __init__(self, model, type_k: str, type_v: str, n_ctx: int, n_ubatch: int = 512):
        self.ctx = Context(model, n_ctx=n_ctx, n_ubatch=n_ubatch, type_k=type_k, type_v=type_v)

    def reset(self) -> None:
        self.ctx.cache.clear()

    def prompt(self, tokens) -> None:
        self.ctx.decode(Batch.from_tokens(tokens))

    def step(self, token: int, pos: int) -> None:
        self.ctx.decode(Batch.from_tokens([token], pos0=pos))

    def logits(self, tokens) -> np.ndarray:
        return self.ctx.decode(Batch.from_tokens(tokens, all_logits=True))

    @property
    def kv_bytes(self) -> int:
        return self.ctx.cache.nbytes


class Theirs:
    name = "llama.cpp"

    def __init__(self, path, type_k: str, type_v: str, n_ctx: int, n_ubatch: int = 512,
                 flash_attn: bool = True, threads: int = 1):
        self.llm = llamacpp.load_llama(path, n_ctx=n_ctx, n_batch=512, n_ubatch=n_ubatch,
                                       n_threads=threads, n_threads_batch=threads,
                                       logits_all=True, type_k=int(KV_TYPES[type_k]),
                                       type_v=int(KV_TYPES[type_v]), flash_attn=flash_attn)

    def reset(self) -> None:
        self.llm.reset()

    def prompt(self, tokens) -> None:
        self.llm.eval(list(tokens))

    def step(self, token: int, pos: int) -> None:
        self.llm.eval([token])

    def logits(self, tokens) -> np.ndarray:
        self.llm.eval(list(tokens))
        return np.array(self.llm.scores[: len(tokens)], np.float32)


def decode_seconds(engine, tokens, n_prompt: int, n_gen: int) -> float:
    engine.reset()
    engine.prompt(tokens[:n_prompt])
    t0 = time.perf_counter()
    for i in range(n_gen):
        engine.step(int(tokens[n_prompt + i]), n_prompt + i)
    return time.perf_counter() - t0


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def teacher_forced(engine, tokens, n_tokens: int) -> np.ndarray:
    """log-probabilities float64 [n_tokens, n_vocab], in chunks of CHUNK tokens."""
    out = []
    for c0 in range(0, n_tokens, CHUNK):
        engine.reset()
        out.append(log_softmax(engine.logits(tokens[c0 : min(n_tokens, c0 + CHUNK)])))
    return np.concatenate(out)


def mean_kld(base: np.ndarray, other: np.ndarray) -> float:
    return float((np.exp(base) * (base - other)).sum(axis=-1).mean())


def bench_decode(args, model, path, tokens) -> dict:
    n_ctx = args.n_prompt + args.n_gen + 8
    engines = {}
    for t in args.types:
        engines[("llamacpy", t)] = Ours(model, t, t, n_ctx)
        if llamacpp.available():
            engines[("llama.cpp", t)] = Theirs(path, t, t, n_ctx, threads=args.threads)
            if not is_quantized(t):
                engines[("llama.cpp fa off", t)] = Theirs(path, t, t, n_ctx, flash_attn=False,
                                                          threads=args.threads)
    times = {k: [] for k in engines}
    for k, e in engines.items():  # warm-up: JIT, caches
        decode_seconds(e, tokens, args.n_prompt, min(8, args.n_gen))
    for _ in range(args.repetitions):
        for k, e in engines.items():
            times[k].append(decode_seconds(e, tokens, args.n_prompt, args.n_gen))
    ts = {k: args.n_gen / statistics.median(v) for k, v in times.items()}
    kv = {k: e.kv_bytes for k, e in engines.items() if isinstance(e, Ours)}
    del engines
    return {"tok_s": ts, "kv_bytes": kv}


def bench_kld(args, model, path, tokens) -> dict:
    result = {}
    for ubatch, n_tokens in ((512, args.kld_tokens), (1, args.kld_decode_tokens)):
        if ubatch not in args.kld_ubatch or n_tokens <= 0:
            continue
        makers = {"llamacpy": lambda t: Ours(model, t, t, CHUNK, ubatch)}
        if llamacpp.available():
            makers["llama.cpp"] = lambda t: Theirs(path, t, t, CHUNK, ubatch,
                                                   threads=args.threads)
        for who, make in makers.items():
            base = teacher_forced(make("f16"), tokens, n_tokens)
            for t in args.types:
                if t != "f16":
                    other = teacher_forced(make(t), tokens, n_tokens)
                    result[(who, ubatch, t)] = mean_kld(base, other)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", nargs="?", default="qwen2.5-coder-0.5b")
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("-p", "--n-prompt", type=int, default=256)
    p.add_argument("-n", "--n-gen", type=int, default=64)
    p.add_argument("-r", "--repetitions", type=int, default=3)
    p.add_argument("--types", nargs="+", default=["f16", "q8_0"])
    p.add_argument("--kld-tokens", type=int, default=1024)
    p.add_argument("--kld-decode-tokens", type=int, default=128)
    p.add_argument("--kld-ubatch", type=int, nargs="+", default=[512, 1])
    p.add_argument("--skip-decode", action="store_true")
    args = p.parse_args()
    set_threads(args.threads)
    path = resolve_model(args.model)
    gguf = open_gguf(path)
    model, tok = load_model(gguf), Tokenizer.from_gguf(gguf)
    tokens = tok.tokenize(TEXT.read_text(), add_special=True)
    print(f"# {path.name}, {args.threads} thread(s), {platform.processor() or platform.machine()}"
          f", {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    if not args.skip_decode:
        d = bench_decode(args, model, path, tokens)
        base = d["tok_s"][("llamacpy", "f16")]
        print(f"\n## decode, pp{args.n_prompt} then tg{args.n_gen}, median of "
              f"{args.repetitions}\n| engine | K/V | tok/s | vs our f16 | KV MiB |")
        print("| --- | --- | ---: | ---: | ---: |")
        for (who, t), v in d["tok_s"].items():
            kv = d["kv_bytes"].get((who, t))
            kv_s = f"{kv / 2**20:.2f}" if kv is not None else ""
            print(f"| {who} | {t} | {v:.2f} | {v / base:.3f} | {kv_s} |")
    kld = bench_kld(args, model, path, tokens)
    if kld:
        print("\n## teacher-forced mean KLD against the f16 cache\n| engine | ubatch | K/V | "
              "tokens | mean KLD |\n| --- | ---: | --- | ---: | ---: |")
        for (who, ub, t), v in kld.items():
            n = args.kld_tokens if ub == 512 else args.kld_decode_tokens
            print(f"| {who} | {ub} | {t} | {n} | {v:.3e} |")


if __name__ == "__main__":
    main()
