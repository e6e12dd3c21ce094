"""GBNF, llama.cpp's grammar format (grammars/README.md; src/llama-grammar.cpp parse_*), read into
rules and written out as a Lark grammar for llguidance.

We parse GBNF ourselves, for two reasons. llama.cpp matches a grammar character by character,
while llguidance lexes: a rule written as one lexeme is matched greedily, so `w "b"` with
`w ::= [a-z]+` would never accept "aab" (llguidance's own GBNF converter does this). Here every
character of a literal and every character class is its own one-character lexeme, so the
lexer never has a choice to make and the Earley parser sees exactly llama.cpp's language.
And we can report each error by line and column, and resolve `<token>` references.
"""

from __future__ import annotations

from dataclasses import dataclass


class GrammarError(ValueError):
    """A grammar (or schema) that cannot be used; `line`/`column` are 1-based, 0 when unknown."""

    def __init__(self, message: str, line: int = 0, column: int = 0):
        where = f" at line {line}, column {column}" if line else ""
        super().__init__(f"{message}{where}")
        self.reason, self.line, self.column = message, line, column


# -- the rules, as parsed --------------------------------------------------------------------

@dataclass
class Chars:  # one character: a literal's character (ranges [(c, c)]), a class, or `.`
    ranges: list[tuple[int, int]]
    negated: bool = False


@dataclass
class Token:  # a token reference: <[id]>, <text> or their negation !<...>
    id: int | None
    text: str | None
    negated: bool
    line: int
    column: int


@dataclass
class Ref:
    name: str
    line: int
    column: int


@dataclass
class Repeat:
    item: object
    min: int
    max: int | None  # None: unbounded


@dataclass
class Alt:  # alternatives, each a sequence (a list of items)
    options: list[list[object]]


def _is_word(c: str) -> bool:
    return len(c) == 1 and c.isascii() and (c.isalnum() or c in "-_")


# llama.cpp's MAX_REPETITION_THRESHOLD: bounds on {m,n} and on the rules a repetition expands to
MAX_REPETITION = 2000


class _Parser:
    def __init__(self, text: str):
        self.text, self.pos = text, 0
        self.rules: dict[str, Alt] = {}
        self.refs: list[Ref] = []
        self.n_symbols = 0  # the helper rules llama.cpp's parser would have made so far

    # -- positions and errors --
    def where(self, pos: int | None = None) -> tuple[int, int]:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def fail(self, message: str, pos: int | None = None) -> GrammarError:
        return GrammarError(message, *self.where(pos))

    def peek(self, n: int = 0) -> str:
        i = self.pos + n
        return self.text[i] if i < len(self.text) else ""

    def skip_space(self, newlines: bool) -> None:
        """Spaces, tabs, comments, and newlines where they do not end a rule."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c == "#":
                while self.pos < len(self.text) and self.text[self.pos] not in "\r\n":
                    self.pos += 1
            elif c in " \t" or (newlines and c in "\r\n"):
                self.pos += 1
            else:
                return

    # -- the grammar --
    def parse(self) -> dict[str, Alt]:
        self.skip_space(True)
        while self.pos < len(self.text):
            self.rule()
            self.skip_space(True)
        for ref in self.refs:
            if ref.name not in self.rules:
                raise GrammarError(f"undefined rule identifier '{ref.name}'", ref.line, ref.column)
        if "root" not in self.rules:
            raise GrammarError("the grammar has no 'root' rule", 1, 1)
        _check_left_recursion(self.rules)
        return self.rules

    def name(self) -> str:
        start = self.pos
        while _is_word(self.peek()):
            self.pos += 1
        if self.pos == start:
            raise self.fail(f"expecting a rule name, found {self._found()}")
        return self.text[start:self.pos]

    def _found(self) -> str:
        return repr(self.text[self.pos:self.pos + 12]) if self.pos < len(self.text) else "the end"

    def rule(self) -> None:
        start = self.pos
        name = self.name()
        self.skip_space(False)
        if not self.text.startswith("::=", self.pos):
            raise self.fail(f"expecting ::= after '{name}', found {self._found()}")
        self.pos += 3
        self.skip_space(True)
        if name in self.rules:
            raise self.fail(f"rule '{name}' is defined twice", start)
        self.rules[name] = self.alternatives(nested=False)
        if self.pos < len(self.text):
            if self.peek() == "\r":
                self.pos += 1
            if self.peek() != "\n":
                raise self.fail(f"expecting the end of rule '{name}', found {self._found()}")
            self.pos += 1

    def alternatives(self, nested: bool) -> Alt:
        options = [self.sequence(nested)]
        while self.peek() == "|":
            self.pos += 1
            self.skip_space(True)
            options.append(self.sequence(nested))
        return Alt(options)

    def sequence(self, nested: bool) -> list[object]:
        items: list[object] = []
        weights: list[int] = []  # per item, the rules a repetition of it would copy
        while self.pos < len(self.text):
            n_items = len(items)
            c = self.peek()
            start = self.pos
            if c == '"':
                self.pos += 1
                chars = []
                while self.peek() != '"':
                    if not self.peek():
                        raise self.fail("unterminated string literal", start)
                    chars.append(self.char())
                self.pos += 1
                items.append(Alt([[Chars([(ch, ch)]) for ch in chars]]) if len(chars) != 1
                             else Chars([(chars[0], chars[0])]))
            elif c == "[":
                items.append(self.char_class())
            elif c == ".":
                self.pos += 1
                items.append(Chars([(0, 0x10FFFF)]))
            elif c == "(":
                self.pos += 1
                self.skip_space(True)
                before = self.n_symbols
                self.n_symbols += 1
                group = self.alternatives(nested=True)
                if self.peek() != ")":
                    raise self.fail(f"expecting ')', found {self._found()}", self.pos)
                self.pos += 1
                items.append(group)
                weights.append(max(1, self.n_symbols - before))
            elif c == "<" or (c == "!" and self.peek(1) == "<"):
                items.append(self.token())
            elif _is_word(c):
                self.name()
                self.refs.append(Ref(self.text[start:self.pos], *self.where(start)))
                items.append(self.refs[-1])
            elif c in "*+?{":
                if not items:
                    raise self.fail(f"expecting an item before '{c}'")
                items[-1], weights[-1] = self.repetition(items[-1], weights[-1])
            else:
                break
            if len(items) > n_items and len(weights) < len(items):
                weights.append(1)
            self.skip_space(nested)
        return items

    def repetition(self, item: object, weight: int) -> tuple[Repeat, int]:
        """The repetition of `item` and its weight; llama.cpp's limits on how far it expands."""
        start = self.pos
        low, high = self.repetition_bounds()
        total = high if high else (low if low > 0 else 1)
        if weight * total > MAX_REPETITION:
            raise self.fail("the rules this repetition expands to exceed llama.cpp's limit of "
                            f"{MAX_REPETITION}: reduce the repetitions or the rule's complexity",
                            start)
        self.n_symbols += 1 if high is None else high - low
        return Repeat(item, low, high), weight * total

    def repetition_bounds(self) -> tuple[int, int | None]:
        c = self.peek()
        self.pos += 1
        if c == "*":
            return 0, None
        if c == "+":
            return 1, None
        if c == "?":
            return 0, 1
        start = self.pos - 1
        self.skip_space(True)
        low = self.integer()
        self.skip_space(True)
        high: int | None = low
        if self.peek() == ",":
            self.pos += 1
            self.skip_space(True)
            high = self.integer() if self.peek().isdigit() else None
            self.skip_space(True)
        if self.peek() != "}":
            raise self.fail(f"expecting '}}' in a repetition, found {self._found()}")
        self.pos += 1
        if high is not None and high < low:
            raise self.fail(f"repetition {{{low},{high}}}: the maximum is below the minimum", start)
        if low > MAX_REPETITION:
            raise self.fail(f"{low} repetitions exceed llama.cpp's limit of {MAX_REPETITION}",
                            start)
        if high is not None and high > MAX_REPETITION:
            high = None  # llama.cpp reads a maximum past its limit as no maximum
        return low, high

    def integer(self) -> int:
        start = self.pos
        while self.peek().isdigit():
            self.pos += 1
        if self.pos == start:
            raise self.fail(f"expecting a number, found {self._found()}")
        return int(self.text[start:self.pos])

    def char_class(self) -> Chars:
        start = self.pos
        self.pos += 1
        negated = self.peek() == "^"
        if negated:
            self.pos += 1
        ranges = []
        while self.peek() != "]":
            if not self.peek():
                raise self.fail("unterminated character class", start)
            low = self.char()
            high = low
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.pos += 1
                high = self.char()
            if high < low:
                raise self.fail(f"character range {chr(low)!r}-{chr(high)!r} is reversed")
            ranges.append((low, high))
        self.pos += 1
        return Chars(ranges, negated)

    def char(self) -> int:
        """One code point of a literal or class, with llama.cpp's escapes."""
        c = self.peek()
        if c != "\\":
            self.pos += 1
            return ord(c)
        start = self.pos
        e = self.peek(1)
        self.pos += 2
        simple = {"t": 9, "n": 10, "r": 13, "\\": 92, '"': 34, "[": 91, "]": 93}
        if e in simple:
            return simple[e]
        width = {"x": 2, "u": 4, "U": 8}.get(e)
        if width is None:
            raise self.fail(f"unknown escape '\\{e}'", start)
        digits = self.text[self.pos:self.pos + width]
        if len(digits) != width or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise self.fail(f"expecting {width} hex digits after '\\{e}'", start)
        self.pos += width
        value = int(digits, 16)
        if value > 0x10FFFF:
            raise self.fail(f"code point {digits} is out of range", start)
        return value

    def token(self) -> Token:
        start = self.pos
        negated = self.peek() == "!"
        if negated:
            self.pos += 1
        end = self.text.find(">", self.pos)
        newline = self.text.find("\n", self.pos)
        if end < 0 or 0 <= newline < end:
            raise self.fail("unterminated token reference '<...>'", start)
        body = self.text[self.pos + 1:end]
        self.pos = end + 1
        line, column = self.where(start)
        if body.startswith("[") and body.endswith("]"):
            if not body[1:-1].isdigit():
                raise GrammarError(f"token reference <{body}>: expecting a token id", line, column)
            return Token(int(body[1:-1]), None, negated, line, column)
        if not body:
            raise GrammarError("empty token reference '<>'", line, column)
        return Token(None, f"<{body}>", negated, line, column)


def _check_left_recursion(rules: dict[str, Alt]) -> None:
    """llama.cpp refuses a rule that can reach itself before reading a character."""
    nullable: dict[str, bool] = {name: False for name in rules}

    def can_be_empty(node: object) -> bool:
        if isinstance(node, Ref):
            return nullable[node.name]
        if isinstance(node, Repeat):
            return node.min == 0 or can_be_empty(node.item)
        if isinstance(node, Alt):
            return any(all(can_be_empty(i) for i in option) for option in node.options)
        return False

    changed = True
    while changed:
        changed = False
        for name, alt in rules.items():
            if not nullable[name] and can_be_empty(alt):
                nullable[name] = changed = True

    def leftmost(node: object) -> set[str]:
        if isinstance(node, Ref):
            return {node.name}
        if isinstance(node, Repeat):
            return leftmost(node.item)
        if isinstance(node, Alt):
            found: set[str] = set()
            for option in node.options:
                for item in option:
                    found |= leftmost(item)
                    if not can_be_empty(item):
                        break
            return found
        return set()

    graph = {name: leftmost(alt) for name, alt in rules.items()}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str) -> None:
        state[name] = 1
        for nxt in graph[name]:
            if state.get(nxt) == 1:
                raise GrammarError(f"left recursion: rule '{nxt}' can reach itself before "
                                   "reading a character (llama.cpp refuses it)", 1, 1)
            if nxt not in state:
                visit(nxt)
        state[name] = 2

    for name in rules:
        if name not in state:
            visit(name)


def parse_gbnf(text: str) -> dict[str, Alt]:
    """The rules of a GBNF grammar; GrammarError says what is wrong and where."""
    return _Parser(text).parse()


def token_refs(rules: dict[str, Alt]) -> list[Token]:
    found: list[Token] = []

    def walk(node: object) -> None:
        if isinstance(node, Token):
            found.append(node)
        elif isinstance(node, Alt):
            for option in node.options:
                for item in option:
                    walk(item)
        elif isinstance(node, Repeat):
            walk(node.item)

    for alt in rules.values():
        walk(alt)
    return found


# -- Lark out ------------------------------------------------------------------------------

def _rule_name(name: str) -> str:
    # Lark rule names are lowercase words; GBNF allows '-' and capitals: mangle without clashes
    out = "".join(c if c.islower() or c.isdigit() else f"_{ord(c):x}_" for c in name)
    return "r_" + out


def _code_point(c: int) -> str:
    return f"\\x{{{c:x}}}"


def _chars_regex(node: Chars) -> str:
    if not node.negated and node.ranges == [(0, 0x10FFFF)]:
        return "/(?s:.)/"
    parts = "".join(_code_point(a) if a == b else f"{_code_point(a)}-{_code_point(b)}"
                    for a, b in node.ranges)
    if not parts:  # [] matches nothing, [^] matches any character
        return "/(?s:.)/" if node.negated else "/[^\\x{0}-\\x{10ffff}]/"
    return f"/[{'^' if node.negated else ''}{parts}]/"


def to_lark(rules: dict[str, Alt], token_id=None) -> str:
    """Lark text for llguidance; `token_id(text)` resolves <text> references to an id."""

    def item(node: object) -> str:
        if isinstance(node, Chars):
            return _chars_regex(node)
        if isinstance(node, Ref):
            return _rule_name(node.name)
        if isinstance(node, Token):
            tid = node.id if node.id is not None else _resolve(node, token_id)
            return f"<[{'^' if node.negated else ''}{tid}]>"
        if isinstance(node, Repeat):
            inner = item(node.item)
            if (node.min, node.max) == (0, None):
                return f"{inner}*"
            if (node.min, node.max) == (1, None):
                return f"{inner}+"
            if (node.min, node.max) == (0, 1):
                return f"{inner}?"
            return f"{inner}{{{node.min},{'' if node.max is None else node.max}}}"
        if isinstance(node, Alt):
            return f"({alternatives(node)})"
        raise TypeError(node)

    def sequence(items: list[object]) -> str:
        return " ".join(item(i) for i in items) if items else '""'

    def alternatives(alt: Alt) -> str:
        return " | ".join(sequence(option) for option in alt.options)

    lines = ["%llguidance {}", "", f"start: {_rule_name('root')}"]
    lines += [f"{_rule_name(name)}: {alternatives(alt)}" for name, alt in rules.items()]
    return "\n".join(lines) + "\n"


def _resolve(node: Token, token_id) -> int:
    tid = token_id(node.text) if token_id is not None else None
    if tid is None:
        raise GrammarError(f"token reference {node.text} is not a single token of this model's "
                           "vocabulary", node.line, node.column)
    return tid
