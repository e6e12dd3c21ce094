"""Greedy 64-token continuations against llama.cpp's (tests/golden/greedy_golden.json, from
tests/reference/make_greedy_golden.py).

Identical texts are a figure, not a contract: llama.cpp itself changes 3-9 of 10 such texts when
only its KV cache type changes, and its 8-bit activations put its top-1 token off the exact
model's at about 1 position in 20, so 64-token texts often part ways. What must hold is that
they part only at near-ties: where the texts first differ, llama.cpp's token must be within a
small logit margin of ours. The count of identical texts is printed as the figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamacpy.memory.batch import Batch
from llamacpy.engine.context import Context
from llamacpy.models import load_model

GOLDEN = json.loads((Path(__file__).parent.parent / "golden" / "greedy_golden.json").read_text())


NEAR_TIE = 0.5  # logits; llama.cpp's activation rounding moves logits by ~0.1-0.3


def greedy(ctx: Context, prompt: list[int], n: int, eos: int) -> list[int]:
    ctx.cache.clear()
    logits = ctx.decode(Batch.from_tokens(prompt))[-1]
    out = []
    while len(out) < n:
        tok = int(np.argmax(logits))
        if tok == eos:
            break
        out.append(tok)
        logits = ctx.decode(Batch.from_tokens([tok], pos0=len(prompt) + len(out) - 1))[-1]
    return out


@pytest.mark.parametrize("name", list(GOLDEN))
def test_greedy_agreement(name, real_models):
    g = real_models[name]
    ctx = Context(load_model(g), n_ctx=512)
    eos = int(g.metadata["tokenizer.ggml.eos_token_id"])
    same, first_diff, gaps = 0, [], []
    for run in GOLDEN[name]:
        ours = greedy(ctx, run["prompt_tokens"], 64, eos)
        same += ours == run["tokens"]
        d = next((i for i, (a, b) in enumerate(zip(ours, run["tokens"])) if a != b), None)
        first_diff.append(64 if d is None else d)
        if d is not None:  # how close to a tie was our choice at the parting point?
            ctx.cache.clear()
            logits = ctx.decode(Batch.from_tokens(run["prompt_tokens"] + ours[:d]))[-1]
            gaps.append(float(logits[ours[d]] - logits[run["tokens"][d]]))
    print(f"{name}: {same}/10 greedy continuations identical to llama.cpp's; first difference "
          f"at token {first_diff}; our logit margin there {[round(g, 3) for g in gaps]}")
    assert all(g <= NEAR_TIE for g in gaps), f"{name}: parted at a clear choice: {gaps}"
