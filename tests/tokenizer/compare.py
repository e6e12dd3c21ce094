"""Compare our Tokenizer with llama.cpp on one vocabulary: vocab facts, every token's piece, and
tokenize / detokenize on seeded random texts. Used by test_llamacpp_live.py and runnable alone:

    python -m tests.tokenizer.compare PATH_OR_VOCAB_NAME [N_TEXTS]
"""

from __future__ import annotations

import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from llamacpy.tokenizer import Tokenizer
from tests.tokenizer.fuzz_text import random_texts

TOKENIZE_FLAGS = [(True, False), (False, True), (True, True), (False, False)]
DETOKENIZE_FLAGS = [(False, False), (True, True), (True, False), (False, True)]


@dataclass
class Report:
    name: str
    texts: int = 0
    checks: int = 0
    mismatches: list = field(default_factory=list)

    def fail(self, what: str, *detail) -> None:
        if len(self.mismatches) < 20:
            self.mismatches.append((what, *detail))
        else:
            self.mismatches.append((what,))


def seed_of(name: str) -> int:
    return zlib.crc32(name.encode())


def vocab_specials(tok: Tokenizer, k: int = 64) -> list[str]:
    """Up to k special-token texts of the vocab, spread over its special-token cache."""
    cache = tok.vocab.special_cache
    step = max(1, len(cache) // k)
    return [tok.vocab.tokens[i] for i in cache[::step][:k]]


def compare_facts(ref, tok: Tokenizer, rep: Report) -> None:
    facts = ref.facts()
    for slot, want in facts["ids"].items():
        got = getattr(tok, slot)
        rep.checks += 1
        if got != want:
            rep.fail("id", slot, got, want)
    for flag in ("add_bos", "add_eos"):
        rep.checks += 1
        if getattr(tok, flag) != facts[flag]:
            rep.fail("flag", flag, getattr(tok, flag), facts[flag])
    bad = [i for i, a in enumerate(facts["attrs"]) if a != tok.token_attr(i)]
    rep.checks += len(facts["attrs"])
    if bad:
        rep.fail("attrs", len(bad), bad[:5])
    got_eog = {i for i in range(tok.n_vocab) if tok.is_eog(i)}
    rep.checks += 1
    if got_eog != facts["eog"]:
        rep.fail("eog", sorted(got_eog ^ facts["eog"])[:10])


def compare_pieces(ref, tok: Tokenizer, rep: Report) -> None:
    for t in range(tok.n_vocab):
        for special, lstrip in ((True, 0), (False, 1)):
            rep.checks += 1
            want = ref.token_to_piece(t, special, lstrip)
            if tok.token_to_piece(t, special, lstrip) != want:
                rep.fail("piece", t, special, lstrip, want)


def compare_texts(ref, tok: Tokenizer, rep: Report, n: int) -> None:
    texts = random_texts(seed_of(rep.name), n, vocab_specials(tok))
    for k, text in enumerate(texts):
        rep.texts += 1
        for add, parse in TOKENIZE_FLAGS:
            want = ref.tokenize(text, add, parse)
            try:
                got = tok.tokenize(text, add, parse)
            except Exception as e:  # noqa: BLE001 - a crash is a mismatch to report
                got = repr(e)
            rep.checks += 1
            if got != want:
                rep.fail("tokenize", text, add, parse, got, want)
            remove, unparse = DETOKENIZE_FLAGS[(k + parse) % 4]
            rep.checks += 1
            want_text = ref.detokenize(want, remove, unparse)
            if tok.detokenize(want, remove, unparse) != want_text:
                rep.fail("detokenize", want, remove, unparse, want_text)


def compare(path: str | Path, n: int, name: str | None = None, pieces: bool = True) -> Report:
    from tests.tokenizer.llamacpp_ref import LlamaCppVocab

    ref, tok = LlamaCppVocab(path), Tokenizer.from_gguf(path)
    rep = Report(name or Path(path).name)
    compare_facts(ref, tok, rep)
    if pieces:
        compare_pieces(ref, tok, rep)
    compare_texts(ref, tok, rep, n)
    return rep


def main() -> None:
    from tests.reference.vocab_data import vocab_path

    target = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
    path = Path(target) if Path(target).exists() else vocab_path(target)
    rep = compare(path, n, name=target)
    print(f"{rep.name}: {rep.texts} texts, {rep.checks} checks, {len(rep.mismatches)} mismatches")
    for m in rep.mismatches[:5]:
        print("   ", repr(m)[:400])


if __name__ == "__main__":
    main()
