"""llama.cpp's Unicode handling (src/unicode.cpp): code point flags, UTF-8 decoding with its
error rules, the GPT-2 byte map and `regex_split`, the pre-tokenizer driver.

Categories come from llama.cpp's own tables (unicode_data.py), never from Python's `unicodedata`,
so every split agrees with llama.cpp even where the Unicode versions differ.
"""

from __future__ import annotations

import re
from functools import cache

import numpy as np

from . import unicode_data

MAX_CODEPOINTS = 0x110000

# unicode_cpt_flags bits (src/unicode.h)
UNDEFINED, NUMBER, LETTER, SEPARATOR = 0x0001, 0x0002, 0x0004, 0x0008
ACCENT_MARK, PUNCTUATION, SYMBOL, CONTROL = 0x0010, 0x0020, 0x0040, 0x0080
MASK_CATEGORIES, WHITESPACE, LOWERCASE, UPPERCASE, NFD = 0x00FF, 0x0100, 0x0200, 0x0400, 0x0800


def _numbers(table: tuple[str, ...]) -> list[int]:
    return [int(x, 16) for x in "".join(table).split()]


@cache
def flags_table() -> np.ndarray:
    """uint16 [MAX_CODEPOINTS]: llama.cpp's flags of every code point (unicode_cpt_flags_array)."""
    v = np.array(_numbers(unicode_data.RANGES_FLAGS), dtype=np.int64).reshape(-1, 2)
    flags = np.repeat(v[:-1, 1], np.diff(v[:, 0])).astype(np.uint16)
    flags[_numbers(unicode_data.WHITESPACE)] |= WHITESPACE
    flags[np.array(_numbers(unicode_data.MAP_LOWERCASE)[1::2])] |= LOWERCASE
    flags[np.array(_numbers(unicode_data.MAP_UPPERCASE)[1::2])] |= UPPERCASE
    flags[np.array(_numbers(unicode_data.RANGES_NFD)[2::3])] |= NFD
    return flags


def cpt_flags(cpt: int) -> int:
    """unicode_cpt_flags_from_cpt: out-of-range code points are UNDEFINED."""
    return int(flags_table()[cpt]) if cpt < MAX_CODEPOINTS else UNDEFINED


@cache
def _lowercase_map() -> dict[int, int]:
    v = _numbers(unicode_data.MAP_LOWERCASE)
    return dict(zip(v[::2], v[1::2]))


def tolower(cpt: int) -> int:
    """unicode_tolower."""
    return _lowercase_map().get(cpt, cpt)


@cache
def _nfd_ranges() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    v = np.array(_numbers(unicode_data.RANGES_NFD), dtype=np.int64).reshape(-1, 3)
    return v[:, 0], v[:, 1], v[:, 2]


def normalize_nfd(cpts: list[int]) -> list[int]:
    """unicode_cpts_normalize_nfd: each code point maps to the base of its range (no expansion)."""
    first, last, nfd = _nfd_ranges()
    idx = np.searchsorted(first, np.asarray(cpts, dtype=np.int64), side="right") - 1
    return [int(nfd[i]) if first[i] <= c <= last[i] else c for c, i in zip(cpts, idx)]


# --- UTF-8 -------------------------------------------------------------------------------------


def utf8_len(lead: int) -> int:
    """unicode_len_utf8: the length a lead byte announces (continuation bytes count as 1)."""
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


def _cpts_slow(data: bytes) -> list[int]:
    # unicode_cpts_from_utf8 byte by byte: an invalid sequence yields U+FFFD and skips one byte
    out, i, n = [], 0, len(data)
    while i < n:
        b0 = data[i]
        if b0 < 0x80:
            out.append(b0)
            i += 1
            continue
        size = 0 if not b0 & 0x40 else 2 if not b0 & 0x20 else 3 if not b0 & 0x10 else (
            4 if not b0 & 0x08 else 0)
        tail = data[i + 1 : i + size]
        if size == 0 or i + size - 1 >= n or any((b & 0xC0) != 0x80 for b in tail):
            out.append(0xFFFD)
            i += 1
            continue
        cpt = b0 & (0x7F >> size)
        for b in tail:
            cpt = (cpt << 6) | (b & 0x3F)
        out.append(cpt)
        i += size
    return out


def decode_utf8(data: bytes) -> str:
    """Text as llama.cpp decodes it (unicode_cpts_from_utf8). Surrogates and overlong forms decode
    as llama.cpp does; code points past U+10FFFF make llama.cpp abort, so they raise here."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    cpts = _cpts_slow(data)
    if max(cpts) >= MAX_CODEPOINTS:
        raise ValueError("text decodes to a code point past U+10FFFF; llama.cpp aborts on it")
    return "".join(map(chr, cpts))


def encode_utf8(text: str) -> bytes:
    """unicode_cpt_to_utf8 over a string (lone surrogates encode as 3 bytes, as in llama.cpp)."""
    return text.encode("utf-8", "surrogatepass")


def as_cpts(text: str) -> np.ndarray:
    """uint32 [len(text)]: the code points of text."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def from_cpts(cpts: np.ndarray) -> str:
    return cpts.astype("<u4").tobytes().decode("utf-32-le", "surrogatepass")


# --- GPT-2 byte map (unicode_byte_to_utf8_map) --------------------------------------------------


def _byte_chars() -> list[str]:
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table, n = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


BYTE_TO_CHAR: list[str] = _byte_chars()
CHAR_TO_BYTE: dict[str, int] = {c: b for b, c in enumerate(BYTE_TO_CHAR)}
_BYTE_TRANSLATE = {b: c for b, c in enumerate(BYTE_TO_CHAR)}


def byte_encode(data: bytes) -> str:
    """Each byte as its GPT-2 stand-in character (unicode_byte_encoding_process)."""
    return data.decode("latin-1").translate(_BYTE_TRANSLATE)


# --- pre-tokenizer regexes (unicode_regex_split) ------------------------------------------------

# The hand-written splitters of unicode.cpp, keyed by the regex text they replace.
GPT2_REGEX = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
LLAMA3_REGEXES = (
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
)
QWEN2_REGEX = (
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
QWEN35_REGEX = (
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
    "[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
)
NEWLINES_REGEX = "[^\\n]+|[\\n]+"

# The hand-written splitters, restated as regexes over "class codes" (one byte per code point,
# see class_codes): A letter, 0 number, ^ accent mark, \x0b other whitespace, . anything else;
# space, \r, \n, ' and the contraction letters stay themselves. Each ends in a one-character
# fallback so every code point lands in some piece, as the C++ loops guarantee.
_WS = rb"[ \r\n\x0b]"
_WS_TAIL = _WS + rb"+(?!" + _WS.replace(b"[", b"[^", 1) + rb")|" + _WS + rb"+|[\s\S]"
_CONTRACTION_CI = rb"'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])|"
_CUSTOM = {
    # unicode_regex_split_custom_gpt2
    GPT2_REGEX: rb"'(?:[stmd]|re|ve|ll)| ?[A-Za-z]+| ?0+| ?[^ \r\n\x0bA-Za-z0]+|" + _WS_TAIL,
    # unicode_regex_split_custom_llama3
    **{r: _CONTRACTION_CI + rb"[^\r\n0A-Za-z]?[A-Za-z]+|0{1,3}| ?[^ \r\n\x0bA-Za-z0]+[\r\n]*|"
       + _WS + rb"*[\r\n]|" + _WS_TAIL for r in LLAMA3_REGEXES},
    # unicode_regex_split_custom_qwen2
    QWEN2_REGEX: _CONTRACTION_CI + rb"[^\r\n0A-Za-z]?[A-Za-z]+|0| ?[^ \r\n\x0bA-Za-z0]+[\r\n]*|"
    + _WS + rb"*[\r\n]|" + _WS_TAIL,
    # unicode_regex_split_custom_qwen35: letter runs also take accent marks
    QWEN35_REGEX: _CONTRACTION_CI + rb"[^\r\n0]?[A-Za-z^]+|0| ?[^ \r\n\x0bA-Za-z^0]+[\r\n]*|"
    + _WS + rb"*[\r\n]|" + _WS_TAIL,
    # unicode_regex_split_custom_newlines
    NEWLINES_REGEX: rb"[^\n]+|\n+",
}
_CUSTOM_COMPILED = {k: re.compile(v) for k, v in _CUSTOM.items()}


@cache
def class_codes() -> np.ndarray:
    """uint8 [MAX_CODEPOINTS]: the class code of each code point for the hand-written splitters."""
    flags = flags_table()
    cat = flags & MASK_CATEGORIES
    codes = np.full(MAX_CODEPOINTS, ord("."), dtype=np.uint8)
    codes[cat == LETTER] = ord("A")
    codes[cat == NUMBER] = ord("0")
    codes[cat == ACCENT_MARK] = ord("^")
    codes[(flags & WHITESPACE) != 0] = 0x0B
    for ch in " \r\n'stmdrevlSTMDREVL":  # no other code point lower-cases to these letters
        codes[ord(ch)] = ord(ch)
    return codes


@cache
def collapse_codes() -> np.ndarray:
    """uint8 [MAX_CODEPOINTS]: the byte each code point collapses to for std::regex
    (unicode_regex_split's text_collapsed): ASCII as is, whitespace 0x0B, categories 0xD1-0xD5."""
    flags = flags_table()
    cat = flags & MASK_CATEGORIES
    out = np.full(MAX_CODEPOINTS, 0xD0, dtype=np.uint8)
    for flag, code in ((NUMBER, 0xD1), (LETTER, 0xD2), (PUNCTUATION, 0xD3), (ACCENT_MARK, 0xD4),
                       (SYMBOL, 0xD5)):
        out[cat == flag] = code
    out[(flags & WHITESPACE) != 0] = 0x0B
    out[:128] = np.arange(128)
    return out


# k_ucat_enum / k_ucat_cpt / k_ucat_map of unicode_regex_split
_UCAT = {"\\p{N}": NUMBER, "\\p{L}": LETTER, "\\p{P}": PUNCTUATION, "\\p{M}": ACCENT_MARK,
         "\\p{S}": SYMBOL, "\\p{Lu}": LETTER, "\\p{Ll}": LETTER, "\\p{Lt}": LETTER,
         "\\p{Lm}": LETTER, "\\p{Lo}": LETTER}
_UCAT_CPT = {NUMBER: b"\xd1", LETTER: b"\xd2", PUNCTUATION: b"\xd3", ACCENT_MARK: b"\xd4",
             SYMBOL: b"\xd5"}
_UCAT_MAP = {NUMBER: b"\x30-\x39", LETTER: b"\x41-\x5A\x61-\x7A",
             PUNCTUATION: b"\x21-\x23\x25-\x2A\x2C-\x2F\x3A-\x3B\x3F-\x40"
             b"\\\x5B-\\\x5D\x5F\\\x7B\\\x7D",
             ACCENT_MARK: b"", SYMBOL: b"\\\x24\\\x2B\x3C-\x3E\x5E\x60\\\x7C\\\x7E"}


def _uses_categories(regex: str) -> bool:
    return any(cat in regex for cat in _UCAT)


def _ecma_to_python(regex: bytes) -> bytes:
    # ECMAScript '$' (outside a class) is end of input only; Python's also matches before a
    # final newline.
    out, inside, i = bytearray(), False, 0
    while i < len(regex):
        c = regex[i : i + 1]
        if c == b"\\":
            out += regex[i : i + 2]
            i += 2
            continue
        if c == b"[" or c == b"]":
            inside = c == b"["
        out += b"\\Z" if c == b"$" and not inside else c
        i += 1
    return bytes(out)


@cache
def _collapsed_regex(regex: str) -> re.Pattern:
    """The regex rewritten over collapsed text, exactly as unicode_regex_split builds it."""
    src, out, inside, i = regex.encode("ascii"), bytearray(), False, 0
    while i < len(src):
        c = src[i : i + 1]
        if c == b"[" and (i == 0 or src[i - 1 : i] != b"\\"):
            out += b"["
            inside = True
        elif inside and c == b"]" and src[i - 1 : i] != b"\\":
            out += b"]"
            inside = False
        elif c == b"\\" and i + 3 < len(src) and src[i + 1 : i + 3] == b"p{":
            close = src.find(b"}", i + 3)
            pat = src[i : close + 1].decode() if 0 <= close <= i + 10 else ""
            if pat in _UCAT:
                body = _UCAT_CPT[_UCAT[pat]] + _UCAT_MAP[_UCAT[pat]]
                out += body if inside else b"[" + body + b"]"
                i = close + 1
                continue
            out += c
        else:
            out += c
        i += 1
    return re.compile(_ecma_to_python(bytes(out)))


@cache
def _wide_regex(regex: str) -> re.Pattern:
    """std::wregex over code points; \\s is ASCII-only there (non-ASCII spaces become 0x0B)."""
    py = _ecma_to_python(regex.encode("utf-8", "surrogatepass")).decode("utf-8", "surrogatepass")
    return re.compile(py, re.ASCII)


def _split_stl(pattern: re.Pattern, text, segments: list[tuple[int, int]]) -> list[tuple[int, int]]:
    # unicode_regex_split_stl: matches and the gaps between them each become a piece
    out = []
    for start, end in segments:
        pos = start
        for m in pattern.finditer(text[start:end]):
            s, e = m.start() + start, m.end() + start
            if s > pos:
                out.append((pos, s))
            out.append((s, e))
            pos = e
        if pos < end:
            out.append((pos, end))
    return out


def _split_custom(pattern: re.Pattern, codes: bytes, segments) -> list[tuple[int, int]]:
    out = []
    for start, end in segments:
        out += [(m.start() + start, m.end() + start) for m in pattern.finditer(codes[start:end])]
    return out


class _Views:
    """Lazily built representations of one text, shared by the regexes of a pre-tokenizer."""

    def __init__(self, text: str):
        self.text = text
        self.cpts = as_cpts(text)
        self._codes = self._collapsed = self._wide = None

    @property
    def codes(self) -> bytes:
        if self._codes is None:
            self._codes = class_codes()[self.cpts].tobytes()
        return self._codes

    @property
    def collapsed(self) -> bytes:
        if self._collapsed is None:
            self._collapsed = collapse_codes()[self.cpts].tobytes()
        return self._collapsed

    @property
    def wide(self) -> str:
        if self._wide is None:
            c = self.cpts
            ws = (c > 0x7F) & ((flags_table()[c] & WHITESPACE) != 0)
            self._wide = from_cpts(np.where(ws, 0x0B, c)) if ws.any() else self.text
        return self._wide


def split_spans(text: str, regexes: tuple[str, ...]) -> list[tuple[int, int]]:
    """The (start, end) code point spans of unicode_regex_split's pieces."""
    if not text:
        return []
    views, segments = _Views(text), [(0, len(text))]
    for regex in regexes:
        if regex in _CUSTOM_COMPILED:
            segments = _split_custom(_CUSTOM_COMPILED[regex], views.codes, segments)
        elif _uses_categories(regex):
            segments = _split_stl(_collapsed_regex(regex), views.collapsed, segments)
        else:
            segments = _split_stl(_wide_regex(regex), views.wide, segments)
    return segments


def regex_split(text: str, regexes: tuple[str, ...], byte_encoded: bool = True) -> list[str]:
    """unicode_regex_split: the pieces of text, GPT-2 byte-encoded when byte_encoded."""
    spans = split_spans(text, regexes)
    if not byte_encoded:
        return [text[s:e] for s, e in spans]
    if text.isascii():
        enc = byte_encode(text.encode("ascii"))
        return [enc[s:e] for s, e in spans]
    cpts = as_cpts(text)
    ends = np.cumsum(1 + (cpts >= 0x80) + (cpts >= 0x800) + (cpts >= 0x10000)).tolist()
    enc = byte_encode(encode_utf8(text))
    return [enc[(ends[s - 1] if s else 0) : ends[e - 1]] for s, e in spans]
