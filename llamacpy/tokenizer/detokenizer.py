"""Token ids back to bytes: llama_token_to_piece, llama_detokenize, and a streaming detokenizer
that never splits a UTF-8 character."""

from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, Iterable

from .unicode import CHAR_TO_BYTE, decode_utf8, encode_utf8
from .vocab import (ATTR_BYTE, ATTR_CONTROL, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_USER_DEFINED,
                    Vocab)

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

_SPECIAL = ATTR_UNKNOWN | ATTR_CONTROL


class Pieces:
    """The token-to-piece cache of llama.cpp (built with special=True), filled on demand."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._cache: dict[int, bytes] = {}  # a dict: a 262k-slot list would cost 2 MB up front

    def __getitem__(self, token: int) -> bytes:
        piece = self._cache.get(token)
        if piece is None:
            if not 0 <= token < self.vocab.n_vocab:
                raise IndexError(f"token id {token} is out of range")
            piece = self._cache[token] = _piece(self.vocab, token)
        return piece

    def piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        """llama_token_to_piece: control and unknown tokens are empty unless `special`; up to
        `lstrip` leading spaces are dropped."""
        if not 0 <= token < self.vocab.n_vocab:
            raise IndexError(f"token id {token} out of range [0, {self.vocab.n_vocab})")
        if not special and self.vocab.attrs[token] & _SPECIAL:
            return b""
        piece = self[token]
        n = 0
        while n < lstrip and n < len(piece) and piece[n] == 0x20:
            n += 1
        return piece[n:] if n else piece


def _piece(v: Vocab, token: int) -> bytes:
    # token_to_piece with special=true, per vocab type
    text, attr = v.tokens[token], v.attrs[token]
    raw = text.encode("utf-8", "surrogateescape")
    if attr & (_SPECIAL | ATTR_USER_DEFINED):
        return raw
    if attr & ATTR_NORMAL:
        if v.type == "BPE" and not v.escape_whitespaces:
            return _decode_text(raw)
        return raw.replace("\u2581".encode(), b" ")
    if attr & ATTR_BYTE:
        return bytes([int(text[3:5], 16)])  # token_to_byte: "<0xXX>"
    return b""


def _decode_text(raw: bytes) -> bytes:
    # llama_decode_text: GPT-2 stand-in characters back to bytes; others are spelled out
    out = bytearray()
    for ch in decode_utf8(raw):
        b = CHAR_TO_BYTE.get(ch)
        if b is not None:
            out.append(b)
        else:
            out += b"[UNK_BYTE_0x" + encode_utf8(ch).hex().encode() + raw + b"]"
    return bytes(out)


_SPACE_PUNCT = re.compile(rb" ([?!.,])")
_SPACED_APOSTROPHE = re.compile(rb" ' ")
_CONTRACTION = re.compile(rb" '(?=[sm]|re|ve)")


def clean_spaces(text: bytes) -> bytes:
    """The three clean-up passes of llama_vocab::impl::detokenize (clean_up_tokenization_spaces):
    " ?" -> "?", " ' " -> "'", " 's" -> "'s" (also 'm, 're, 've; not 't, 'd, 'll)."""
    text = _SPACE_PUNCT.sub(rb"\1", text)
    text = _SPACED_APOSTROPHE.sub(b"'", text)
    return _CONTRACTION.sub(b"'", text)


def detokenize(v: Vocab, pieces: Pieces, tokens: Iterable[int], remove_special: bool = False,
               unparse_special: bool = False) -> bytes:
    """llama_detokenize."""
    tokens = list(tokens)
    remove_space = v.add_space_prefix
    if remove_special and v.add_bos and tokens and tokens[0] == v.ids["bos"]:
        remove_space = False
        tokens = tokens[1:]
    if remove_special and v.add_eos and tokens and tokens[-1] == v.ids["eos"]:
        tokens = tokens[:-1]
    parts = [pieces.piece(t, unparse_special) for t in tokens]
    if parts and remove_space:
        parts[0] = pieces.piece(tokens[0], unparse_special, 1)
    text = b"".join(parts)
    return clean_spaces(text) if v.clean_spaces else text


class StreamingDetokenizer:
    """Feed token ids one at a time; get back text that never ends inside a UTF-8 character.

    The concatenated output equals `tokenizer.detokenize(all_tokens, ...)` decoded as UTF-8 with
    replacement characters. Bytes that a later token could still change (llama.cpp's space
    clean-up looks up to three bytes ahead) and incomplete characters are held back until the
    next token or `flush()`.
    """

    def __init__(self, tokenizer: "Tokenizer", remove_special: bool = False,
                 unparse_special: bool = False, continuation: bool = False):
        self.vocab, self.pieces = tokenizer.vocab, tokenizer.pieces
        self.remove_special, self.unparse_special = remove_special, unparse_special
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._pending = b""  # piece bytes not yet cleaned up and decoded
        # the first piece loses its prefix space, unless the stream continues earlier text
        # (generated tokens: llama.cpp's server converts each with token_to_piece, no strip)
        self._lstrip = 1 if self.vocab.add_space_prefix and not continuation else 0
        self._seen = 0
        self._held_eos = False  # a trailing EOS that remove_special drops at the end

    def feed(self, token: int) -> str:
        """Add one token; return the text that is now final."""
        v = self.vocab
        self._seen += 1
        if self._held_eos:
            self._held_eos = False
            self._append(v.ids["eos"])
        if self.remove_special and v.add_bos and self._seen == 1 and token == v.ids["bos"]:
            self._lstrip = 0  # detokenize drops a leading BOS and keeps the next space
            return ""
        if self.remove_special and v.add_eos and token == v.ids["eos"]:
            self._held_eos = True
            return ""
        self._append(token)
        return self._emit(final=False)

    def flush(self) -> str:
        """Return whatever is held back (end of the stream); a held EOS is dropped."""
        self._held_eos = False
        return self._emit(final=True)

    def _append(self, token: int) -> None:
        self._pending += self.pieces.piece(token, self.unparse_special, self._lstrip)
        self._lstrip = 0

    def _emit(self, final: bool) -> str:
        data, clean = self._pending, self.vocab.clean_spaces
        cut = len(data) if final or not clean else _safe_cut(data)
        ready, self._pending = data[:cut], data[cut:]
        return self._decoder.decode(clean_spaces(ready) if clean else ready, final)


def _safe_cut(data: bytes) -> int:
    """Longest prefix of data whose clean-up cannot depend on later bytes."""
    cut = len(data)
    while cut and (data[cut - 1] in b" '" or data[max(cut - 3, 0) : cut] in (b" 'r", b" 'v")):
        cut -= 1
    return cut
