"""SentencePiece-style BPE over token scores (llm_tokenizer_spm_session), byte fallback included.

The text of one fragment is merged as a whole, as in llama.cpp. For speed it is first cut before
each U+2581 (escaped space) that no token spans: the pieces merge independently, so the result
is unchanged, and each piece's tokens are cached.
"""

from __future__ import annotations

import re

import numpy as np

from .merge import merge_by_score
from .unicode import as_cpts, utf8_len
from .vocab import Vocab

_CACHE_MAX = 1 << 16


class SpmTokenizer:
    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self._scores: list[float] | None = None
        self._cut: re.Pattern | None = None
        self._byte_ids: list[int] | None = None
        self._cache: dict[str, list[int]] = {}

    @property
    def scores(self) -> list[float]:
        """Token scores as floats (built on first use)."""
        if self._scores is None:
            scores = self.vocab.scores.astype(np.float64)
            scores[np.isneginf(scores)] = -1e300  # keep real -inf scores apart from "no token"
            self._scores = scores.tolist()
        return self._scores

    def tokenize(self, text: bytes) -> list[int]:
        """Token ids of one fragment whose spaces are already escaped to U+2581."""
        try:
            s = text.decode("utf-8")
        except UnicodeDecodeError:
            return self._tokenize_bytes(text)
        out: list[int] = []
        for piece in self._pieces(s):
            ids = self._cache.get(piece)
            if ids is None:
                ids = self._ids(merge_by_score(list(piece), self.vocab.token_to_id, self.scores))
                if len(self._cache) >= _CACHE_MAX:
                    self._cache.clear()
                self._cache[piece] = ids
            out += ids
        return out

    def _pieces(self, s: str) -> list[str]:
        return [p for p in self._cutter().split(s) if p]

    def _cutter(self) -> re.Pattern:
        # cut before each U+2581 whose left neighbour never precedes U+2581 inside a token
        if self._cut is None:
            cpts = as_cpts("\x00".join(self.vocab.tokens))
            before = sorted(set(cpts[np.nonzero(cpts[1:] == 0x2581)[0]].tolist()))
            cls = "".join(re.escape(chr(c)) for c in before)
            self._cut = re.compile(f"(?<![{cls}])(?=\u2581)" if cls else "(?=\u2581)")
        return self._cut

    def _ids(self, symbols: list[str]) -> list[int]:
        # resegment: a symbol that is no token falls back to its bytes
        t2i, out = self.vocab.token_to_id, []
        for sym in symbols:
            tid = t2i.get(sym)
            if tid is not None:
                out.append(tid)
            else:
                out += [self.byte_to_token(b) for b in sym.encode("utf-8", "surrogateescape")]
        return out

    def byte_to_token(self, byte: int) -> int:
        """llama_vocab::byte_to_token for SPM: <0xXX>, else the one-byte token."""
        if self._byte_ids is None:
            t2i, ids = self.vocab.token_to_id, []
            for b in range(256):
                one = bytes([b]).decode("utf-8", "surrogateescape")
                tid = t2i.get(f"<0x{b:02X}>", t2i.get(one))
                ids.append(-1 if tid is None else tid)
            self._byte_ids = ids
        tid = self._byte_ids[byte]
        if tid < 0:
            raise KeyError(f"vocab has no token for byte 0x{byte:02X} (llama.cpp aborts here)")
        return tid

    def _tokenize_bytes(self, text: bytes) -> list[int]:
        # invalid UTF-8: symbols are cut by lead-byte length, exactly as llama.cpp does
        syms, i = [], 0
        while i < len(text):
            n = min(utf8_len(text[i]), len(text) - i)
            syms.append(text[i : i + n])
            i += n
        merged = merge_by_score(syms, self.vocab.token_to_id, self.scores)  # takes bytes too
        return self._ids([m.decode("utf-8", "surrogateescape") for m in merged])
