"""Live agreement with llama.cpp (llama-cpp-python 0.3.36) on every supported vocab file and the
catalogue models: vocab facts, every token's piece, and tokenize/detokenize of seeded random
texts ($LLAMACPY_TOKENIZER_FUZZ per vocab: 1000 by default, 10000 for the full check). Skipped without llama_cpp."""

from __future__ import annotations

import os

import pytest

from tests.reference import llamacpp
from tests.reference.vocab_data import vocab_names, vocab_path

pytestmark = [
    pytest.mark.llamacpp,
    pytest.mark.slow,
    pytest.mark.skipif(not llamacpp.available(), reason="llama_cpp is not installed"),
]
N_TEXTS = int(os.environ.get("LLAMACPY_TOKENIZER_FUZZ", "1000"))  # 10000 for a full run


def _check(path, name):
    from tests.tokenizer.compare import compare

    rep = compare(path, N_TEXTS, name=name)
    assert rep.texts == N_TEXTS
    assert not rep.mismatches, (f"{name}: {len(rep.mismatches)} mismatches, "
                                f"first: {rep.mismatches[0]!r}")


@pytest.mark.parametrize("name", vocab_names(with_vectors=False))
def test_vocab_file_agrees_with_llama_cpp(name):
    _check(vocab_path(name), name)


@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m", "qwen2.5-coder-0.5b"])
def test_real_model_agrees_with_llama_cpp(name, model_paths):
    _check(model_paths[name], name)
