"""Byte-level BPE (llm_tokenizer_bpe_session): pre-tokenizer regexes split the text into words,
each word merges by rank, and symbols that are no token fall back to single-byte tokens."""

from __future__ import annotations

from .merge import merge_by_rank
from .unicode import decode_utf8, encode_utf8, regex_split, utf8_len
from .vocab import Vocab

_CACHE_MAX = 1 << 16
_BYTE_STR = [bytes([b]).decode("utf-8", "surrogateescape") for b in range(256)]


class BpeTokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.regexes = vocab.pre.regexes
        self.byte_encoded = vocab.pre.byte_encoded
        self._cache: dict[str, list[int]] = {}

    def tokenize(self, text: bytes) -> list[int]:
        """Token ids of one fragment (after special-token splitting and space escaping)."""
        out: list[int] = []
        cache = self._cache
        for word in regex_split(decode_utf8(text), self.regexes, self.byte_encoded):
            ids = cache.get(word)
            if ids is None:
                ids = self._word(word)
                if len(cache) >= _CACHE_MAX:
                    cache.clear()
                cache[word] = ids
            out += ids
        return out

    def _word(self, word: str) -> list[int]:
        v = self.vocab
        if not self.byte_encoded:
            word = encode_utf8(word).decode("utf-8", "surrogateescape")
        tid = v.token_to_id.get(word)
        if tid is not None and (v.ignore_merges or _gemma4_newlines(v, word)):
            return [tid]
        return self._ids(merge_by_rank(self._symbols(word), v.merges))

    def _symbols(self, word: str) -> list[str]:
        # one symbol per UTF-8 sequence as its lead byte announces it (unicode_len_utf8)
        if self.byte_encoded or word.isascii() or not any("\udc80" <= c <= "\udcff" for c in word):
            return list(word)
        raw, syms, i = word.encode("utf-8", "surrogateescape"), [], 0
        while i < len(raw):
            n = min(utf8_len(raw[i]), len(raw) - i)
            syms.append(raw[i : i + n].decode("utf-8", "surrogateescape"))
            i += n
        return syms

    def _ids(self, symbols: list[str]) -> list[int]:
        t2i, out = self.vocab.token_to_id, []
        for sym in symbols:
            tid = t2i.get(sym)
            if tid is not None:
                out.append(tid)
                continue
            for b in sym.encode("utf-8", "surrogateescape"):
                key = _BYTE_STR[b] if self.byte_encoded else f"<0x{b:02X}>"
                if key in t2i:  # bytes without a token are dropped
                    out.append(t2i[key])
        return out


def _gemma4_newlines(v: Vocab, word: str) -> bool:
    # llama.cpp keeps an all-newline word whole for Gemma 4 when it is a token
    return v.pre.type == "GEMMA4" and word.strip("\n") == ""
