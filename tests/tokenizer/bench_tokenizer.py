"""Tokenizer speed: load time and ms per 2,000-character paragraph for the catalogue models, with
llama.cpp's time on the same text when llama-cpp-python is installed.

usage: python -m tests.tokenizer.bench_tokenizer [MODEL_NAME ...]

Load is the best wall time of three (open the GGUF, build the vocab, first call). "cold" clears
our word/piece cache before each run (every word is merged); "warm" repeats the same paragraph.
Tokenize times are CPU time of this process (time.process_time), best and median of the runs,
so that other processes on a shared machine do not distort them.
"""

from __future__ import annotations

import random
import statistics
import sys
import time

from llamacpy.format import open_gguf
from llamacpy.hub import CATALOG, pull
from llamacpy.tokenizer import Tokenizer
from tests.reference import llamacpp

PARAGRAPH = (
    "The quick brown fox jumps over the lazy dog. In 2024, researchers at the institute published "
    "a 35-page report on large language models, noting that tokenization, the step that splits "
    "text into pieces, often dominates latency for short prompts. \"It's not what you'd expect,\" "
    "said Dr. O'Neil, who has studied the problem since 1998. Their benchmark covered English, "
    "code such as `def f(x): return x*2`, and numbers like 3.14159 or 1,000,000. "
)


def paragraphs(n: int) -> list[str]:
    """n different 2,000-character paragraphs (shuffled words, some with digits appended)."""
    words = (PARAGRAPH * 10).split(" ")
    out = []
    for k in range(n):
        rng = random.Random(k)
        w = list(words)
        rng.shuffle(w)
        out.append(" ".join(x + (str(rng.randint(0, 99)) if rng.random() < 0.3 else "")
                            for x in w)[:2000])
    return out


def cpu_ms(fn, runs) -> tuple[float, float]:
    times = []
    for arg in runs:
        start = time.process_time()
        fn(arg)
        times.append((time.process_time() - start) * 1e3)
    return min(times), statistics.median(times)


def bench(name: str) -> None:
    path = pull(name, quiet=True)
    loads = []
    for _ in range(3):  # wall time to a usable tokenizer: open the GGUF, build, first call
        start = time.perf_counter()
        tok = Tokenizer.from_gguf(open_gguf(path))
        tok.tokenize("warm up")
        loads.append(time.perf_counter() - start)
    load = min(loads)
    texts = paragraphs(20)

    def cold(text: str) -> None:
        getattr(tok.session, "_cache", {}).clear()  # WPM keeps no word cache
        tok.tokenize(text)

    c, w = cpu_ms(cold, texts), cpu_ms(tok.tokenize, [texts[0]] * 20)
    line = (f"{name:20s} load {load:.2f} s  cold {c[0]:.2f}/{c[1]:.2f} ms  "
            f"warm {w[0]:.2f}/{w[1]:.2f} ms")
    if llamacpp.available():
        from tests.tokenizer.llamacpp_ref import LlamaCppVocab

        ref = LlamaCppVocab(path)
        r = cpu_ms(lambda t: ref.tokenize(t.encode(), True, False), texts)
        line += f"  llama.cpp {r[0]:.2f}/{r[1]:.2f} ms"
    print(line + "  (best/median per 2,000 chars)")


def main() -> None:
    for name in sys.argv[1:] or list(CATALOG):
        bench(name)


if __name__ == "__main__":
    main()
