"""Llama(draft_model=...): llama-cpp-python's LlamaPromptLookupDecoding (the same drafts as
its own code) and any LlamaDraftModel callable; greedy completions are unchanged by them."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy import Llama, LlamaDraftModel, LlamaPromptLookupDecoding

CODE = "def add(a, b):\n    total = a + b\n    return total\n\n" * 3
PROMPT = f"Here is some code:\n{CODE}The same code again:\n"


def test_prompt_lookup_matches_llama_cpp_python():
    ref = pytest.importorskip("llama_cpp.llama_speculative").LlamaPromptLookupDecoding
    rng = np.random.default_rng(0)
    for _ in range(200):
        ids = rng.integers(0, 5, int(rng.integers(1, 30))).astype(np.intc)
        n, k = int(rng.integers(1, 4)), int(rng.integers(1, 8))
        ours = LlamaPromptLookupDecoding(n, k)(ids)
        assert np.array_equal(ours, ref(n, k)(ids)), (ids, n, k)


@pytest.fixture(scope="module")
def model(model_paths):
    return str(model_paths["smollm2-135m"])


def test_prompt_lookup_keeps_greedy_output(model):
    plain = Llama(model, n_ctx=512, verbose=False)
    spec = Llama(model, n_ctx=512, verbose=False,
                 draft_model=LlamaPromptLookupDecoding(num_pred_tokens=8))
    a = plain(PROMPT, max_tokens=48, temperature=0)["choices"][0]["text"]
    b = spec(PROMPT, max_tokens=48, temperature=0)["choices"][0]["text"]
    assert a == b and spec._scheduler.speculator.stats.n_accepted > 0


def test_custom_draft_model_is_called(model):
    class Wrong(LlamaDraftModel):  # guesses a fixed token: always rejected, output unchanged
        calls = 0

        def __call__(self, input_ids, /, **kwargs):
            Wrong.calls += 1
            return np.array([13, 13], np.intc)

    plain = Llama(model, n_ctx=512, verbose=False)
    spec = Llama(model, n_ctx=512, verbose=False, draft_model=Wrong())
    a = plain(PROMPT, max_tokens=16, temperature=0)
    b = spec(PROMPT, max_tokens=16, temperature=0)
    assert a["choices"][0]["text"] == b["choices"][0]["text"]
    assert Wrong.calls >= b["usage"]["completion_tokens"] - 2 > 0  # all but the last steps
