"""An independent GBNF recognizer, the reference our constrained sampler is tested against.

The parser follows llama.cpp's `llama_grammar_parser` (src/llama-grammar.cpp: parse_space,
parse_name, parse_char, parse_sequence, parse_alternates, parse_rule) step by step, including
how it rewrites groups and repetitions into generated rules, its 2000-repetition limits and its
left-recursion check, so that the same grammars are accepted and refused. Matching is an Earley
recogniser over code points (nullable rules handled as Aycock and Horspool do); llama.cpp's
stack machine accepts exactly the strings a context-free parse would, so the answers agree.

Token references (`<[id]>`, `<text>`, `!<...>`) parse, but a text matcher cannot follow them:
`accepts` raises `TokenGrammarError` for a grammar that uses one. Deliberate departures from
llama.cpp: `{m,n}` with n < m is refused (llama.cpp would loop on the wrapped count), and
a grammar string is not cut at a NUL character.

This module imports neither llguidance nor llamacpy.grammar: it is the independent side.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, field

MAX_REPETITION_THRESHOLD = 2000  # llama-grammar.cpp
_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
_DIGITS = frozenset("0123456789")
_ESCAPES = {"t": "\t", "r": "\r", "n": "\n", "\\": "\\", '"': '"', "[": "[", "]": "]", "-": "-"}
_HEX_SIZES = {"x": 2, "u": 4, "U": 8}


class GrammarSyntaxError(ValueError):
    """A grammar llama.cpp would refuse; `pos` is the offset, `line`/`column` count from 1."""

    def __init__(self, message: str, text: str, pos: int):
        self.pos = pos
        self.line = text.count("\n", 0, pos) + 1
        self.column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        super().__init__(f"{message} at line {self.line}, column {self.column} (offset {pos})")


class TokenGrammarError(NotImplementedError):
    """The grammar refers to tokens, which a matcher over text cannot follow."""


@dataclass(frozen=True)
class Chars:
    """One code point from a set of inclusive ranges (or outside it, when negated)."""

    negated: bool
    ranges: tuple[tuple[int, int], ...]

    def match(self, cp: int) -> bool:
        return any(lo <= cp <= hi for lo, hi in self.ranges) != self.negated


ANY = Chars(True, ())  # `.`: outside the empty set


@dataclass(frozen=True)
class Token:
    """`<[id]>` / `<text>` (or `!<...>`, any token but that one)."""

    ref: int | str
    negated: bool


@dataclass
class Grammar:
    """Rules as llama.cpp builds them: rule id -> alternatives -> elements.

    An element is a `Chars`, a `Token`, or an int (a reference to another rule id)."""

    rules: dict[int, list[list]]
    symbols: dict[str, int]  # rule name (generated ones too, e.g. root_1) -> id
    root: int
    uses_tokens: bool = False
    _earley: _Earley | None = field(default=None, repr=False)


def parse(text: str, root: str = "root") -> Grammar:
    """Parse a GBNF grammar; raise GrammarSyntaxError where llama.cpp would refuse it."""
    parser = _Parser(text)
    parser.parse_grammar()
    if not parser.rules:
        raise GrammarSyntaxError("empty grammar", text, 0)
    if root not in parser.symbols:
        raise GrammarSyntaxError(f"grammar does not contain a '{root}' symbol", text, 0)
    grammar = Grammar(parser.rules, parser.symbols, parser.symbols[root], parser.uses_tokens)
    bad = _left_recursive_rule(grammar.rules)
    if bad is not None:
        name = next(n for n, i in parser.symbols.items() if i == bad)
        raise GrammarSyntaxError(f"left recursion detected for nonterminal '{name}'", text,
                                 parser.defined_at.get(bad, 0))
    return grammar


def accepts(grammar: Grammar, text: str) -> bool:
    """Whether the whole of `text` matches the root rule."""
    items = _matcher(grammar).run(text)
    return items is not None and _matcher(grammar).complete(items)


def is_prefix(grammar: Grammar, text: str) -> bool:
    """Whether `text` can be continued into a match (llama.cpp's stacks stay non-empty)."""
    return _matcher(grammar).run(text) is not None


def _matcher(grammar: Grammar) -> _Earley:
    if grammar.uses_tokens:
        raise TokenGrammarError("the grammar refers to tokens; only text can be matched here")
    if grammar._earley is None:
        grammar._earley = _Earley(grammar)
    return grammar._earley


class _Parser:
    """llama_grammar_parser, one method per parse_* function."""

    def __init__(self, text: str):
        self.text = text
        self.symbols: dict[str, int] = {}
        self.rules: dict[int, list[list]] = {}
        self.referenced_at: dict[int, int] = {}
        self.defined_at: dict[int, int] = {}
        self.uses_tokens = False

    def fail(self, message: str, pos: int):
        raise GrammarSyntaxError(message, self.text, pos)

    def at(self, pos: int) -> str:
        return self.text[pos] if pos < len(self.text) else ""

    def symbol_id(self, name: str) -> int:
        return self.symbols.setdefault(name, len(self.symbols))

    def generate_symbol_id(self, base: str) -> int:
        next_id = len(self.symbols)
        self.symbols[f"{base}_{next_id}"] = next_id
        return next_id

    def parse_grammar(self) -> None:
        pos = self.space(0, True)
        while pos < len(self.text):
            pos = self.rule(pos)
        for name, ident in self.symbols.items():
            if ident not in self.rules:
                self.fail(f"undefined rule identifier '{name}'", self.referenced_at.get(ident, 0))

    def space(self, pos: int, newline_ok: bool) -> int:
        text = self.text
        while pos < len(text) and (text[pos] in " \t#" or (newline_ok and text[pos] in "\r\n")):
            if text[pos] == "#":
                while pos < len(text) and text[pos] not in "\r\n":
                    pos += 1
            else:
                pos += 1
        return pos

    def name(self, pos: int) -> int:
        return self.span(pos, _WORD, "expecting name")

    def integer(self, pos: int) -> int:
        return self.span(pos, _DIGITS, "expecting integer")

    def span(self, pos: int, allowed: frozenset, message: str) -> int:
        end = pos
        while end < len(self.text) and self.text[end] in allowed:
            end += 1
        if end == pos:
            self.fail(message, pos)
        return end

    def char(self, pos: int) -> tuple[int, int]:
        c = self.at(pos)
        if c == "\\":
            kind = self.at(pos + 1)
            if kind in _HEX_SIZES:
                return self.hex(pos + 2, _HEX_SIZES[kind])
            if kind and kind in _ESCAPES:
                return ord(_ESCAPES[kind]), pos + 2
            self.fail("unknown escape", pos)
        if not c:
            self.fail("unexpected end of input", pos)
        return ord(c), pos + 1

    def hex(self, pos: int, size: int) -> tuple[int, int]:
        digits = self.text[pos:pos + size]
        if len(digits) != size or any(d not in "0123456789abcdefABCDEF" for d in digits):
            self.fail(f"expecting {size} hex chars", pos)
        return int(digits, 16), pos + size

    def token(self, pos: int, negated: bool) -> tuple[Token, int]:
        if self.at(pos) != "<":
            self.fail("expecting '<'", pos)
        pos += 1
        if self.at(pos) == "[":
            end = self.integer(pos + 1)
            if self.text[end:end + 2] != "]>":
                self.fail("expecting ']>'", end)
            return Token(int(self.text[pos + 1:end]), negated), end + 2
        end = self.text.find(">", pos)
        if end < 0:
            self.fail("expecting '>'", len(self.text))
        return Token(self.text[pos - 1:end + 1], negated), end + 1

    def rule(self, pos: int) -> int:
        name_end = self.name(pos)
        name = self.text[pos:name_end]
        rule_id = self.symbol_id(name)
        self.defined_at.setdefault(rule_id, pos)
        pos = self.space(name_end, False)
        if self.text[pos:pos + 3] != "::=":
            self.fail("expecting ::=", pos)
        pos = self.alternates(self.space(pos + 3, True), name, rule_id, False)
        if self.at(pos) == "\r":
            pos += 2 if self.at(pos + 1) == "\n" else 1
        elif self.at(pos) == "\n":
            pos += 1
        elif pos < len(self.text):
            self.fail("expecting newline or end", pos)
        return self.space(pos, True)

    def alternates(self, pos: int, rule_name: str, rule_id: int, nested: bool) -> int:
        alternatives = []
        seq, pos = self.sequence(pos, rule_name, nested)
        alternatives.append(seq)
        while self.at(pos) == "|":
            seq, pos = self.sequence(self.space(pos + 1, True), rule_name, nested)
            alternatives.append(seq)
        self.rules[rule_id] = alternatives
        return pos

    def sequence(self, pos: int, rule_name: str, nested: bool) -> tuple[list, int]:
        seq: list = []
        state = {"last": 0, "n_prev": 1}  # last_sym_start, n_prev_rules
        while pos < len(self.text):
            c = self.text[pos]
            if c == '"':
                state.update(last=len(seq), n_prev=1)
                pos += 1
                while self.at(pos) != '"':
                    if not self.at(pos):
                        self.fail("unexpected end of input", pos)
                    cp, pos = self.char(pos)
                    seq.append(Chars(False, ((cp, cp),)))
                pos = self.space(pos + 1, nested)
            elif c == "[":
                state.update(last=len(seq), n_prev=1)
                chars, pos = self.char_class(pos + 1)
                if chars is not None:
                    seq.append(chars)
                pos = self.space(pos, nested)
            elif c in "<!":
                negated = c == "!"
                tok, pos = self.token(pos + negated, negated)
                self.uses_tokens = True
                state.update(last=len(seq), n_prev=1)
                seq.append(tok)
                pos = self.space(pos, nested)
            elif c in _WORD:
                end = self.name(pos)
                ref = self.symbol_id(self.text[pos:end])
                self.referenced_at.setdefault(ref, pos)
                state.update(last=len(seq), n_prev=1)
                seq.append(ref)
                pos = self.space(end, nested)
            elif c == "(":
                pos = self.space(pos + 1, True)
                n_before = len(self.symbols)
                sub = self.generate_symbol_id(rule_name)
                pos = self.alternates(pos, rule_name, sub, True)
                state.update(last=len(seq), n_prev=max(1, len(self.symbols) - n_before))
                seq.append(sub)
                if self.at(pos) != ")":
                    self.fail("expecting ')'", pos)
                pos = self.space(pos + 1, nested)
            elif c == ".":
                state.update(last=len(seq), n_prev=1)
                seq.append(ANY)
                pos = self.space(pos + 1, nested)
            elif c in "*+?":
                op_pos, pos = pos, self.space(pos + 1, nested)
                lo, hi = {"*": (0, None), "+": (1, None), "?": (0, 1)}[c]
                self.repeat(seq, state, lo, hi, rule_name, op_pos)
            elif c == "{":
                op_pos = pos
                lo, hi, pos = self.braces(pos, nested)
                self.repeat(seq, state, lo, hi, rule_name, op_pos)
            else:
                break
        return seq, pos

    def char_class(self, pos: int) -> tuple[Chars | None, int]:
        """After `[`: the class up to `]` (None for `[]` / `[^]`, which push no element)."""
        negated = self.at(pos) == "^"
        pos += negated
        ranges = []
        while self.at(pos) != "]":
            if not self.at(pos):
                self.fail("unexpected end of input", pos)
            lo, pos = self.char(pos)
            hi = lo
            if self.at(pos) == "-" and self.at(pos + 1) != "]":
                if not self.at(pos + 1):
                    self.fail("unexpected end of input", pos + 1)
                hi, pos = self.char(pos + 1)
            ranges.append((lo, hi))
        return (Chars(negated, tuple(ranges)) if ranges else None), pos + 1

    def braces(self, pos: int, nested: bool) -> tuple[int, int | None, int]:
        pos = self.space(pos + 1, nested)
        if not (self.at(pos) and self.at(pos) in _DIGITS):
            self.fail("expecting an int", pos)
        end = self.integer(pos)
        lo = hi = int(self.text[pos:end])
        pos = self.space(end, nested)
        if self.at(pos) == "}":
            pos = self.space(pos + 1, nested)
        elif self.at(pos) == ",":
            pos = self.space(pos + 1, nested)
            hi = None
            if self.at(pos) and self.at(pos) in _DIGITS:
                end = self.integer(pos)
                hi = int(self.text[pos:end])
                pos = self.space(end, nested)
            if self.at(pos) != "}":
                self.fail("expecting '}'", pos)
            pos = self.space(pos + 1, nested)
        else:
            self.fail("expecting ','", pos)
        if lo > MAX_REPETITION_THRESHOLD:
            self.fail("number of repetitions exceeds sane defaults", pos)
        if hi is not None and hi > MAX_REPETITION_THRESHOLD:
            hi = None  # llama.cpp: a huge maximum means no maximum
        return lo, hi, pos

    def repeat(self, seq: list, state: dict, lo: int, hi: int | None, rule_name: str, pos: int):
        """handle_repetitions: S{m,n} -> S x m, then n-m nested optional rules (or one S* rule)."""
        last = state["last"]
        if last == len(seq):
            self.fail("expecting preceding item to */+/?/{", pos)
        if hi is not None and hi < lo:
            self.fail(f"repetition maximum {hi} is below its minimum {lo}", pos)
        prev = seq[last:]
        total = hi if hi else (lo if lo > 0 else 1)
        if state["n_prev"] * total > MAX_REPETITION_THRESHOLD:
            self.fail("number of rules that are going to be repeated exceeds sane defaults", pos)
        if lo == 0:
            del seq[last:]
        else:
            seq.extend(prev * (lo - 1))
        n_opt = 1 if hi is None else hi - lo
        last_rec = 0
        for i in range(n_opt):
            rec = self.generate_symbol_id(rule_name)
            tail = [rec if hi is None else last_rec] if (i > 0 or hi is None) else []
            self.rules[rec] = [prev + tail, []]
            last_rec = rec
        if n_opt > 0:
            seq.append(last_rec)
        state["n_prev"] *= total


def _left_recursive_rule(rules: dict[int, list[list]]) -> int | None:
    """llama_grammar_detect_left_recursion, as llama.cpp does it: a rule "may be empty" only when
    one of its own alternatives is empty (not through other rules), so `( [x]* )*` passes."""
    n = max(rules) + 1
    visited, in_progress, may_be_empty = [False] * n, [False] * n, [False] * n

    def detect(i: int) -> int | None:  # the rule met again while in progress, if any
        if in_progress[i]:
            return i
        in_progress[i] = True
        may_be_empty[i] = any(not alt for alt in rules[i])
        for alt in rules[i]:
            for elem in alt:
                if not isinstance(elem, int):
                    break
                found = detect(elem)
                if found is not None:
                    return found
                if not may_be_empty[elem]:
                    break
        in_progress[i] = False
        visited[i] = True
        return None

    with _recursion_limit(10 * n + 1000):
        for i in sorted(rules):
            found = None if visited[i] else detect(i)
            if found is not None:
                return found
    return None


@contextmanager
def _recursion_limit(limit: int):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


class _Earley:
    """Earley recogniser. An item is (production, dot, origin); a production is (lhs, rhs)."""

    def __init__(self, grammar: Grammar):
        self.prods: list[tuple[int, tuple]] = []
        self.by_lhs: dict[int, list[int]] = {}
        for lhs in sorted(grammar.rules):
            for alt in grammar.rules[lhs]:
                self.by_lhs.setdefault(lhs, []).append(len(self.prods))
                self.prods.append((lhs, tuple(alt)))
        self.root = grammar.root
        self.nullable = self._nullable()

    def _nullable(self) -> set[int]:
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.prods:
                if lhs not in nullable and all(isinstance(s, int) and s in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        return nullable

    def run(self, text: str) -> list | None:
        """The item list after the whole text, or None once no item survives a character."""
        seeds = [(p, 0, 0) for p in self.by_lhs[self.root]]
        waiting_sets: list[dict[int, list]] = []  # set k -> rule -> items at k expecting it
        for k in range(len(text) + 1):
            items, scans = self._close(seeds, k, waiting_sets)
            if k == len(text):
                return items
            cp = ord(text[k])
            seeds = [(p, d + 1, o) for p, d, o in scans if self.prods[p][1][d].match(cp)]
            if not seeds:
                return None
        return None  # unreachable

    def _close(self, seeds: list, k: int, waiting_sets: list) -> tuple[list, list]:
        """Predict and complete from the items scanned into set k; return it and its scan items."""
        prods, by_lhs, nullable = self.prods, self.by_lhs, self.nullable
        items = list(dict.fromkeys(seeds))
        seen = set(items)
        waiting: dict[int, list] = {}
        waiting_sets.append(waiting)
        scans = []
        i = 0
        while i < len(items):
            item = items[i]
            i += 1
            p, d, o = item
            rhs = prods[p][1]
            if d == len(rhs):
                new = [(wp, wd + 1, wo) for wp, wd, wo in waiting_sets[o].get(prods[p][0], ())]
            elif isinstance(sym := rhs[d], int):
                new = [(p, d + 1, o)] if sym in nullable else []
                if sym not in waiting:
                    waiting[sym] = []
                    new.extend((q, 0, k) for q in by_lhs[sym])
                waiting[sym].append(item)
            else:
                scans.append(item)
                continue
            for n in new:
                if n not in seen:
                    seen.add(n)
                    items.append(n)
        return items, scans

    def complete(self, items: list) -> bool:
        prods, root = self.prods, self.root
        return any(o == 0 and prods[p][0] == root and d == len(prods[p][1]) for p, d, o in items)

