"""--spec-draft-vocab: a drafter's output head over the first N ids and the ids the sequences
hold gives the full head's logits for those ids and -inf elsewhere, and speculation with it stays
lossless (the target verifies every draft) however small N is."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy import Llama
from llamacpy.engine.draft_model import build_speculator
from llamacpy.engine.draft_vocab import DraftVocabulary, draft_head
from llamacpy.engine.speculative import SpecConfig
from llamacpy.format import open_gguf
from llamacpy.models import load_model

from .test_speculative_models import edit_prompt, greedy


@pytest.fixture(scope="module")
def qwen(model_paths):
    return load_model(open_gguf(str(model_paths["qwen2.5-coder-0.5b"])))


def test_covered_ids_get_the_full_heads_logits(qwen):
    head = qwen.output
    vocab = DraftVocabulary(head, 1000)
    rng = np.random.default_rng(0)
    h = rng.standard_normal((3, head.in_features)).astype(np.float32)
    full = head(h)
    seen = [5, 999, 1000, 151000, 70000, 151000]  # below, at and past n_first; repeats
    vocab.see(seen)
    vocab.see([70000, 12])
    logits = vocab(h)
    kept = np.zeros(head.out_features, bool)
    kept[:1000] = True
    kept[[1000, 70000, 151000]] = True
    assert sorted(vocab.extra_ids.tolist()) == [1000, 70000, 151000]
    np.testing.assert_allclose(logits[:, kept], full[:, kept], rtol=1e-6, atol=1e-5)
    assert np.isneginf(logits[:, ~kept]).all()
    one = vocab(h[1])  # one row takes the one-token kernel, as the full head's one row does
    np.testing.assert_allclose(one[0, kept], head(h[1])[kept], rtol=1e-6, atol=1e-5)
    assert np.isneginf(one[0, ~kept]).all()


def test_zero_or_a_larger_n_keeps_the_head(qwen):
    assert draft_head(qwen.output, 0) is qwen.output
    assert draft_head(qwen.output, qwen.output.out_features) is qwen.output
    assert isinstance(draft_head(qwen.output, 32768), DraftVocabulary)
    with pytest.raises(ValueError, match="spec-draft-vocab"):
        draft_head(qwen.output, -1)


@pytest.mark.parametrize("n_first", [256, 32768])
def test_greedy_identical_with_a_trimmed_draft_vocabulary(model_paths, n_first):
    """Qwen2.5-Coder drafting for itself with a head over `n_first` ids: the same greedy tokens as
    without speculation. With 256 ids (bytes only) the draft can only propose tokens the
    sequence has held; with 32768 nearly every guess is still right."""
    path = str(model_paths["qwen2.5-coder-0.5b"])
    llm = Llama(path, n_ctx=1024, verbose=False)
    tokens = edit_prompt(llm)
    plain, _ = greedy(llm, tokens, None, 40)
    spec = build_speculator(SpecConfig(draft_model=path, n_max=4, draft_vocab=n_first),
                            llm._tokenizer, 1024, 1)
    drafter = spec.drafters[0]
    assert isinstance(drafter.head, DraftVocabulary) and drafter.head.n_first == n_first
    out, timings = greedy(llm, tokens, spec, 40)
    assert out == plain
    assert timings["draft_n"] > 0
    assert {t for t in tokens if t >= n_first} <= set(drafter.head.extra_ids.tolist())
    if n_first == 32768:
        assert timings["draft_n_accepted"] >= 0.9 * timings["draft_n"]
