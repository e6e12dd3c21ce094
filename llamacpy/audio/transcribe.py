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


MAX_INITIAL_TIMESTAMP = 50  # 1.0 s in 0.02 s steps (whisper's max_initial_timestamp)


def apply_timestamp_rules(logits: np.ndarray, out: list[int], sp: SpecialTokens) -> None:
    """OpenAI whisper's ApplyTimestampRules (whisper.cpp's whisper_process_logits): timestamps
    come in pairs and never go back, the first token is a timestamp of at most 1 s, and a
    timestamp is forced when their total probability beats every text token's."""
    ts = sp.timestamp_begin
    last_ts = len(out) >= 1 and out[-1] >= ts
    penultimate_ts = len(out) < 2 or out[-2] >= ts
    if last_ts:
        if penultimate_ts:
            logits[ts:] = -np.inf  # a pair just closed: text or the end comes next
        else:
            logits[:sp.eot] = -np.inf  # a lone timestamp: its partner or the end
    stamps = [t for t in out if t >= ts]
    if stamps:
        floor = stamps[-1] if last_ts and not penultimate_ts else stamps[-1] + 1
        logits[ts:floor] = -np.inf
    if not out:
        logits[:ts] = -np.inf
        logits[ts + MAX_INITIAL_TIMESTAMP + 1:] = -np.inf
    finite = logits[np.isfinite(logits)]
    logprobs = logits - (finite.max() + np.log(np.exp(finite - finite.max()).sum()))
    ts_mass = np.logaddexp.reduce(logprobs[ts:])
    if ts_mass > logprobs[:ts].max():
        logits[:ts] = -np.inf


def greedy_tokens(model: WhisperModel, sp: SpecialTokens, mel: np.ndarray,
                  prompt: list[int], suppress_non_speech: bool = True,
                  max_tokens: int | None = None) -> list[int]:
    """The tokens (up to <|endoftext|>) of one 3000-frame window, argmax at each step.
    Suppressed: every special token but <|endoftext|> and the timestamps, the non-speech tokens
    if asked, and blank / end at the first step. A prompt ending in <|notimestamps|> gets no
    timestamps (as whisper.cpp's no_timestamps); otherwise the timestamp rules apply."""
    timestamps = prompt[-1] != sp.no_timestamps
    cache = model.new_cache(model.encode(mel))
    mask = np.zeros(model.args.n_vocab, bool)
    mask[sp.eot + 1:] = True
    if timestamps:
        mask[sp.timestamp_begin:] = False
    if suppress_non_speech:
        mask[list(sp.suppress)] = True
    limit = max_tokens or model.args.n_text_ctx // 2  # whisper's sample_len
    out: list[int] = []
    logits = model.decode(prompt, cache)[-1]
    while len(out) < limit and cache.n_past < model.args.n_text_ctx:
        logits[mask] = -np.inf
        if not out:
            logits[list(sp.suppress_begin)] = -np.inf
        if timestamps:
            apply_timestamp_rules(logits, out, sp)
        token = int(np.argmax(logits))
        if token == sp.eot:
            break
        out.append(token)
        logits = model.decode([token], cache)[-1]
    return out


@dataclass(frozen=True)
class Segment:
    start: float  # seconds
    end: float  # seconds
    tokens: tuple[int, ...]  # text tokens only


TIME_PRECISION = 0.02  # seconds per timestamp token


def window_segments(tokens: list[int], sp: SpecialTokens, offset: float = 0.0,
                    window_end: float = 30.0) -> list[Segment]:
    """Timestamp-delimited segments of one window's tokens (<|t0|> text <|t1|> ...); trailing
    text without its closing timestamp ends at `window_end`, as whisper's last segment does."""
    segments, start, text = [], None, []
    for t in tokens:
        if t >= sp.timestamp_begin:
            at = offset + (t - sp.timestamp_begin) * TIME_PRECISION
            if start is not None and text:
                segments.append(Segment(start, at, tuple(text)))
                text = []
            start = at
        elif t < sp.eot:
            text.append(t)
    if text:
        segments.append(Segment(offset if start is None else start, offset + window_end,
                                tuple(text)))
    return segments


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
