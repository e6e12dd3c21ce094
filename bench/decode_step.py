"""Where a decode step's time goes: llamacpy's matmuls, attention and the Python glue around them,
against llama.cpp's whole decode step on the same model, measured in the same run.

    python bench/decode_step.py MODEL [-t 1] [-n 64] [--ctx 512]

Each llamacpy kernel call is timed by wrapping the model's Linear layers, the attention kernel, the
norms, rope, activations and the KV-cache store; "glue" is the step time minus all of those
(residual adds, reshapes, batch bookkeeping, Python between the calls).
llama.cpp's step is timed through llama-cpp-python's eval([token]) after a prompt of the same
length, interleaved with ours.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Timed:
    """Wraps a callable and adds its wall time to totals[label]."""

    def __init__(self, fn, label: str, totals: dict):
        self.fn, self.label, self.totals = fn, label, totals

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = self.fn(*args, **kwargs)
        self.totals[self.label] += time.perf_counter() - t0
        return out

    def gated(self, *args):
        """Linear.gated (a gated FFN's up projection and its activation), timed as the call."""
        t0 = time.perf_counter()
        out = self.fn.gated(*args)
        self.totals[self.label] += time.perf_counter() - t0
        return out

    def __getattr__(self, name):
        return getattr(self.fn, name)


def instrument(model, totals: dict, cache=None) -> None:
    from llamacpy.models import base, gemma3, llama

    model.output = Timed(model.output, "matmul output", totals)
    for layer in model.layers:
        att, ffn = layer.attention, layer.ffn
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            setattr(att, name, Timed(getattr(att, name), "matmul attention", totals))
        for name in ("ffn_gate", "ffn_up", "ffn_down"):
            setattr(ffn, name, Timed(getattr(ffn, name), "matmul ffn", totals))
        ffn.activation = Timed(ffn.activation, "activation", totals)  # where not in ffn_up.gated
    base.attend_segment = Timed(base.attend_segment, "attention", totals)
    base.attend_seqs = Timed(base.attend_seqs, "attention", totals)  # one row per sequence
    for module in (base, llama, gemma3):  # each model file imported the ops by name
        for name, label in (("rms_norm", "rms norms"), ("apply_rope", "rope")):
            if hasattr(module, name):
                setattr(module, name, Timed(getattr(module, name), label, totals))
    if cache is not None:
        cache.store = Timed(cache.store, "kv cache store", totals)
        cache.store_rows = Timed(cache.store_rows, "kv cache store", totals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--steps", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=512, help="prompt length before the steps")
    args = ap.parse_args()

    from llamacpy.memory.batch import Batch
    from llamacpy.engine.context import Context
    from llamacpy.format import open_gguf
    from llamacpy.hub import resolve_model
    from llamacpy.kernels import set_threads
    from llamacpy.models import load_model
    from tests.reference.llamacpp import load_llama

    path = resolve_model(args.model)
    set_threads(args.threads)
    model = load_model(open_gguf(path))
    ctx = Context(model, n_ctx=args.ctx + args.steps + 8)
    ref = load_llama(path, n_ctx=args.ctx + args.steps + 8, n_threads=args.threads,
                     n_threads_batch=args.threads)
    rng = np.random.default_rng(0)
    prompt = [int(t) for t in rng.integers(100, model.args.n_vocab - 100, args.ctx)]
    ctx.decode(Batch.from_tokens(prompt))
    ref.eval(prompt)
    for i in range(4):  # warm-up steps
        ctx.decode(Batch.from_tokens([5], pos0=args.ctx + i))
        ref.eval([5])
    totals: dict = defaultdict(float)
    instrument(model, totals, ctx.cache)
    ours, theirs = [], []
    for i in range(4, args.steps):
        t0 = time.perf_counter()
        ctx.decode(Batch.from_tokens([5], pos0=args.ctx + i))
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref.eval([5])
        theirs.append(time.perf_counter() - t0)
    report(args, path, totals, ours, theirs)


def report(args, path, totals, ours, theirs) -> None:
    n = len(ours)
    step, ref_step = statistics.median(ours), statistics.median(theirs)
    kernel = sum(totals.values()) / n
    print(f"{Path(path).name}, {args.threads} thread(s), {args.ctx} tokens in context, "
          f"{n} steps (medians per step)")
    print("| part | ms per token |\n|---|---:|")
    for label in sorted(totals):
        print(f"| {label} | {totals[label] / n * 1000:.2f} |")
    matmuls = sum(v for k, v in totals.items() if k.startswith("matmul")) / n
    print(f"| glue (residuals, reshapes, bookkeeping) | {(step - kernel) * 1000:.2f} |")
    print(f"| **llamacpy step** | **{step * 1000:.2f}** |")
    print(f"| **llama.cpp step** | **{ref_step * 1000:.2f}** |")
    print(f"\nllamacpy matmuls alone: {matmuls * 1000:.2f} ms = {ref_step / matmuls:.2f}x the speed "
          f"of llama.cpp's whole step; whole step ratio {ref_step / step:.2f}x")


if __name__ == "__main__":
    main()
