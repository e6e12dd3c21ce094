"""WordPiece for BERT vocabularies (llm_tokenizer_wpm_session): normalise, split into words,
then take the longest vocab match from the left, each word prefixed with U+2581."""

from __future__ import annotations

from .unicode import (ACCENT_MARK, CONTROL, PUNCTUATION, SYMBOL, WHITESPACE, cpt_flags,
                      decode_utf8, normalize_nfd, tolower)
from .vocab import Vocab


class WpmTokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.max_len = int(vocab.tokens.byte_lengths().max())

    def tokenize(self, text: bytes) -> list[int]:
        out: list[int] = []
        t2i = self.vocab.token_to_id
        for word in preprocess(text, self.vocab.lowercase, self.vocab.strip_accents):
            word = "\u2581" + word
            start = len(out)
            i = 0
            while i < len(word):
                for j in range(min(len(word), i + self.max_len + 1), i, -1):
                    tid = t2i.get(word[i:j])
                    if tid is not None:
                        out.append(tid)
                        i = j
                        break
                else:
                    del out[start:]  # no match: the whole word becomes <unk>
                    break
            if len(out) == start:
                out.append(self.vocab.ids["unk"])
        return out


def preprocess(text: bytes, lowercase: bool, strip_accents: bool) -> list[str]:
    """llm_tokenizer_wpm_session::preprocess: words split at whitespace; punctuation, ASCII
    symbols and CJK ideographs become one-character words; controls are dropped."""
    cpts = [ord(c) for c in decode_utf8(text)]
    if strip_accents:
        cpts = normalize_nfd(cpts)
    words, cur = [], []
    for cpt in cpts:
        flags = cpt_flags(cpt)
        if flags & WHITESPACE:
            if cur:
                words.append("".join(cur))
                cur = []
            continue
        if cpt == 0 or cpt == 0xFFFD or flags & CONTROL or (strip_accents and flags & ACCENT_MARK):
            continue
        s = chr(tolower(cpt) if lowercase else cpt)
        if flags & PUNCTUATION or (cpt < 0x7F and flags & SYMBOL) or _is_chinese(cpt):
            if cur:
                words.append("".join(cur))
            words.append(s)
            cur = []
        else:
            cur.append(s)
    if cur:
        words.append("".join(cur))
    return words


def _is_chinese(cpt: int) -> bool:
    return (0x4E00 <= cpt <= 0x9FFF or 0x3400 <= cpt <= 0x4DBF or 0x20000 <= cpt <= 0x2A6DF
            or 0x2A700 <= cpt <= 0x2B73F or 0x2B740 <= cpt <= 0x2B81F
            or 0x2B920 <= cpt <= 0x2CEAF  # sic: llama.cpp follows HF's 0x2B920
            or 0xF900 <= cpt <= 0xFAFF or 0x2F800 <= cpt <= 0x2FA1F)
