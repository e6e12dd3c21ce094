"""Speculative decoding on the catalogue models: an edit-style request (rewrite a code block with
one rename) generates the same greedy tokens with and without n-gram drafts, most drafts are
accepted, and the verification steps were batched."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamacpy import Llama
from llamacpy.engine.prompt import Prompt
from llamacpy.engine.sequence import Request
from llamacpy.engine.speculative import NgramSimple, Speculator
from llamacpy.sampling import SamplingParams

CODE = (Path(__file__).parents[2] / "llamacpy/engine/context.py").read_text()
CODE = CODE[CODE.index("def ubatch_bounds"):][:900]
ASK = ("Rewrite this Python code, renaming the variable `stop` to `end`. Reply with the whole "
       f"code only.\n```python\n{CODE}```")


def edit_prompt(llm: Llama) -> list[int]:
    text = llm.chat_template().render([{"role": "user", "content": ASK}],
                                      add_generation_prompt=True)
    return llm.tokenize(text.encode(), add_bos=True, special=True)


def greedy(llm: Llama, tokens: list[int], speculator, n: int) -> tuple[list[int], dict]:
    sched = llm._scheduler
    sched.speculator = speculator
    sched.slots[0].forget()
    req = Request(Prompt(list(tokens)), SamplingParams(temperature=0.0), n_predict=n)
    events = list(sched.generate(req))
    assert events[-1]["type"] == "done", events[-1]
    return [e["token"] for e in events if e["type"] == "token"], events[-1]["timings"]


@pytest.mark.parametrize("name,size_n,size_m", [
    ("qwen2.5-coder-0.5b", 12, 48),  # llama.cpp's defaults
    ("qwen2.5-coder-0.5b", 3, 8),
    ("smollm2-135m", 4, 8),
    ("gemma3-270m", 4, 8),
])
def test_greedy_identical_with_ngram_drafts(model_paths, name, size_n, size_m):
    llm = Llama(str(model_paths[name]), n_ctx=1024, verbose=False)
    tokens = edit_prompt(llm)
    plain, _ = greedy(llm, tokens, None, 120)
    calls = []
    forward = llm._model.forward
    llm._model.forward = lambda b, c: calls.append(len(b)) or forward(b, c)
    spec, timings = greedy(llm, tokens, Speculator([NgramSimple(size_n, size_m)]), 120)
    assert spec == plain
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0
    assert max(calls[1:]) > 1 and len(calls) < len(plain)  # drafts verified in batched steps
