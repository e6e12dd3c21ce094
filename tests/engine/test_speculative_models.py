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
from llamacpy.tokenizer import Tokenizer

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


def test_draft_model_greedy_identical_and_vocab_checked(model_paths):
    """-md: SmolLM2 drafting for itself (same vocabulary, so every greedy guess is right
    unless batched and single-row logits disagree) gives the target's greedy tokens; a draft
    with another vocabulary is refused as llama.cpp refuses it."""
    from llamacpy.engine.draft_model import build_speculator
    from llamacpy.engine.speculative import SpecConfig

    path = str(model_paths["smollm2-135m"])
    llm = Llama(path, n_ctx=1024, verbose=False)
    tokens = edit_prompt(llm)
    plain, _ = greedy(llm, tokens, None, 60)
    spec = build_speculator(SpecConfig(draft_model=path, n_max=4), llm._tokenizer, 1024, 1)
    out, timings = greedy(llm, tokens, spec, 60)
    assert out == plain
    assert spec.types == ["draft-simple"] and timings["draft_n"] >= 4 * 10
    assert timings["draft_n_accepted"] >= 0.9 * timings["draft_n"]
    # p_min above any probability: no drafts at all
    none = build_speculator(SpecConfig(draft_model=path, p_min=1.01), llm._tokenizer, 1024, 1)
    out, timings = greedy(llm, tokens, none, 10)
    assert out == plain[:10] and "draft_n" not in timings
    qwen = Tokenizer.from_gguf(str(model_paths["qwen2.5-coder-0.5b"]))
    with pytest.raises(ValueError, match="draft model vocab"):
        build_speculator(SpecConfig(draft_model=path), qwen, 1024, 1)


def test_draft_model_reads_the_prompt_with_the_prompt(model_paths):
    """As llama.cpp's common_speculative_process: the draft model decodes the prompt right after
    the target does, before the first token is sampled, so the first draft decodes only the
    sampled token and the draft's pass counts as prompt time."""
    from llamacpy.engine.draft_model import build_speculator
    from llamacpy.engine.speculative import SpecConfig

    path = str(model_paths["smollm2-135m"])
    llm = Llama(path, n_ctx=1024, verbose=False)
    tokens = edit_prompt(llm)
    spec = build_speculator(SpecConfig(draft_model=path, n_max=3), llm._tokenizer, 1024, 1)
    calls = []
    for name, ctx in (("target", llm._scheduler.ctx), ("draft", spec.drafters[0].ctx)):
        ctx.decode = lambda b, name=name, f=ctx.decode: calls.append((name, len(b))) or f(b)
    out, timings = greedy(llm, tokens, spec, 8)
    assert calls[:3] == [("target", len(tokens)), ("draft", len(tokens)), ("draft", 1)]
    assert timings["draft_n"] > 0 and len(out) == 8
