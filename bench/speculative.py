"""Speculative decoding speed on an edit-style task: the model rewrites a ~300-token code block
with one rename, greedy; decode tokens/s with and without n-gram drafts (ngram-simple with
llama.cpp's defaults and shorter settings), acceptance rate, and whether the text is the same.

    python bench/speculative.py [MODEL] [-t 1] [-n 320] [-r 3] [--ngram N:M ...]
        [-md DRAFT [--draft-max N ...] [--draft-vocab N ...]]

Rounds interleave the configurations; each generation is timed from its first token to its last
(timings' predicted_ms: the target's prompt does not count), after one warm-up of each. A draft
model keeps the prompt in its cache from run to run unless --fresh-draft. Prints medians,
the ratio to the plain decode, acceptance (draft_n_accepted / draft_n), tokens per step and the
prompt's time (a draft model reads the prompt as part of it, as llama.cpp's does).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llamacpy import Llama  # noqa: E402
from llamacpy.engine.draft_model import build_speculator  # noqa: E402
from llamacpy.engine.prompt import Prompt  # noqa: E402
from llamacpy.engine.sequence import Request  # noqa: E402
from llamacpy.engine.speculative import NgramSimple, SpecConfig, Speculator  # noqa: E402
from llamacpy.hub import resolve_model  # noqa: E402
from llamacpy.sampling import SamplingParams  # noqa: E402

SOURCE = (ROOT / "llamacpy" / "engine" / "context.py").read_text()
CODE = SOURCE[SOURCE.index("    def decode(self"):SOURCE.index("def runs(")]
ASK = ("Rewrite this Python method with two changes: rename it from `decode` to `run_batch`, "
       "and rename the local variable `outputs` to `results` everywhere. Reply with the whole "
       f"code only.\n```python\n{CODE}```")


def edit_prompt(llm: Llama) -> list[int]:
    text = llm.chat_template().render([{"role": "user", "content": ASK}],
                                      add_generation_prompt=True)
    return llm.tokenize(text.encode(), add_bos=True, special=True)


def generate(llm: Llama, prompt: list[int], speculator, n: int,
             fresh_draft: bool = False) -> tuple[list[int], dict]:
    sched = llm._scheduler
    sched.speculator = speculator
    sched.slots[0].forget()  # each run reads the prompt again: the same state for every config
    for drafter in speculator.drafters if speculator and fresh_draft else []:
        for slot in getattr(drafter, "slots", []):  # a draft model reads the prompt again too
            slot.forget()
    req = Request(Prompt(list(prompt)), SamplingParams(temperature=0.0), n_predict=n)
    events = list(sched.generate(req))
    return [e["token"] for e in events if e["type"] == "token"], events[-1]["timings"]


def configs(args, llm: Llama) -> dict:
    out = {"none": None}
    for spec in args.ngram:
        n, m = (int(v) for v in spec.split(":"))
        out[f"ngram-simple {n}/{m}"] = lambda n=n, m=m: Speculator([NgramSimple(n, m)])
    for n_max in args.draft_max if args.model_draft else []:
        for vocab in args.draft_vocab:
            cfg = SpecConfig(draft_model=str(resolve_model(args.model_draft)), n_max=n_max,
                             draft_vocab=vocab)
            out[f"draft n_max {n_max} vocab {vocab or 'all'}"] = lambda cfg=cfg: \
                build_speculator(cfg, llm._tokenizer, llm.n_ctx(), 1, args.threads, args.threads)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model", nargs="?", default="qwen2.5-coder-0.5b")
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("-n", type=int, default=320)
    p.add_argument("-r", "--rounds", type=int, default=3)
    p.add_argument("--ngram", nargs="*", default=["12:48", "12:16", "4:8", "4:16"],
                   help="ngram-simple size_n:size_m settings (llama.cpp's default 12:48)")
    p.add_argument("-md", "--model-draft")
    p.add_argument("--draft-max", type=int, nargs="*", default=[3],
                   help="draft lengths to try with -md (llama.cpp's default 3)")
    p.add_argument("--draft-vocab", type=int, nargs="*", default=[32768],
                   help="draft heads to try with -md: ids covered (0: all; default 32768)")
    p.add_argument("--fresh-draft", action="store_true",
                   help="a draft model forgets its cache before each run and reads the prompt "
                        "again, as part of the prompt's time (as llama.cpp's does); by default "
                        "it keeps the prompt from the last run, as a cached prompt would")
    p.add_argument("--show", action="store_true", help="print the generated text")
    args = p.parse_args()
    llm = Llama(str(resolve_model(args.model)), n_ctx=2048, n_threads=args.threads,
                n_threads_batch=args.threads, verbose=False)
    prompt = edit_prompt(llm)
    runs = configs(args, llm)
    speculators = {name: make() if make else None for name, make in runs.items()}
    for name, spec in speculators.items():  # warm-up: every kernel shape compiled
        generate(llm, prompt, spec, 24)
    results: dict[str, list[dict]] = {name: [] for name in runs}
    texts: dict[str, list[int]] = {}
    for _ in range(args.rounds):
        for name, spec in speculators.items():
            tokens, t = generate(llm, prompt, spec, args.n, args.fresh_draft)
            texts[name], _ = tokens, results[name].append(t)
    report(args, prompt, results, texts)
    if args.show:
        print(llm.detokenize(texts["none"]).decode(errors="replace"))


def report(args, prompt, results, texts) -> None:
    print(f"model {args.model}, {args.threads} thread(s), prompt {len(prompt)} tokens, "
          f"{len(texts['none'])} generated, {args.rounds} rounds (medians)")
    base = statistics.median(t["predicted_per_second"] for t in results["none"])
    print(f"{'config':<30} {'tok/s':>7} {'ratio':>6} {'accept':>7} {'tok/step':>8} "
          f"{'prompt ms':>9} same")
    for name, ts in results.items():
        tps = statistics.median(t["predicted_per_second"] for t in ts)
        prompt_ms = statistics.median(t["prompt_ms"] for t in ts)  # a draft's pass included
        t = ts[-1]
        drafted, ok = t.get("draft_n", 0), t.get("draft_n_accepted", 0)
        steps = t["predicted_n"] - ok  # each step gives one sampled token beyond the accepted
        accept = f"{ok / drafted:.1%}" if drafted else "-"
        print(f"{name:<30} {tps:7.2f} {tps / base:5.2f}x {accept:>7} "
              f"{t['predicted_n'] / max(steps, 1):8.2f} {prompt_ms:9.0f} "
              f"{texts[name] == texts['none']}")


if __name__ == "__main__":
    main()
