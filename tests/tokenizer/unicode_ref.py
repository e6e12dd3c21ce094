"""Line-by-line ports of unicode.cpp's hand-written pre-tokenizer loops (the plain twins of the
regexes in llamacpy/tokenizer/unicode.py). Slow, only for tests."""

from __future__ import annotations

from llamacpy.tokenizer.unicode import (ACCENT_MARK, LETTER, NUMBER, WHITESPACE, cpt_flags,
                                        tolower)

OUT = 0xFFFFFFFF


class _Cursor:
    def __init__(self, cpts: list[int]):
        self.cpts, self.end = cpts, len(cpts)
        self.prev_end, self.pieces = 0, []

    def cpt(self, pos: int) -> int:
        return self.cpts[pos] if 0 <= pos < self.end else OUT

    def flags(self, pos: int) -> int:
        return cpt_flags(self.cpts[pos]) if 0 <= pos < self.end else 0

    def add(self, end: int) -> int:
        n = end - self.prev_end
        if n > 0:
            self.pieces.append(n)
        self.prev_end = end
        return n


def _contraction(c: _Cursor, pos: int, fold) -> int:
    # regex: 's|'t|'re|'ve|'m|'ll|'d (case-folded when fold is tolower); returns the new pos
    if c.cpt(pos) == ord("'") and pos + 1 < c.end:
        nxt = fold(c.cpt(pos + 1))
        if nxt in map(ord, "stmd"):
            return pos + c.add(pos + 2)
        if pos + 2 < c.end:
            pair = (nxt, fold(c.cpt(pos + 2)))
            if pair in ((ord("r"), ord("e")), (ord("v"), ord("e")), (ord("l"), ord("l"))):
                return pos + c.add(pos + 3)
    return -1


def _whitespace(c: _Cursor, pos: int, newlines: bool) -> int:
    n, last_nl = 0, 0
    while c.flags(pos + n) & WHITESPACE:
        if c.cpt(pos + n) in (13, 10):
            last_nl = pos + n + 1
        n += 1
    if newlines and last_nl > 0:  # \s*[\r\n]+
        c.add(last_nl)
        return last_nl
    if n > 1 and c.cpt(pos + n) != OUT:  # \s+(?!\S)
        pos += n - 1
        c.add(pos)
        return pos
    if n > 0:
        pos += n
        c.add(pos)
        return pos
    c.add(pos + 1)  # no match
    return pos + 1


def split_gpt2(cpts: list[int]) -> list[int]:
    """unicode_regex_split_custom_gpt2 on one segment: the piece lengths."""
    c, pos = _Cursor(cpts), 0
    while pos < c.end:
        cpt, flags = c.cpt(pos), c.flags(pos)
        p = _contraction(c, pos, lambda x: x)
        if p >= 0:
            pos = p
            continue
        f2 = c.flags(pos + 1) if cpt == 32 else flags
        for cls in (LETTER, NUMBER):
            if f2 & cls:
                pos += cpt == 32
                while f2 & cls:
                    pos += 1
                    f2 = c.flags(pos)
                c.add(pos)
                break
        else:
            if not f2 & (WHITESPACE | LETTER | NUMBER) and f2:
                pos += cpt == 32
                while not f2 & (WHITESPACE | LETTER | NUMBER) and f2:
                    pos += 1
                    f2 = c.flags(pos)
                c.add(pos)
                continue
            pos = _whitespace(c, pos, newlines=False)
    return c.pieces


def split_llama3(cpts: list[int], max_digits: int = 3, marks: bool = False) -> list[int]:
    """unicode_regex_split_custom_llama3 (max_digits=3), _qwen2 (1) and _qwen35 (1, marks)."""
    word = LETTER | (ACCENT_MARK if marks else 0)
    c, pos = _Cursor(cpts), 0
    while pos < c.end:
        cpt, flags = c.cpt(pos), c.flags(pos)
        p = _contraction(c, pos, tolower)
        if p >= 0:
            pos = p
            continue
        if not (cpt in (13, 10) or flags & NUMBER) and (flags & word or c.flags(pos + 1) & word):
            pos += 1
            while c.flags(pos) & word:
                pos += 1
            c.add(pos)
            continue
        if flags & NUMBER:
            ini = pos
            while c.flags(pos) & NUMBER:
                pos += 1
                if pos - ini >= max_digits:
                    c.add(pos)
                    ini = pos
            c.add(pos)
            continue
        f2 = c.flags(pos + 1) if cpt == 32 else flags
        if not f2 & (WHITESPACE | word | NUMBER) and flags:
            pos += cpt == 32
            while not f2 & (WHITESPACE | word | NUMBER) and f2:
                pos += 1
                f2 = c.flags(pos)
            while c.cpt(pos) in (13, 10):
                pos += 1
            c.add(pos)
            continue
        pos = _whitespace(c, pos, newlines=True)
    return c.pieces
