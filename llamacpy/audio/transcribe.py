"""Greedy decoding of one 30-second window, timestamps off (whisper.cpp's whisper_full with
no_timestamps, one window, temperature 0 and no fallback)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..format import GGUFFile
from ..models.whisper import WhisperModel
from ..tokenizer.unicode import CHAR_TO_BYTE
from .mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim


@dataclass(frozen=True)
class SpecialTokens:
    sot: int
    eot: int
    transcribe: int
    translate: int
    no_timestamps: int
    timestamp_begin: int
    multilingual: bool
    suppress: tuple[int, ...]  # non-speech tokens (config suppress_ids)
    suppress_begin: tuple[int, ...]  # blank and end at the first step (suppress_ids_begin)

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> SpecialTokens:
        tok = lambda k: int(g.require(f"whisper.token.{k}"))
        return cls(tok("sot"), tok("eot"), tok("transcribe"), tok("translate"),
                   tok("no_timestamps"), tok("timestamp_begin"),
                   bool(g.get("whisper.multilingual", False)),
                   tuple(int(i) for i in g.get("whisper.suppress_tokens", [])),
                   tuple(int(i) for i in g.get("whisper.suppress_tokens_begin", [])))


def language_token(g: GGUFFile, language: str) -> int:
    """The id of <|xx|> for a language code ("en", "de"...); unknown codes are an error."""
    tokens = g.require("tokenizer.ggml.tokens")
    ids = {int(i) for i in g.get("whisper.language_tokens", [])}
    for i in sorted(ids):
        if tokens[i] == f"<|{language}|>":
            return i
    raise ValueError(f"unknown language '{language}' (the model has "
                     f"{', '.join(tokens[i][2:-2] for i in sorted(ids))})")


def prompt_tokens(sp: SpecialTokens, language: int | None = None) -> list[int]:
    """<|startoftranscript|> [<|lang|> <|transcribe|>] <|notimestamps|>; English-only models
    take no language or task token."""
    if not sp.multilingual:
        return [sp.sot, sp.no_timestamps]
    if language is None:
        raise ValueError("a multilingual model needs a language (detection is not done yet)")
    return [sp.sot, language, sp.transcribe, sp.no_timestamps]


def greedy_tokens(model: WhisperModel, sp: SpecialTokens, mel: np.ndarray,
                  prompt: list[int], suppress_non_speech: bool = True,
                  max_tokens: int | None = None) -> list[int]:
    """The text tokens (up to <|endoftext|>) of one 3000-frame window, argmax at each step.
    Suppressed: every special token but <|endoftext|> (timestamps too, as whisper.cpp does with
    no_timestamps), the non-speech tokens if asked, and blank / end at the first step."""
    cache = model.new_cache(model.encode(mel))
    mask = np.zeros(model.args.n_vocab, bool)
    mask[sp.eot + 1:] = True
    if suppress_non_speech:
        mask[list(sp.suppress)] = True
    limit = max_tokens or model.args.n_text_ctx // 2  # whisper's sample_len
    out: list[int] = []
    logits = model.decode(prompt, cache)[-1]
    while len(out) < limit and cache.n_past < model.args.n_text_ctx:
        logits[mask] = -np.inf
        if not out:
            logits[list(sp.suppress_begin)] = -np.inf
        token = int(np.argmax(logits))
        if token == sp.eot:
            break
        out.append(token)
        logits = model.decode([token], cache)[-1]
    return out


def tokens_to_text(tokens_text: list[str], ids: list[int]) -> str:
    """Byte-level BPE pieces back to UTF-8 text (GPT-2 stand-in characters to bytes)."""
    raw = bytes(CHAR_TO_BYTE[ch] for i in ids for ch in tokens_text[i])
    return raw.decode("utf-8", errors="replace")


def transcribe_window(g: GGUFFile, model: WhisperModel, audio: np.ndarray,
                      language: str = "en", suppress_non_speech: bool = True) -> str:
    """The text of the first 30 seconds of 16 kHz mono float32 `audio` (`language` is used by
    multilingual models only)."""
    sp = SpecialTokens.from_gguf(g)
    mel = pad_or_trim(log_mel_spectrogram(audio, model.args.n_mels, padding=N_SAMPLES))
    lang = language_token(g, language) if sp.multilingual else None
    ids = greedy_tokens(model, sp, mel, prompt_tokens(sp, lang), suppress_non_speech)
    return tokens_to_text(g.require("tokenizer.ggml.tokens"), ids)
