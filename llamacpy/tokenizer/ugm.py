"""Unigram (T5 / XLM-R sentencepiece) tokenizer (llm_tokenizer_ugm_session): normalise with the
precompiled charsmap, then pick the best-scoring segmentation by Viterbi search."""

from __future__ import annotations

import numpy as np

from .vocab import ATTR_NORMAL, ATTR_UNUSED, ATTR_USER_DEFINED, Vocab

_UNK_PENALTY = np.float32(10.0)
_ESCAPED_SPACE = "\u2581".encode()


class UgmTokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        attrs, tokens = vocab.attrs, vocab.tokens
        raw = [t.encode("utf-8", "surrogateescape") for t in tokens]
        keep = ATTR_NORMAL | ATTR_USER_DEFINED | ATTR_UNUSED
        self.matcher = {raw[i]: i for i in range(len(raw)) if attrs[i] & keep}
        # longest token per two-byte start: bounds the search like the C++ trie walk does
        self.max_len: dict[bytes, int] = {}
        for r in self.matcher:
            key = r[:2]
            if len(r) > self.max_len.get(key, 0):
                self.max_len[key] = len(r)
        self.user_defined = {i for i in range(len(raw)) if attrs[i] & ATTR_USER_DEFINED}
        # every prefix of a user-defined token: naive_trie::get_longest_prefix stops at any node
        self.user_prefixes = {r[:k] for i in self.user_defined for r in [raw[i]]
                              for k in range(1, len(r) + 1)}
        self.user_max = max(map(len, self.user_prefixes), default=0)
        normal = [float(vocab.scores[i]) for i in range(len(raw)) if attrs[i] & ATTR_NORMAL]
        min_score = np.float32(min(normal)) if normal else np.float32(np.finfo(np.float32).max)
        self.unk_score = float(min_score - _UNK_PENALTY)  # float arithmetic, as in llama.cpp
        self.scores = vocab.scores.astype(np.float64).tolist()
        self.xcda, self.replacements = _parse_charsmap(vocab.charsmap)

    def tokenize(self, text: bytes) -> list[int]:
        norm = self.normalize(text)
        if not norm:
            return []
        return self._viterbi(norm)

    def _viterbi(self, norm: bytes) -> list[int]:
        n, unk = len(norm), self.vocab.ids["unk"]
        best = [(unk, 0, -1.7976931348623157e308)] * (n + 1)  # (token, start, score)
        best[0] = (unk, 0, 0.0)
        off = 0
        while off < n:
            step = min(_utf8_len(norm[off]), n - off)
            base, whole = best[off][2], False
            longest = max(self.max_len.get(norm[off : off + 2], 0),
                          self.max_len.get(norm[off : off + 1], 0))
            for end in range(off + 1, min(n, off + longest) + 1):
                tid = self.matcher.get(norm[off:end])
                if tid is None:
                    continue
                whole |= end - off == step
                score = base + (0.0 if tid in self.user_defined else self.scores[tid])
                if score > best[end][2]:
                    best[end] = (tid, off, score)
            if not whole and base + self.unk_score > best[off + step][2]:
                best[off + step] = (unk, off, base + self.unk_score)
            off += step
        return _backtrack(best, n, unk)

    def normalize(self, text: bytes) -> bytes:
        """llm_tokenizer_ugm_session::normalize: charsmap replacements, then space handling."""
        v = self.vocab
        space = _ESCAPED_SPACE if v.escape_whitespaces else b" "
        prepend, merge = v.add_space_prefix, v.remove_extra_whitespaces
        out, prepended, in_word, off = bytearray(), False, False, 0
        while off < len(text):
            piece, consumed = self._normalize_prefix(text, off)
            for c in piece:
                if c != 0x20:
                    if not in_word:
                        in_word = True
                        if (prepend and not prepended) or merge:
                            out += space
                            prepended = True
                    out.append(c)
                else:
                    in_word = False
                    if not merge:
                        out += space
            off += consumed
        return bytes(out)

    def _normalize_prefix(self, text: bytes, off: int) -> tuple[bytes, int]:
        for k in range(min(self.user_max, len(text) - off), 0, -1):
            if text[off : off + k] in self.user_prefixes:
                return text[off : off + k], k
        length, value = self._xcda_match(text, off)
        if length:
            end = self.replacements.find(b"\x00", value)
            if value >= len(self.replacements) or end < 0:
                raise ValueError("Index out of array bounds in precompiled charsmap!")
            return self.replacements[value:end], length
        k = _valid_utf8_len(text, off)
        return (text[off : off + k], k) if k else (b"\xef\xbf\xbd", 1)

    def _xcda_match(self, text: bytes, off: int) -> tuple[int, int]:
        # walk the XOR-compressed double array; the longest leaf gives the replacement
        xcda = self.xcda
        if not xcda:
            return 0, 0
        length = value = 0
        node = _base(_at(xcda, 0))
        for p in range(off, len(text)):
            c = text[p]
            if c == 0:
                break
            node ^= c
            packed = _at(xcda, node)
            if packed & ((1 << 31) | 0xFF) != c:
                break
            node ^= _base(packed)
            if (packed >> 8) & 1:
                length, value = p - off + 1, _at(xcda, node) & ((1 << 31) - 1)
        return length, value


def _parse_charsmap(charsmap: np.ndarray | None) -> tuple[list[int], bytes]:
    if charsmap is None or len(charsmap) == 0:
        return [], b""
    blob = np.asarray(charsmap).astype(np.uint8).tobytes()
    size = int.from_bytes(blob[:4], "little")
    if size + 4 >= len(blob):
        raise ValueError("Index out of array bounds in precompiled charsmap!")
    xcda = np.frombuffer(blob[4 : 4 + size], dtype="<u4").tolist()
    return xcda, blob[4 + size :]


def _at(xcda: list[int], i: int) -> int:
    if i >= len(xcda):
        raise ValueError("Index out of array bounds in XCDA array!")
    return xcda[i]


def _base(packed: int) -> int:
    return (packed >> 10) << ((packed & (1 << 9)) >> 6)


def _utf8_len(lead: int) -> int:
    return (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)[lead >> 4]


def _valid_utf8_len(text: bytes, off: int) -> int:
    """Length of the UTF-8 sequence at off as unicode_cpt_from_utf8 accepts it, 0 if invalid."""
    b0 = text[off]
    if b0 < 0x80:
        return 1
    size = 0 if not b0 & 0x40 else 2 if not b0 & 0x20 else 3 if not b0 & 0x10 else (
        4 if not b0 & 0x08 else 0)
    if size == 0 or off + size - 1 >= len(text):
        return 0
    return size if all((b & 0xC0) == 0x80 for b in text[off + 1 : off + size]) else 0


def _backtrack(best: list, n: int, unk: int) -> list[int]:
    # follow the best path from the end; runs of unknown tokens collapse into one
    out, prev_unk, pos = [], False, n
    while True:
        tid, start, _ = best[pos]
        is_unk = tid == unk
        if not (prev_unk and is_unk):
            out.append(tid)
        if start == 0:
            break
        prev_unk, pos = is_unk, start
    return out[::-1]
