"""Whisper's special tokens, language tokens and byte-level text, read from our GGUF layout."""

from __future__ import annotations

from dataclasses import dataclass

from ..format import GGUFFile
from ..tokenizer.unicode import CHAR_TO_BYTE


@dataclass(frozen=True)
class SpecialTokens:
    sot: int
    eot: int
    transcribe: int
    translate: int
    no_timestamps: int
    timestamp_begin: int
    no_speech: int
    sot_prev: int
    multilingual: bool
    suppress: tuple[int, ...]  # non-speech tokens (config suppress_ids)
    suppress_begin: tuple[int, ...]  # blank and end at the first step (suppress_ids_begin)
    sot_lm: int = -1

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> SpecialTokens:
        tok = lambda k: int(g.require(f"whisper.token.{k}"))
        return cls(tok("sot"), tok("eot"), tok("transcribe"), tok("translate"),
                   tok("no_timestamps"), tok("timestamp_begin"), tok("no_speech"),
                   tok("sot_prev"),
                   bool(g.get("whisper.multilingual", False)),
                   tuple(int(i) for i in g.get("whisper.suppress_tokens", [])),
                   tuple(int(i) for i in g.get("whisper.suppress_tokens_begin", [])),
                   int(g.get("whisper.token.sot_lm", -1)))


def languages(g: GGUFFile) -> dict[str, int]:
    """Language code ("en", "de"...) -> the id of its <|xx|> token, in the model's order."""
    tokens = g.require("tokenizer.ggml.tokens")
    return {tokens[i][2:-2]: i for i in sorted(int(i) for i in g.get("whisper.language_tokens", []))}


def language_token(g: GGUFFile, language: str) -> int:
    """The id of <|xx|> for a language code ("en", "de"...); unknown codes are an error."""
    known = languages(g)
    if language not in known:
        raise ValueError(f"unknown language '{language}' (the model has {', '.join(known)})")
    return known[language]


def token_bytes(tokens_text: list[str], ids) -> bytes:
    """The raw bytes of byte-level BPE pieces (GPT-2 stand-in characters to bytes)."""
    return bytes(CHAR_TO_BYTE[ch] for i in ids for ch in tokens_text[i])


def tokens_to_text(tokens_text: list[str], ids: list[int]) -> str:
    """Byte-level BPE pieces back to UTF-8 text (GPT-2 stand-in characters to bytes)."""
    return token_bytes(tokens_text, ids).decode("utf-8", errors="replace")
