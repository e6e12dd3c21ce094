"""llama.cpp's own grammar test vectors, read out of its C++ test sources at test time.

The sources ship in the llama-cpp-python 0.3.36 sdist (fetched by tests.reference.vocab_data);
`source_dir()` extracts grammars/ and the grammar tests into the model cache once. The C++ is
not compiled: a small lexer reads its string literals (raw R"d(...)d" and "..." with escapes,
adjacent literals concatenated, `+` joins) and the call arguments around them.

- GBNF_CASES: test_grammar(desc, grammar, {passing}, {failing}) in test-grammar-integration.cpp.
- SCHEMA_CASES: test_schema(desc, schema, {passing}, {failing}) in the same file.
- LLGUIDANCE_SCHEMA_CASES: test_schema(...) in test-grammar-llguidance.cpp, the expectations
  llama.cpp holds its llguidance build to; LARK_CASES: that file's test_grammar cases, which
  are written in llguidance's Lark syntax, not GBNF.
- INVALID_GBNF: grammars llama.cpp refuses (verify_failure in test-grammar-parser.cpp, the
  test_failure_* functions of test-grammar-integration.cpp); VALID_GBNF: verify_parsing ones.
- SCHEMA_CONVERSIONS: test-json-schema-to-grammar.cpp's cases, with the grammar llama.cpp's own
  converter is expected to print ("" for a schema it must refuse).
- GBNF_FILES: grammars/*.gbnf, name -> text.
- SKIPPED: case name -> why a text matcher cannot run it (token references).
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import NamedTuple

from llamacpy.hub.catalog import cache_dir
from tests.reference.vocab_data import VERSION, llama_cpp_files

MEMBERS = (
    "grammars/",
    "tests/test-grammar-integration.cpp",
    "tests/test-grammar-parser.cpp",
    "tests/test-grammar-llguidance.cpp",
    "tests/test-json-schema-to-grammar.cpp",
)


class GbnfCase(NamedTuple):
    name: str
    gbnf: str
    passing: list[str]
    failing: list[str]


class SchemaCase(NamedTuple):
    name: str
    schema_json: str
    passing: list[str]
    failing: list[str]


class InvalidGbnf(NamedTuple):
    name: str
    gbnf: str


class SchemaConversion(NamedTuple):
    name: str
    ok: bool  # SUCCESS: converts to `grammar`; FAILURE: the converter refuses it
    schema_json: str
    grammar: str


def source_dir() -> Path:
    """A folder holding llama.cpp's grammars/ and tests/test-*grammar*.cpp (made on first use)."""
    return llama_cpp_files(cache_dir() / f"llamacpy-grammar-{VERSION}", MEMBERS)


# ---- a lexer for the C++ test sources: literals, names, punctuation --------------------------

_LEX = re.compile(r"""
    (?P<skip>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<raw>R"(?P<delim>[^()\\\s]{0,16})\()
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<chr>'(?:[^'\\\n]|\\.)*')
  | (?P<name>[A-Za-z_]\w*)
  | (?P<num>\d[\w.']*)
  | (?P<punct>::|->|.)
""", re.S | re.X)
_SIMPLE_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\", '"': b'"',
                   "'": b"'", "?": b"?", "a": b"\a", "b": b"\b", "f": b"\f", "v": b"\v"}
_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]+|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|.)", re.S)


class Tok(NamedTuple):
    kind: str  # str (a literal's value), name, num, chr, punct
    value: str
    pos: int


def lex(source: str) -> list[Tok]:
    toks, pos = [], 0
    while pos < len(source):
        m = _LEX.match(source, pos)
        kind = m.lastgroup if m.lastgroup != "delim" else "raw"
        if kind == "raw":
            close = ")" + m.group("delim") + '"'
            end = source.index(close, m.end())
            toks.append(Tok("str", source[m.end():end], pos))
            pos = end + len(close)
            continue
        if kind == "str":
            toks.append(Tok("str", _unescape(m.group()[1:-1]), pos))
        elif kind != "skip":
            toks.append(Tok(kind, m.group(), pos))
        pos = m.end()
    return toks


def _unescape(body: str) -> str:
    """A C++ "..." literal's bytes (UTF-8 source, \\x bytes, \\u code points) as text."""
    out, last = bytearray(), 0
    for m in _ESCAPE.finditer(body):
        out += body[last:m.start()].encode()
        esc = m.group(1)
        if esc[0] == "x":
            out.append(int(esc[1:], 16) & 0xFF)
        elif esc[0] in "uU":
            out += chr(int(esc[1:], 16)).encode()
        elif esc[0] in "01234567":
            out.append(int(esc, 8) & 0xFF)
        else:
            out += _SIMPLE_ESCAPES[esc]
        last = m.end()
    out += body[last:].encode()
    return out.decode("utf-8", errors="surrogateescape")


def _close_of(toks: list[Tok], i: int) -> int:
    """The index of the bracket that closes toks[i]."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].kind == "punct" and toks[j].value in pairs:
            depth += 1
        elif toks[j].kind == "punct" and toks[j].value in pairs.values():
            depth -= 1
            if depth == 0:
                return j
    raise ValueError(f"unbalanced bracket at offset {toks[i].pos}")


def split_args(toks: list[Tok], i: int) -> list[list[Tok]]:
    """The comma-separated items inside the bracket at toks[i] (a trailing comma ends nothing)."""
    end = _close_of(toks, i)
    items, cur, j = [], [], i + 1
    while j < end:
        t = toks[j]
        if t.kind == "punct" and t.value in "({[":
            k = _close_of(toks, j)
            cur.extend(toks[j:k + 1])
            j = k + 1
            continue
        if t.kind == "punct" and t.value == ",":
            items.append(cur)
            cur = []
        else:
            cur.append(t)
        j += 1
    if cur:
        items.append(cur)
    return items


class _Tokens(Exception):
    """The expression builds a string with token(N) pieces (llama.cpp's 5-byte token marker)."""


def string_value(toks: list[Tok], tokens_as_text: bool = False) -> str:
    """Evaluate `"a" "b" + token(3) + R"(c)"`; token(N) becomes "<[N]>" when allowed."""
    out, j = [], 0
    while j < len(toks):
        t = toks[j]
        if t.kind == "str":
            out.append(t.value)
        elif t.kind == "punct" and t.value == "+":
            pass
        elif t.kind == "name" and t.value == "token" and toks[j + 1].value == "(":
            if not tokens_as_text:
                raise _Tokens
            out.append(f"<[{toks[j + 2].value}]>")
            j += 3
        else:
            raise ValueError(f"not a string expression at offset {t.pos}: {t.value!r}")
        j += 1
    return "".join(out)


def string_list(toks: list[Tok], tokens_as_text: bool = False) -> list[str]:
    """Evaluate `{ expr, expr, }`."""
    assert toks[0].value == "{" and toks[-1].value == "}", toks[0]
    return [string_value(item, tokens_as_text) for item in split_args(toks, 0)]


def calls(toks: list[Tok], name: str) -> list[tuple[int, list[list[Tok]]]]:
    """(index, arguments) of every call `name(...)`, leaving out its definition."""
    found = []
    for i, t in enumerate(toks[:-1]):
        if (t.kind == "name" and t.value == name and toks[i + 1].value == "("
                and (i == 0 or toks[i - 1].value not in ("void", "static", "bool"))):
            found.append((i, split_args(toks, i + 1)))
    return found


def functions(toks: list[Tok]) -> dict[str, list[Tok]]:
    """name -> body tokens of every `void name() { ... }`."""
    out = {}
    for i, t in enumerate(toks[:-3]):
        if t.value == "void" and toks[i + 2].value == "(" and toks[i + 3].value == ")":
            if toks[i + 4].value == "{":
                out[toks[i + 1].value] = toks[i + 5:_close_of(toks, i + 4)]
    return out


# ---- the cases ----------------------------------------------------------------------------

def _read(name: str) -> list[Tok]:
    return lex((source_dir() / name).read_text(encoding="utf-8"))


def _unique(name: str, seen: dict[str, int]) -> str:
    seen[name] = seen.get(name, 0) + 1
    return name if seen[name] == 1 else f"{name} #{seen[name]}"


def _four_arg_cases(toks: list[Tok], func: str, cls, skipped: dict[str, str]) -> list:
    cases, seen = [], {}
    for n, (i, args) in enumerate(calls(toks, func)):
        if len(args) != 4:
            raise ValueError(f"{func} at offset {toks[i].pos}: {len(args)} arguments, expected 4")
        name = _unique(string_value(args[0]) or f"{func} call #{n + 1}", seen)
        try:
            passing, failing = string_list(args[2]), string_list(args[3])
        except _Tokens:
            skipped[name] = ("its strings hold token(N) pieces and its grammar token references "
                             "(<[id]>, !<[id]>): a match over text cannot express them")
            passing, failing = string_list(args[2], True), string_list(args[3], True)
        cases.append(cls(name, string_value(args[1]), passing, failing))
    return cases


@cache
def _integration() -> tuple[list[GbnfCase], list[SchemaCase], dict[str, str]]:
    toks = _read("tests/test-grammar-integration.cpp")
    skipped: dict[str, str] = {}
    gbnf = _four_arg_cases(toks, "test_grammar", GbnfCase, skipped)
    schema = _four_arg_cases(toks, "test_schema", SchemaCase, skipped)
    return gbnf, schema, skipped


# test_failure_missing_root_symbol's grammar has a root; it fails only for root "nonexistent"
_NOT_INVALID_WITH_ROOT = {"test_failure_missing_root_symbol"}


@cache
def _invalid() -> tuple[list[InvalidGbnf], list[InvalidGbnf]]:
    invalid, valid = [], []
    toks = _read("tests/test-grammar-parser.cpp")
    for n, (_, args) in enumerate(calls(toks, "verify_failure")):
        invalid.append(InvalidGbnf(f"parser verify_failure #{n + 1}", string_value(args[0])))
    for n, (_, args) in enumerate(calls(toks, "verify_parsing")):
        valid.append(InvalidGbnf(f"parser verify_parsing #{n + 1}", string_value(args[0])))
    bodies = functions(_read("tests/test-grammar-integration.cpp"))
    for func, body in bodies.items():
        if not (func.startswith("test_failure_") or func == "test_custom_root_symbol_check"):
            continue
        for j, t in enumerate(body[:-3]):
            # const std::string NAME = <expr>;
            if t.value == "std" and body[j + 2].value == "string" and body[j + 4].value == "=":
                end = next(k for k in range(j + 5, len(body)) if body[k].value == ";")
                entry = InvalidGbnf(f"{func}: {body[j + 3].value}", string_value(body[j + 5:end]))
                if func not in _NOT_INVALID_WITH_ROOT:
                    invalid.append(entry)
    return invalid, valid


@cache
def _conversions() -> list[SchemaConversion]:
    toks = _read("tests/test-json-schema-to-grammar.cpp")
    cases, seen = [], {}
    for _, args in calls(toks, "test"):
        if len(args) != 1 or args[0][0].value != "{":
            continue
        status, name, schema, grammar = split_args(args[0], 0)
        assert status[0].value in ("SUCCESS", "FAILURE"), status
        cases.append(SchemaConversion(_unique(string_value(name), seen),
                                      status[0].value == "SUCCESS", string_value(schema),
                                      string_value(grammar)))
    return cases


@cache
def _llguidance() -> tuple[list[SchemaCase], list[GbnfCase]]:
    toks, skipped = _read("tests/test-grammar-llguidance.cpp"), {}
    schemas = _four_arg_cases(toks, "test_schema", SchemaCase, skipped)
    lark = _four_arg_cases(toks, "test_grammar", GbnfCase, skipped)
    assert not skipped, skipped
    return schemas, lark


@cache
def gbnf_files() -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8")
            for p in sorted((source_dir() / "grammars").glob("*.gbnf"))}


def __getattr__(name: str):
    # module attributes computed on first use, so importing this file reads nothing
    lazy = {
        "GBNF_CASES": lambda: _integration()[0],
        "SCHEMA_CASES": lambda: _integration()[1],
        "SKIPPED": lambda: _integration()[2],
        "INVALID_GBNF": lambda: _invalid()[0],
        "VALID_GBNF": lambda: _invalid()[1],
        "SCHEMA_CONVERSIONS": _conversions,
        "LLGUIDANCE_SCHEMA_CASES": lambda: _llguidance()[0],
        "LARK_CASES": lambda: _llguidance()[1],
        "GBNF_FILES": gbnf_files,
    }
    if name in lazy:
        return lazy[name]()
    raise AttributeError(name)


def string_vectors(cases) -> list[tuple[str, object, str, bool]]:
    """(test id, case, string, should match) for every passing and failing string of `cases`."""
    out = []
    for case in cases:
        for kind, strings in (("pass", case.passing), ("fail", case.failing)):
            out.extend((f"{case.name}|{kind}{i}", case, s, kind == "pass")
                       for i, s in enumerate(strings))
    return out
