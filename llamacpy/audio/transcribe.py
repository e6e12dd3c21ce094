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
    no_speech: int
    sot_prev: int
    multilingual: bool
    suppress: tuple[int, ...]  # non-speech tokens (config suppress_ids)
    suppress_begin: tuple[int, ...]  # blank and end at the first step (suppress_ids_begin)

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> SpecialTokens:
        tok = lambda k: int(g.require(f"whisper.token.{k}"))
        return cls(tok("sot"), tok("eot"), tok("transcribe"), tok("translate"),
                   tok("no_timestamps"), tok("timestamp_begin"), tok("no_speech"),
                   tok("sot_prev"),
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
    logprobs = _log_softmax(logits)
    ts_mass = np.logaddexp.reduce(logprobs[ts:])
    if ts_mass > logprobs[:ts].max():
        logits[:ts] = -np.inf


def greedy_tokens(model: WhisperModel, sp: SpecialTokens, mel: np.ndarray,
                  prompt: list[int], suppress_non_speech: bool = True,
                  max_tokens: int | None = None, stats: dict | None = None) -> list[int]:
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
    all_logits = model.decode(prompt, cache)
    logits, sum_logprob = all_logits[-1], 0.0
    if stats is not None:  # P(<|nocaptions|>) at the <|startoftranscript|> position
        stats["no_speech_prob"] = float(np.exp(
            _log_softmax(all_logits[prompt.index(sp.sot)])[sp.no_speech]))
    while len(out) < limit and cache.n_past < model.args.n_text_ctx:
        logits[mask] = -np.inf
        if not out:
            logits[list(sp.suppress_begin)] = -np.inf
        if timestamps:
            apply_timestamp_rules(logits, out, sp)
        token = int(np.argmax(logits))
        sum_logprob += float(_log_softmax(logits)[token])
        if token == sp.eot:
            break
        out.append(token)
        logits = model.decode([token], cache)[-1]
    if stats is not None:  # whisper's avg_logprob counts the end token
        stats["avg_logprob"] = sum_logprob / (len(out) + 1)
    return out


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    top = x[np.isfinite(x)].max()
    return x - (top + np.log(np.exp(x - top).sum()))


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


NO_SPEECH_THRESHOLD, LOGPROB_THRESHOLD = 0.6, -1.0  # whisper's defaults


def _cut(tokens: list[int], sp: SpecialTokens, offset: float, seg_frames: int):
    """OpenAI whisper transcribe()'s segments of one window and how many mel frames to seek:
    up to the last timestamp pair, or the whole window after a lone closing timestamp."""
    is_ts = [t >= sp.timestamp_begin for t in tokens]
    single_ending = is_ts[-2:] == [False, True]
    cuts = [i + 1 for i in range(len(tokens) - 1) if is_ts[i] and is_ts[i + 1]]
    if not cuts:
        stamps = [t for t in tokens if t >= sp.timestamp_begin]
        duration = seg_frames / 100
        if stamps and stamps[-1] != sp.timestamp_begin:
            duration = (stamps[-1] - sp.timestamp_begin) * TIME_PRECISION
        return [(offset, offset + duration, tokens)], seg_frames
    if single_ending:
        cuts.append(len(tokens))
    segs, last = [], 0
    for cut in cuts:
        part = tokens[last:cut]
        segs.append((offset + (part[0] - sp.timestamp_begin) * TIME_PRECISION,
                     offset + (part[-1] - sp.timestamp_begin) * TIME_PRECISION, part))
        last = cut
    seek = seg_frames if single_ending else (tokens[last - 1] - sp.timestamp_begin) * 2
    return segs, seek


def transcribe(g: GGUFFile, model: WhisperModel, audio: np.ndarray, language: str = "en",
               zero_fill: bool = False, condition_on_previous_text: bool = True) -> list[Segment]:
    """Greedy, timestamped transcription of any length: 30 s windows, each seeking to its last
    timestamp, the previous text as prompt, and windows skipped as no-speech
    (OpenAI whisper's transcribe() at temperature 0 without fallback). `zero_fill`: the last
    window's tail is zero features (OpenAI, faster-whisper) instead of the log-mel of the
    silence padding (whisper.cpp)."""
    sp = SpecialTokens.from_gguf(g)
    mel = log_mel_spectrogram(audio, model.args.n_mels, padding=N_SAMPLES)
    content = mel.shape[1] - N_SAMPLES // 160
    lang = language_token(g, language) if sp.multilingual else None
    start = [sp.sot] if lang is None else [sp.sot, lang, sp.transcribe]
    seek, history, segments = 0, [], []
    while seek < content:
        size = min(3000, content - seek)
        window = pad_or_trim(mel[:, seek:seek + size] if zero_fill else mel[:, seek:])
        past = history[-(model.args.n_text_ctx // 2 - 1):]
        prompt = ([sp.sot_prev, *past] if past else []) + start
        stats: dict = {}
        tokens = greedy_tokens(model, sp, window, prompt, stats=stats)
        if stats["no_speech_prob"] > NO_SPEECH_THRESHOLD and \
                stats["avg_logprob"] <= LOGPROB_THRESHOLD:
            seek += size
            continue
        cut, step = _cut(tokens, sp, seek / 100, size)
        for t0, t1, part in cut:
            text = tuple(t for t in part if t < sp.eot)
            if t0 != t1 and tokens_to_text(g.require("tokenizer.ggml.tokens"), text).strip():
                segments.append(Segment(t0, t1, text))
                history += part if condition_on_previous_text else []  # empty ones are dropped
        seek += step
    return segments
