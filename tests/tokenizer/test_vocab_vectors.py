"""llama.cpp's own tokenizer test vectors (models/ggml-vocab-*.gguf.inp/.out) must match exactly,
tokenized as tests/test-tokenizer-0.cpp does (add_special=false, parse_special=false)."""

from __future__ import annotations

import pytest

from llamacpy.tokenizer import Tokenizer
from tests.reference.vocab_data import read_vectors, vocab_names, vocab_path

NAMES = vocab_names()


@pytest.fixture(scope="module", params=NAMES)
def named_tokenizer(request):
    return request.param, Tokenizer.from_gguf(vocab_path(request.param))


def test_all_vocabs_with_vectors_are_covered():
    # bert-bge (WPM), gemma-4 (SPM-style BPE), the SPM and the BPE pre-tokenizers
    assert len(NAMES) >= 15, NAMES


def test_vectors(named_tokenizer):
    name, tok = named_tokenizer
    vectors = read_vectors(name)
    assert vectors
    bad = [(text, tok.tokenize(text, add_special=False), ids) for text, ids in vectors
           if tok.tokenize(text, add_special=False) != ids]
    assert not bad, f"{name}: {len(bad)}/{len(vectors)} differ, first: {bad[0]!r}"
