"""Our tokenizer against llama.cpp's results recorded in tests/golden/tokenizer_golden.json
(tests/reference/make_tokenizer_golden.py): token ids and detokenized bytes (CRC-32)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest

from llamacpy.tokenizer import Tokenizer
from tests.reference.make_tokenizer_golden import decode_text
from tests.reference.vocab_data import vocab_path

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "tokenizer_golden.json")
                    .read_text(encoding="utf-8"))


def check(tok: Tokenizer, cases: list) -> None:
    bad = []
    for text, tflags, ids, dflags, crc in cases:
        raw = decode_text(text)
        got = tok.tokenize(raw, bool(tflags & 1), bool(tflags & 2))
        detok = tok.detokenize(ids, bool(dflags & 1), bool(dflags & 2))
        if got != ids or zlib.crc32(detok) != crc:
            bad.append((raw, tflags, got, ids, dflags, detok))
    assert not bad, f"{len(bad)}/{len(cases)} differ; first: {bad[0]!r}"


@pytest.mark.parametrize("name", sorted(GOLDEN["vocabs"]))
def test_vocab_file_golden(name):
    check(Tokenizer.from_gguf(vocab_path(name)), GOLDEN["vocabs"][name])


@pytest.mark.parametrize("name", sorted(GOLDEN["models"]))
def test_real_model_golden(name, real_models):
    check(Tokenizer.from_gguf(real_models[name]), GOLDEN["models"][name])
