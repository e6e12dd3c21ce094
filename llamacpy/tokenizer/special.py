"""Splitting text at special tokens before tokenizing (llama_vocab::impl::tokenizer_st_partition).

Every special token (control, user-defined, unknown), longest first, cuts the raw text fragments
at each of its occurrences, honouring its lstrip/rstrip attributes. Control and unknown tokens
only take part when parse_special is set; user-defined ones always do.
"""

from __future__ import annotations

import re

from .vocab import ATTR_CONTROL, ATTR_LSTRIP, ATTR_RSTRIP, ATTR_UNKNOWN, Vocab

Fragment = int | tuple[int, int]  # a token id, or (offset, length) of raw text
_SPACE = b" \t\n\v\f\r"  # isspace() in the C locale


class SpecialSplitter:
    """tokenizer_st_partition over a vocab's cache_special_tokens."""

    def __init__(self, vocab: Vocab):
        self.entries = [(tid, vocab.tokens[tid].encode("utf-8", "surrogateescape"),
                         vocab.attrs[tid]) for tid in vocab.special_cache]
        self._tries = {}

    def _trie(self, parse_special: bool) -> tuple[dict, re.Pattern | None]:
        # byte trie of the special texts in play; leaves hold the index into self.entries
        if parse_special not in self._tries:
            root: dict = {}
            for k, (_, text, attr) in enumerate(self.entries):
                if parse_special or not attr & (ATTR_CONTROL | ATTR_UNKNOWN):
                    node = root
                    for b in text:
                        node = node.setdefault(b, {})
                    node[-1] = k
            firsts = b"".join(re.escape(bytes([b])) for b in root)
            self._tries[parse_special] = (root, re.compile(b"[" + firsts + b"]") if root else None)
        return self._tries[parse_special]

    def present(self, raw: bytes, parse_special: bool) -> list[int]:
        """Indices (into entries, in cache order) of the special texts that occur in raw."""
        root, starts = self._trie(parse_special)
        if starts is None:
            return []
        found, n = set(), len(raw)
        for m in starts.finditer(raw):
            node, j = root, m.start()
            while j < n and raw[j] in node:
                node = node[raw[j]]
                j += 1
                if -1 in node:
                    found.add(node[-1])
        return sorted(found)

    def split(self, raw: bytes, parse_special: bool) -> list[Fragment]:
        """The fragments of raw: special token ids and (offset, length) spans of plain text."""
        if not raw:
            return []
        frags: list[Fragment] = [(0, len(raw))]
        for k in self.present(raw, parse_special):
            frags = _cut(raw, frags, *self.entries[k])
        return frags


def _cut(raw: bytes, frags: list[Fragment], tid: int, text: bytes, attr: int) -> list[Fragment]:
    # one special token over every text fragment (the body of tokenizer_st_partition's loop)
    out: list[Fragment] = []
    for frag in frags:
        if isinstance(frag, int):
            out.append(frag)
            continue
        off, length = frag
        while True:
            match = raw.find(text, off, off + length)
            if match < 0:
                out.append((off, length))
                break
            left = match - off
            if attr & ATTR_LSTRIP:
                while left > 0 and raw[off + left - 1] in _SPACE:
                    left -= 1
            if left > 0:
                out.append((off, left))
            out.append(tid)
            end = match + len(text)
            if end >= off + length:
                break
            length -= end - off
            off = end
            if attr & ATTR_RSTRIP:
                while length > 0 and raw[off] in _SPACE:
                    off += 1
                    length -= 1
            if length == 0:
                break
    return out
