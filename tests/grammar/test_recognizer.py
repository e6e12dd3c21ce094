"""The reference recognizer (tests/grammar/recognizer.py) agrees with llama.cpp's own vectors."""

from __future__ import annotations

import json
import time

import pytest

from tests.grammar import vectors
from tests.grammar.recognizer import (GrammarSyntaxError, TokenGrammarError, accepts, is_prefix,
                                      parse)
from tests.grammar.samples import GBNF_SAMPLES

_CASE_GRAMMARS: dict[str, object] = {}


def _grammar(text: str):
    if text not in _CASE_GRAMMARS:
        _CASE_GRAMMARS[text] = parse(text)
    return _CASE_GRAMMARS[text]


def _string_params(cases, skipped: dict[str, str]):
    return [pytest.param(case, text, want, id=ident,
                         marks=[pytest.mark.skip(reason=skipped[case.name])]
                         if case.name in skipped else [])
            for ident, case, text, want in vectors.string_vectors(cases)]


@pytest.mark.parametrize("case,text,want", _string_params(vectors.GBNF_CASES, vectors.SKIPPED))
def test_llamacpp_gbnf_vector(case, text, want):
    assert accepts(_grammar(case.gbnf), text) is want


def test_token_cases_parse_but_are_not_matched():
    for case in vectors.GBNF_CASES:
        if case.name in vectors.SKIPPED:
            with pytest.raises(TokenGrammarError):
                accepts(parse(case.gbnf), "")


@pytest.mark.parametrize("case", vectors.INVALID_GBNF, ids=lambda c: c.name)
def test_llamacpp_invalid_grammar(case):
    with pytest.raises(GrammarSyntaxError) as err:
        parse(case.gbnf)
    assert err.value.line >= 1 and err.value.column >= 1


@pytest.mark.parametrize("case", vectors.VALID_GBNF, ids=lambda c: c.name)
def test_llamacpp_parser_grammar(case):
    parse(case.gbnf)


@pytest.mark.parametrize("case", [c for c in vectors.SCHEMA_CONVERSIONS if c.ok],
                         ids=lambda c: c.name)
def test_schema_conversion_expectation_parses(case):
    # test-json-schema-to-grammar.cpp's "Check the expectations parse"
    parse(case.grammar)


def _schema_with_expected_grammar():
    # test_schema's strings against the grammar test-json-schema-to-grammar.cpp expects for
    # the same schema: llama.cpp's two test files and this recognizer must all agree
    conversions = {json.dumps(json.loads(c.schema_json), sort_keys=True): c
                   for c in vectors.SCHEMA_CONVERSIONS if c.ok}
    out = []
    for ident, case, text, want in vectors.string_vectors(vectors.SCHEMA_CASES):
        conv = conversions.get(json.dumps(json.loads(case.schema_json), sort_keys=True))
        if conv is not None:
            out.append(pytest.param(conv.grammar, text, want, id=ident))
    return out


@pytest.mark.parametrize("gbnf,text,want", _schema_with_expected_grammar())
def test_schema_vector_on_expected_grammar(gbnf, text, want):
    assert accepts(_grammar(gbnf), text) is want


def test_schema_cross_check_covers_cases():
    assert len({p.values[0] for p in _schema_with_expected_grammar()}) >= 15


@pytest.mark.parametrize("name", sorted(GBNF_SAMPLES))
def test_grammar_file(name):
    grammar = parse(vectors.GBNF_FILES[name])
    sample = GBNF_SAMPLES[name]
    assert len(sample) >= 100
    start = time.perf_counter()
    assert accepts(grammar, sample)
    assert is_prefix(grammar, sample[: len(sample) // 2])
    assert not accepts(grammar, sample + "\x01")
    assert not is_prefix(grammar, "\x01" + sample)
    assert time.perf_counter() - start < 1.0


def test_every_grammar_file_has_a_sample():
    assert sorted(vectors.GBNF_FILES) == sorted(GBNF_SAMPLES)


# ---- the README's features, by hand ----------------------------------------------------------

HAND_CASES = [
    ("comments", 'root ::= "a" # a comment\n# a comment line\n  tail ::= "b"\n', ["a"], ["b"]),
    ("group over lines", 'root ::= (\n  "a"\n  | "b" # either\n)\n', ["a", "b"], ["", "ab"]),
    ("| continues a rule", 'root ::= "a" |\n  "b"', ["a", "b"], ["ab"]),
    ("rule used before its definition", 'root ::= x x\nx ::= [0-9]', ["12"], ["1"]),
    ("leading - is literal", "root ::= [-a-z]+", ["-", "a-z", "q"], ["A", ""]),
    ("trailing - is literal", "root ::= [a-]", ["a", "-"], ["b"]),
    ("negated class", 'root ::= [^"\\\\a-c]*', ["xyz", "d é"], ['"', "\\", "b"]),
    ("dot is any code point", "root ::= . . .", ["abc", "a\n😀"], ["ab", "abcd"]),
    ("escapes", 'root ::= "\\x41\\u00e9\\U0001F600\\t\\n\\r\\\\\\"\\[\\]\\-"',
     ["Aé😀\t\n\r\\\"[]-"], ["A"]),
    ("escapes in a class", "root ::= [\\x00-\\x1F\\]\\[\\\\]", ["\x05", "]", "[", "\\"], [" "]),
    ("{m}", 'root ::= "ab"{2}', ["abab"], ["ab", "ababab"]),
    ("{m,}", 'root ::= "ab"{2,}', ["abab", "abababab"], ["ab"]),
    ("{m,n}", 'root ::= "ab"{2,3}', ["abab", "ababab"], ["ab", "abababab"]),
    ("{0,n}", "root ::= [x]{0,2}", ["", "x", "xx"], ["xxx"]),
    ("?", 'root ::= "a" "b"? "c"', ["ac", "abc"], ["abbc"]),
    ("+ on a group", 'root ::= ("ab" | "c")+', ["ab", "cabc"], ["", "a"]),
    ("spaces inside {}", 'root ::= "a"{ 1 , 2 }', ["a", "aa"], ["aaa"]),
    ("an empty alternative", 'root ::= "a" |', ["", "a"], ["b"]),
    ("a huge maximum means none", 'root ::= "a"{0,5000}', ["", "a" * 300], ["b"]),
    ("unicode class", "root ::= [ぁ-ゟ]+", ["ひらがな"], ["カ"]),
    ("CRLF line ends", 'root ::= a\r\na ::= "x"\r\n', ["x"], ["\r"]),
]


@pytest.mark.parametrize("name,gbnf,passing,failing", HAND_CASES, ids=[c[0] for c in HAND_CASES])
def test_readme_feature(name, gbnf, passing, failing):
    grammar = parse(gbnf)
    assert [s for s in passing if not accepts(grammar, s)] == []
    assert [s for s in failing if accepts(grammar, s)] == []


BAD_GRAMMARS = [
    ("unclosed paren", 'root ::= ("a"\n', 2),
    ("unclosed literal", 'root ::= "a', 1),
    ("unclosed class", "root ::= [a-z", 1),
    ("unknown rule", 'root ::= "a"\nfoo ::= bar', 2),
    ("missing root", 'foo ::= "a"', 1),
    ("bad escape", 'root ::= "\\q"', 1),
    ("short hex escape", 'root ::= "\\x4"', 1),
    ("max below min", 'root ::= "a"{2,1}', 1),
    ("repetition of nothing", "root ::= *", 1),
    ("no ::=", 'root = "a"', 1),
    ("a newline ends a rule outside a group", 'root ::= "a"\n  "b"', 2),
    ("junk after a rule", 'root ::= "a" )', 1),
    ("left recursion", 'root ::= "x"\nfoo ::= foo "a" | "b"', 2),
    ("empty grammar", "  # nothing\n", 1),
    ("underscore is not a name character", 'root ::= a_b\na_b ::= "x"', 1),
]


@pytest.mark.parametrize("name,gbnf,line", BAD_GRAMMARS, ids=[c[0] for c in BAD_GRAMMARS])
def test_bad_grammar(name, gbnf, line):
    with pytest.raises(GrammarSyntaxError) as err:
        parse(gbnf)
    assert err.value.line == line, str(err.value)


def test_error_position_points_at_the_fault():
    with pytest.raises(GrammarSyntaxError) as err:
        parse('root ::= "a"\nitem ::= ("b" | "c"\n')
    assert (err.value.line, err.value.column) == (3, 1), str(err.value)


def test_token_grammar_parses_but_cannot_match():
    grammar = parse("root ::= <[1000]> !<[1001]>* <think>")
    assert grammar.uses_tokens
    with pytest.raises(TokenGrammarError):
        accepts(grammar, "x")


def test_prefix():
    grammar = parse('root ::= "{" [0-9]+ "}"')
    assert is_prefix(grammar, "") and is_prefix(grammar, "{12")
    assert not accepts(grammar, "{12") and accepts(grammar, "{12}")
    assert not is_prefix(grammar, "{}") and not is_prefix(grammar, "{12}x")
