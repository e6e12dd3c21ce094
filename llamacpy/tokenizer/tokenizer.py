"""`Tokenizer`: llama_tokenize / llama_token_to_piece / llama_detokenize over a GGUF vocabulary."""

from __future__ import annotations

import os
from typing import Iterable

from ..format import GGUFFile, open_gguf
from .bpe import BpeTokenizer
from .detokenizer import Pieces, StreamingDetokenizer, detokenize
from .special import SpecialSplitter
from .spm import SpmTokenizer
from .ugm import UgmTokenizer
from .vocab import ATTR_CONTROL, NULL, Vocab, load_vocab
from .wpm import WpmTokenizer

_SESSIONS = {"SPM": SpmTokenizer, "BPE": BpeTokenizer, "WPM": WpmTokenizer, "UGM": UgmTokenizer}


class Tokenizer:
    """A model's tokenizer, identical in its results to llama.cpp's llama_vocab."""

    def __init__(self, vocab: Vocab, metadata: dict | None = None):
        if vocab.type not in _SESSIONS:
            raise NotImplementedError(
                f"{vocab.type} vocabularies ('{vocab.model}') are not supported")
        self.vocab = vocab
        self.metadata = metadata or {}
        self.session = _SESSIONS[vocab.type](vocab)
        self.splitter = SpecialSplitter(vocab)
        self.pieces = Pieces(vocab)

    @classmethod
    def from_gguf(cls, model: GGUFFile | str | os.PathLike) -> Tokenizer:
        """The tokenizer of a GGUF model, given as an opened GGUFFile or a path."""
        if not isinstance(model, GGUFFile):
            model = open_gguf(model)
        meta = model.metadata
        return cls(load_vocab(meta), {k: v for k, v in meta.items() if k.startswith("tokenizer.")
                                      and not k.startswith("tokenizer.ggml.")})

    # --- tokenize ----------------------------------------------------------------------------

    def tokenize(self, text: str | bytes, add_special: bool = True,
                 parse_special: bool = False) -> list[int]:
        """llama_tokenize: add_special adds BOS/EOS (BERT: CLS/SEP) as the vocab asks;
        parse_special lets control-token text become those tokens."""
        raw = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        v, out = self.vocab, []
        frags = self.splitter.split(raw, parse_special)
        if v.type == "SPM":
            return self._tokenize_spm(raw, frags, add_special)
        if add_special and (v.add_bos or v.type == "WPM"):
            out.append(self._require("bos"))
        for frag in frags:
            if isinstance(frag, int):
                out.append(frag)
                continue
            piece = raw[frag[0] : frag[0] + frag[1]]
            if v.escape_whitespaces and v.type == "BPE":
                piece = piece.replace(b" ", "\u2581".encode())
            out += self.session.tokenize(piece)
        if add_special and v.type == "WPM":
            out.append(self._require("sep"))
        elif add_special and v.add_eos:
            out.append(self._require("eos"))
        return out

    def _tokenize_spm(self, raw: bytes, frags: list, add_special: bool) -> list[int]:
        # a space is prefixed to text that starts the prompt or follows a special token
        v, out = self.vocab, []
        if add_special and v.add_bos:
            out.append(self._require("bos"))
        prev_special = True
        for frag in frags:
            if isinstance(frag, int):
                out.append(frag)
                prev_special = True
                continue
            piece = raw[frag[0] : frag[0] + frag[1]]
            if v.add_space_prefix and prev_special:
                piece = b" " + piece
            out += self.session.tokenize(piece.replace(b" ", "\u2581".encode()))
            prev_special = False
        if add_special and v.add_eos:
            out.append(self._require("eos"))
        return out

    def _require(self, slot: str) -> int:
        tid = self.vocab.ids[slot]
        if tid == NULL:
            raise ValueError(f"the vocab asks for a {slot.upper()} token but has none")
        return tid

    # --- detokenize --------------------------------------------------------------------------

    def token_to_piece(self, token: int, special: bool = False, lstrip: int = 0) -> bytes:
        """llama_token_to_piece: the bytes of one token."""
        return self.pieces.piece(token, special, lstrip)

    def detokenize(self, tokens: Iterable[int], remove_special: bool = False,
                   unparse_special: bool = False) -> bytes:
        """llama_detokenize: remove_special drops a leading BOS / trailing EOS the vocab adds;
        unparse_special renders control tokens as their text."""
        return detokenize(self.vocab, self.pieces, tokens, remove_special, unparse_special)

    def streaming(self, remove_special: bool = False,
                  unparse_special: bool = False) -> StreamingDetokenizer:
        return StreamingDetokenizer(self, remove_special, unparse_special)

    # --- vocabulary facts --------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    def _id(self, slot: str) -> int:
        return self.vocab.ids[slot]

    bos = property(lambda self: self._id("bos"))
    eos = property(lambda self: self._id("eos"))
    eot = property(lambda self: self._id("eot"))
    eom = property(lambda self: self._id("eom"))
    unk = property(lambda self: self._id("unk"))
    sep = property(lambda self: self._id("sep"))
    pad = property(lambda self: self._id("pad"))
    mask = property(lambda self: self._id("mask"))
    fim_pre = property(lambda self: self._id("fim_pre"))
    fim_suf = property(lambda self: self._id("fim_suf"))
    fim_mid = property(lambda self: self._id("fim_mid"))
    fim_pad = property(lambda self: self._id("fim_pad"))
    fim_rep = property(lambda self: self._id("fim_rep"))
    fim_sep = property(lambda self: self._id("fim_sep"))

    @property
    def nl(self) -> int:
        """The newline token (llama_vocab_nl). llama.cpp fixes it before it reads the special
        ids and splits special tokens, so fallbacks use the type's default PAD id."""
        v = self.vocab
        if v.type == "SPM":
            try:
                return self.session.byte_to_token(0x0A)
            except KeyError:
                return v.default_pad
        if v.type == "WPM":
            return v.default_pad
        ids = self.session.tokenize(b"\n")
        return ids[0] if ids else v.default_pad

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos

    @property
    def add_eos(self) -> bool:
        return self.vocab.add_eos

    def is_eog(self, token: int) -> bool:
        """Whether token ends generation (llama_vocab_is_eog)."""
        return token in self.vocab.eog

    def is_control(self, token: int) -> bool:
        return bool(self.vocab.attrs[token] & ATTR_CONTROL)

    def token_attr(self, token: int) -> int:
        """llama.cpp's attribute bits of a token (llama_vocab_get_attr; ATTR_* constants)."""
        return self.vocab.attrs[token]

    def token_type(self, token: int) -> int:
        """The token's tokenizer.ggml.token_type as stored in the GGUF (1 normal, 2 unknown,
        3 control, 4 user-defined, 5 unused, 6 byte); llama.cpp's view is token_attr."""
        return int(self.vocab.token_types[token])

    def token_text(self, token: int) -> str:
        """The token's text as stored in the vocab (llama_vocab_get_text)."""
        return self.vocab.tokens[token]

    def token_score(self, token: int) -> float:
        return float(self.vocab.scores[token])

    def _text(self, slot: str) -> str:
        tid = self.vocab.ids[slot]
        return "" if tid == NULL else self.vocab.tokens[tid]

    @property
    def bos_token(self) -> str:
        """BOS text for chat templates ('' when the vocab has none)."""
        return self._text("bos")

    @property
    def eos_token(self) -> str:
        """EOS text for chat templates ('' when the vocab has none)."""
        return self._text("eos")

    @property
    def chat_template(self) -> str | None:
        return self.metadata.get("tokenizer.chat_template")
