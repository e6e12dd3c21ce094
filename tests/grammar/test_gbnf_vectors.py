"""Our constrained-sampling engine (llamacpy.grammar) against llama.cpp's grammar vectors.

The same vectors tests/grammar/test_recognizer.py checks the independent recognizer with:
llama.cpp's GBNF cases (passing strings accepted, failing rejected), its JSON-schema cases (those
of its own converter and those it holds its llguidance build to), the grammars it refuses, and
grammars/*.gbnf. Strings go through the real Qwen2.5-Coder tokenizer, as they would in sampling.
Where we knowingly differ, the case is listed in KNOWN_DIFFERENCES and marked xfail(strict=True).
"""

from __future__ import annotations

import random

import pytest

from tests.grammar import recognizer, vectors
from tests.grammar.samples import GBNF_SAMPLES

grammar_module = pytest.importorskip("llamacpy.grammar")
Grammar, GrammarError = grammar_module.Grammar, grammar_module.GrammarError

MODEL = "qwen2.5-coder-0.5b"

_DIGITS = ("llama.cpp's converter writes integers as at most 16 digits ([1-9] [0-9]{0,15}); "
           "llguidance's JSON integers have no length limit (llama.cpp's own llguidance test, "
           "test-grammar-llguidance.cpp, drops this string)")
_UNIQUE = ("llguidance refuses the keyword uniqueItems, which llama.cpp's converter ignores "
           "(test-grammar-llguidance.cpp renames it DISABLED_uniqueItems); the engine could drop "
           "it before compiling")
# test id -> why our engine answers otherwise than llama.cpp (each one is a visible xfail)
KNOWN_DIFFERENCES: dict[str, str] = {
    "schema:min 0|fail4": _DIGITS,
    "schema:min 2|fail8": _DIGITS,
    "schema:min+max items|fail2": (
        "a schema with items/minItems but no type: llama.cpp's converter makes it an array, "
        "llguidance follows JSON Schema (the keywords bind arrays only, so 1 is valid; "
        "test-grammar-llguidance.cpp expects it to pass)"),
    **{f"schema:required props|{kind}": _UNIQUE
       for kind in ("pass0", "pass1", "pass2", "fail0", "fail1", "fail2", "fail3", "fail4",
                    "fail5")},
    "conversion:unsupported regexp in a property": (
        "llama.cpp degrades a property whose pattern uses look-around to a plain string; "
        "llguidance's regex engine refuses look-around, so the whole schema is refused"),
}


@pytest.fixture(scope="module")
def tokenizer(model_paths):
    from llamacpy.tokenizer import Tokenizer

    return Tokenizer.from_gguf(model_paths[MODEL])


_COMPILED: dict[tuple[str, str], object] = {}


def _compiled(kind: str, source: str):
    key = (kind, source)
    if key not in _COMPILED:
        make = {"gbnf": Grammar.from_gbnf, "schema": Grammar.from_json_schema,
                "lark": getattr(Grammar, "from_lark", None)}[kind]
        if make is None:
            pytest.skip("Grammar.from_lark is not part of the engine")
        _COMPILED[key] = make(source)
    return _COMPILED[key]


def _marks(ident: str, skip: str | None = None) -> list:
    if skip:
        return [pytest.mark.skip(reason=skip)]
    if ident in KNOWN_DIFFERENCES:
        return [pytest.mark.xfail(reason=KNOWN_DIFFERENCES[ident], strict=True)]
    return []


def _string_params(prefix: str, cases, skipped: dict[str, str] | None = None):
    skipped = skipped or {}
    return [pytest.param(case, text, want, id=f"{prefix}:{ident}",
                         marks=_marks(f"{prefix}:{ident}", skipped.get(case.name)))
            for ident, case, text, want in vectors.string_vectors(cases)]


def _case_params(prefix: str, cases):
    return [pytest.param(c, id=f"{prefix}:{c.name}", marks=_marks(f"{prefix}:{c.name}"))
            for c in cases]


# ---- grammars/*.gbnf -----------------------------------------------------------------------

def _name_params(prefix: str, names):
    return [pytest.param(n, id=f"{prefix}:{n}", marks=_marks(f"{prefix}:{n}")) for n in names]


@pytest.mark.parametrize("name", _name_params("file", sorted(GBNF_SAMPLES)))
def test_grammar_file(tokenizer, name):
    grammar = _compiled("gbnf", vectors.GBNF_FILES[name])
    sample = GBNF_SAMPLES[name]
    assert grammar.accepts(tokenizer, sample)
    assert not grammar.accepts(tokenizer, sample + "\x01")
    assert not grammar.accepts(tokenizer, sample[: len(sample) // 2] + "\x01")


def _mutations(sample: str, n: int, seed: int) -> list[str]:
    """Near misses of a sample: a cut, a deleted, doubled or swapped character."""
    rng, out = random.Random(seed), []
    for _ in range(n):
        i = rng.randrange(len(sample))
        out.append(rng.choice([sample[:i], sample[:i] + sample[i + 1:],
                               sample[:i] + sample[i] + sample[i:],
                               sample[:i] + sample[i:i + 2][::-1] + sample[i + 2:]]))
    return out


@pytest.mark.parametrize("name", _name_params("mutations", sorted(GBNF_SAMPLES)))
def test_grammar_file_agrees_with_recognizer(tokenizer, name):
    grammar = _compiled("gbnf", vectors.GBNF_FILES[name])
    reference = recognizer.parse(vectors.GBNF_FILES[name])
    texts = _mutations(GBNF_SAMPLES[name], 12, seed=len(name))
    want = [recognizer.accepts(reference, t) for t in texts]
    got = [grammar.accepts(tokenizer, t) for t in texts]
    assert [(t, w) for t, w, g in zip(texts, want, got) if w != g] == []


# ---- llama.cpp's vectors -------------------------------------------------------------------

@pytest.mark.parametrize("case,text,want",
                         _string_params("gbnf", vectors.GBNF_CASES, vectors.SKIPPED))
def test_gbnf_vector(tokenizer, case, text, want):
    assert _compiled("gbnf", case.gbnf).accepts(tokenizer, text) is want


@pytest.mark.parametrize("case,text,want", _string_params("schema", vectors.SCHEMA_CASES)
                         + _string_params("llg-schema", vectors.LLGUIDANCE_SCHEMA_CASES))
def test_schema_vector(tokenizer, case, text, want):
    assert _compiled("schema", case.schema_json).accepts(tokenizer, text) is want


@pytest.mark.parametrize("case,text,want", _string_params("lark", vectors.LARK_CASES))
def test_llguidance_lark_vector(tokenizer, case, text, want):
    assert _compiled("lark", case.gbnf).accepts(tokenizer, text) is want


@pytest.mark.parametrize("case", _case_params("conversion", vectors.SCHEMA_CONVERSIONS))
def test_schema_conversion_status(case):
    # test-json-schema-to-grammar.cpp: SUCCESS converts, FAILURE is refused
    if case.ok:
        Grammar.from_json_schema(case.schema_json)
    else:
        with pytest.raises(GrammarError):
            Grammar.from_json_schema(case.schema_json)


@pytest.mark.parametrize("case", _case_params("invalid", vectors.INVALID_GBNF))
def test_llamacpp_invalid_grammar(case):
    with pytest.raises(GrammarError) as err:
        Grammar.from_gbnf(case.gbnf)
    assert err.value.line >= 1 and err.value.column >= 1, str(err.value)


@pytest.mark.parametrize("case", _case_params("valid", vectors.VALID_GBNF))
def test_llamacpp_parser_grammar(case):
    Grammar.from_gbnf(case.gbnf)


BAD_GRAMMARS = [  # name, grammar, the line the error is on
    ("unclosed paren", 'root ::= "a"\nitem ::= ("b" | "c"\n', 3),
    ("unknown rule", 'root ::= "a" item\nitem ::= "b" other\n', 2),
    ("missing root", 'item ::= "a"\n', 1),
    ("bad escape", 'root ::= "a"\nitem ::= "\\q"\n', 2),
    ("max below min", 'root ::= "a"{2,1}\n', 1),
    ("repetition limit", 'root ::= "a"{5000}\n', 1),
    ("repeat of nothing", 'root ::= "a"\nitem ::= *\n', 2),
    ("no ::=", 'root ::= "a"\nitem = "b"\n', 2),
]


@pytest.mark.parametrize("name,gbnf,line",
                         [pytest.param(*c, id=f"bad:{c[0]}", marks=_marks(f"bad:{c[0]}"))
                          for c in BAD_GRAMMARS])
def test_bad_grammar(name, gbnf, line):
    with pytest.raises(recognizer.GrammarSyntaxError) as ref:
        recognizer.parse(gbnf)
    assert ref.value.line == line  # the reference agrees on where the fault is
    with pytest.raises(GrammarError) as err:
        Grammar.from_gbnf(gbnf)
    assert isinstance(err.value, ValueError)
    assert (err.value.line, err.value.column >= 1) == (line, True), str(err.value)
