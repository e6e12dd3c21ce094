"""What a step of --spec-type draft-mtp costs on the Qwen3.5 stand-in with its MTP block
(bench/make_qwen35_standin.py --mtp): random weights make acceptance meaningless, so this
measures the mechanics and derives the acceptance a real model needs to gain.

    python bench/mtp_draft.py [MODEL] [-t THREADS] [-r REPEAT] [--n-draft 3] [--prompt 256]
                              [--draft-vocab 32768]

Per repeat, after a prompt: one plain decode step of the target; a draft of n tokens from the
MTP block (the catch-up of the one new position plus n chained block steps, each with the LM
head); the target's verification of 1 + n rows. Medians, milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT = Path.home() / ".cache" / "llama.cpp" / "qwen35-0.8b-random-mtp-q4_0.gguf"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=str(DEFAULT))
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--repeat", type=int, default=10)
    ap.add_argument("--n-draft", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--draft-vocab", type=int, default=32768,
                    help="ids the block's head covers besides those seen (0: all)")
    args = ap.parse_args()

    import numpy as np

    from llamacpy.engine.context import Context
    from llamacpy.engine.mtp_draft import MtpDrafter
    from llamacpy.format import open_gguf
    from llamacpy.kernels import set_threads
    from llamacpy.memory.batch import Batch
    from llamacpy.models import load_model

    set_threads(args.threads)
    model = load_model(open_gguf(args.model))
    ctx = Context(model, n_ctx=args.prompt + 8 * (args.repeat + 2) * (args.n_draft + 2))
    drafter = MtpDrafter(model, ctx.n_ctx_seq, 1, n_max=args.n_draft, vocab=args.draft_vocab)
    rng = np.random.default_rng(0)
    history = [int(t) for t in rng.integers(100, model.args.n_vocab - 100, args.prompt)]
    ctx.decode(Batch.from_tokens(history))
    t_first = time.perf_counter()
    drafter.draft(0, history + [history[-1]], args.n_draft)  # catches up on the whole prompt
    t_first = time.perf_counter() - t_first
    times: dict[str, list[float]] = {"target step (1 row)": [], "draft (catch-up + n steps)": [],
                                     "verify (1 + n rows)": []}
    for r in range(args.repeat + 1):
        sampled = int(rng.integers(100, 1000))
        t0 = time.perf_counter()
        ctx.decode(Batch.from_tokens([sampled], len(history)))
        t1 = time.perf_counter()
        history.append(sampled)
        sampled = int(rng.integers(100, 1000))
        draft = drafter.draft(0, history + [sampled], args.n_draft)
        t2 = time.perf_counter()
        rows = [sampled] + draft
        ctx.decode(Batch.from_tokens(rows, len(history), all_logits=True))
        t3 = time.perf_counter()
        history += rows  # as if every guess were taken
        if r:  # the first round compiles
            for key, dt in zip(times, (t1 - t0, t2 - t1, t3 - t2)):
                times[key].append(dt * 1e3)
    print(f"model: {Path(args.model).name}  threads: {args.threads}  prompt: {args.prompt}  "
          f"n-draft: {args.n_draft}  repeat: {args.repeat}")
    print(f"catch-up over the {args.prompt}-token prompt: {t_first * 1e3:.1f} ms")
    print("| part | ms (median) |\n|---|---:|")
    med = {k: statistics.median(v) for k, v in times.items()}
    for k, v in med.items():
        print(f"| {k} | {v:.2f} |")
    step, n = med["target step (1 row)"], args.n_draft
    spec_step = med["draft (catch-up + n steps)"] + med["verify (1 + n rows)"]
    print(f"a speculative step costs {spec_step / step:.2f} plain steps and yields 1 + the "
          f"accepted guesses (up to {n}): break-even at {spec_step / step - 1:.2f} accepted "
          f"per step; all {n} accepted: {(1 + n) * step / spec_step:.2f}x")


if __name__ == "__main__":
    main()
