"""The regex forms of llama.cpp's hand-written pre-tokenizers agree with line-by-line ports of the
C++ loops; UTF-8 decoding and the byte map follow unicode.cpp."""

from __future__ import annotations

import pytest

from llamacpy.tokenizer import unicode as u
from tests.tokenizer.fuzz_text import random_texts
from tests.tokenizer.unicode_ref import split_gpt2, split_llama3

TEXTS = [u.decode_utf8(t) for t in random_texts(7, 1500, max_pieces=30)] + [
    "", " ", "  ", "a  ", "'s", "'S'LL", " 'x", "x'", " \n \n  ", "\r\n\r\n x", "123456789",
    "  \u0301\u0301a", "a\u0301b", " !!\n\n", " \U000e0001", "\u3000\u3000x", "e\u0300\u0301 ",
]
CASES = {
    "gpt2": (u.GPT2_REGEX, split_gpt2),
    "llama3": (u.LLAMA3_REGEXES[1], split_llama3),
    "llama3-ci": (u.LLAMA3_REGEXES[0], split_llama3),
    "qwen2": (u.QWEN2_REGEX, lambda c: split_llama3(c, max_digits=1)),
    "qwen35": (u.QWEN35_REGEX, lambda c: split_llama3(c, max_digits=1, marks=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_custom_splitters_match_cpp_loops(case):
    regex, reference = CASES[case]
    for text in TEXTS:
        spans = u.split_spans(text, (regex,))
        assert [e - s for s, e in spans] == reference([ord(c) for c in text]), repr(text)


def test_decode_follows_llama_cpp():
    # invalid bytes become U+FFFD one byte at a time; surrogates and overlongs decode
    assert u.decode_utf8(b"a\x80b") == "a\ufffdb"
    assert u.decode_utf8(b"\xe4\xb8") == "\ufffd\ufffd"
    assert u.decode_utf8(b"\xed\xa0\x80") == "\ud800"
    assert u.decode_utf8(b"\xc0\x80") == "\x00"
    assert u.decode_utf8(b"\xf8\x88\x80\x80\x80") == "\ufffd" * 5
    with pytest.raises(ValueError):
        u.decode_utf8(b"\xf5\x80\x80\x80")  # past U+10FFFF: llama.cpp aborts


def test_flags_and_byte_map():
    flags = u.flags_table()
    assert flags[ord(" ")] == u.SEPARATOR | u.WHITESPACE
    assert flags[ord("A")] & u.LETTER and flags[ord("A")] & u.UPPERCASE
    assert flags[0x0301] & u.ACCENT_MARK and flags[0x3000] & u.WHITESPACE
    assert flags[0x10FFFF] == u.UNDEFINED
    assert u.tolower(ord("Ä")) == ord("ä") and u.tolower(0x212A) == ord("k")
    assert u.byte_encode(bytes(range(256))) == "".join(u.BYTE_TO_CHAR)
    assert u.byte_encode(b" \n") == "\u0120\u010a"
    assert {u.CHAR_TO_BYTE[c] for c in u.BYTE_TO_CHAR} == set(range(256))


def test_collapsed_regex_is_built_like_llama_cpp():
    # unicode_regex_split rewrites \p{..} into the collapsed byte classes
    pat = u._collapsed_regex("[\\p{P}\\$\\+<=>\\^~\\|]+").pattern
    assert pat.startswith(b"[\xd3!-#%-*,-/:-;?-@\\[-\\]_\\{\\}\\$")
    assert u._collapsed_regex("\\p{N}+").pattern == b"[\xd10-9]+"
    assert u._wide_regex("\\s+$").pattern == "\\s+\\Z"
