"""Speech to text as whisper.cpp's whisper_full does it: `transcribe(g, model, audio, options)`.

`TranscribeOptions` carries whisper_full_params' names and the defaults whisper-cli runs with
(beam search, beam_size 5, best_of 5, temperature 0 with fallback steps of 0.2, entropy_thold 2.4,
logprob_thold -1, no_speech_thold 0.6). Done: 30 s windows seeking by the last timestamp, the
previous text as <|startofprev|> prompt (dropped above temperature 0.5 and for the last 5 s),
greedy, best-of sampling and beam search (audio/decode.py), the temperature fallback, the
no-speech skip, `language="auto"` detection (audio/language.py), translate, an initial prompt,
offset/duration, suppress_blank / suppress_nst / suppress_regex, max_initial_ts, max_tokens,
single_segment, no_timestamps and a progress callback. Refused with a ValueError naming the
option: token_timestamps (whisper.cpp's experimental per-token times), audio_ctx, and more
than 8 decoders (whisper.cpp's WHISPER_MAX_DECODERS).

The last window is padded as whisper.cpp pads it: 30 s of zero samples are appended before the
spectrogram, so a short clip's window ends in the log-mel of silence (OpenAI's transcribe() and
faster-whisper fill the window with zero features instead).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..format import GGUFFile
from ..models.whisper import WhisperModel
from .decode import HISTORY_TEMP_CUTOFF, WINDOW, WindowDecoder, log_softmax
from .language import detect_language
from .mel import HOP_LENGTH, N_FFT, N_SAMPLES, log_mel_spectrogram, pad_or_trim
from .vocab import (
    SpecialTokens,
    language_token,
    languages,  # noqa: F401 (re-exported for the CLI and servers)
    token_bytes,
    tokens_to_text,
)

MAX_DECODERS = 8  # WHISPER_MAX_DECODERS


@dataclass
class TranscribeOptions:
    """whisper_full_params, with whisper-cli's defaults (whisper_full_default_params(BEAM_SEARCH)
    as whisper-cli fills it). beam_size > 1 selects beam search, 1 greedy decoding."""

    language: str = "en"  # a code, or "auto" to detect it (whisper_lang_auto_detect)
    detect_language: bool = False  # only detect the language; no transcription
    translate: bool = False  # <|translate|>: English text from other speech (multilingual)
    beam_size: int = 5  # -bs
    best_of: int = 5  # -bo: decoders sampled at temperature > 0
    temperature: float = 0.0  # -tp
    temperature_inc: float = 0.2  # -tpi; 0 turns the fallback off (-nf)
    entropy_thold: float = 2.4  # -et: fail a result whose last 32 tokens are this repetitive
    logprob_thold: float = -1.0  # -lpt: fail a result whose average log-probability is lower
    no_speech_thold: float = 0.6  # -nth: P(<|nocaptions|>) above which a window is silence
    length_penalty: float = -1.0  # -1: score = sum of log-probabilities / length
    prompt: str | None = None  # --prompt: initial prompt text
    carry_initial_prompt: bool = False  # --carry-initial-prompt: keep it in every window
    no_context: bool = True  # whisper.cpp keeps no text between calls (there is no state)
    n_max_text_ctx: int = 16384  # -mc: past text tokens in the prompt (at most 223)
    no_timestamps: bool = False  # -nt
    single_segment: bool = False
    offset_ms: int = 0  # -ot
    duration_ms: int = 0  # -d; 0: to the end
    suppress_blank: bool = True
    suppress_nst: bool = False  # -sns: non-speech tokens
    suppress_regex: str | None = None  # --suppress-regex: tokens whose text matches
    max_initial_ts: float = 1.0  # seconds: the first timestamp is at most this
    max_tokens: int = 0  # tokens per segment; 0: no limit
    token_timestamps: bool = False  # not implemented: refused
    audio_ctx: int = 0  # -ac; only 0 (the full 1500) is implemented
    zero_fill: bool = False  # the last window's tail as zero features (OpenAI, faster-whisper)


@dataclass(frozen=True)
class Token:
    """A decoded token (whisper_token_data): id, its text, probability p and log-probability
    plog; tid/pt/ptsum: the likeliest timestamp token and its share of the timestamps' mass.
    t0/t1 (seconds) stay None: token-level timestamps are not computed yet."""

    id: int
    text: str
    p: float
    plog: float
    tid: int
    pt: float
    ptsum: float
    t0: float | None = None
    t1: float | None = None


@dataclass(frozen=True)
class Segment:
    """A timestamped piece of the transcript; `tokens` are all of its tokens, timestamp tokens
    included (whisper.cpp's segment tokens), and `ids` its text tokens."""

    start: float  # seconds
    end: float  # seconds
    text: str
    tokens: tuple[Token, ...]
    seek: int  # mel frame (10 ms) where its window starts
    temperature: float  # the temperature that produced it (after fallback)
    avg_logprob: float
    no_speech_prob: float
    compression_ratio: float  # zlib ratio of the text (OpenAI's verbose_json field)
    eot: int = field(default=0, repr=False)

    @property
    def ids(self) -> tuple[int, ...]:
        return tuple(t.id for t in self.tokens if t.id < self.eot)


@dataclass(frozen=True)
class TranscribeResult:
    segments: list[Segment]
    language: str  # the code used (detected with "auto")
    language_probs: dict[str, float] | None  # from detection, else None
    duration: float  # seconds of audio

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments)


def check_options(o: TranscribeOptions, sp: SpecialTokens) -> None:
    """A ValueError naming the first option that cannot take effect."""
    if o.token_timestamps:
        raise ValueError("token_timestamps (per-token times) is not implemented yet")
    if o.audio_ctx:
        raise ValueError("audio_ctx other than 0 is not implemented")
    if max(o.beam_size, o.best_of) > MAX_DECODERS:
        raise ValueError(f"too many decoders requested ({max(o.beam_size, o.best_of)}), "
                         f"max = {MAX_DECODERS} (beam_size, best_of)")
    if o.beam_size < 1 or o.best_of < 1:
        raise ValueError("beam_size and best_of must be at least 1")
    if not 0.0 <= o.temperature <= 1.0 or o.temperature_inc < 0:
        raise ValueError("temperature must be in [0, 1] and temperature_inc >= 0")
    if o.offset_ms < 0 or o.duration_ms < 0:
        raise ValueError("offset_ms and duration_ms must be >= 0")
    if not sp.multilingual and (o.translate or o.language not in ("en", "auto")):
        raise ValueError("an English-only model cannot translate or transcribe language "
                         f"'{o.language}' (use a multilingual model such as whisper-base)")


def transcribe(g: GGUFFile, model: WhisperModel, audio: np.ndarray,
               options: TranscribeOptions | None = None,
               progress: Callable[[int], None] | None = None) -> TranscribeResult:
    """Transcribe 16 kHz mono float32 `audio` (whisper_full_with_state). `progress(percent)` is
    called at each window, as whisper.cpp's progress_callback."""
    o = options or TranscribeOptions()
    sp = SpecialTokens.from_gguf(g)
    check_options(o, sp)
    language = o.language if sp.multilingual or o.language != "auto" else "en"
    lang_id = None if language == "auto" else (language_token(g, language) if sp.multilingual
                                                else None)
    audio = np.asarray(audio, np.float32).reshape(-1)
    duration = len(audio) / 16000
    mel = log_mel_spectrogram(audio, model.args.n_mels, padding=N_SAMPLES)
    features = _Features(model, mel, mel.shape[1] - N_SAMPLES // HOP_LENGTH if o.zero_fill
                         else None)
    probs = None
    if language == "auto":
        language, probs = detect_language(g, model, sp, features(0))
        lang_id = language_token(g, language)
        if o.detect_language:
            return TranscribeResult([], language, probs, duration)
    seek_start = o.offset_ms // 10
    n_len = 1 + (len(audio) + N_FFT // 2 - N_FFT) // HOP_LENGTH  # whisper.cpp's n_len_org
    seek_end = n_len if o.duration_ms == 0 else seek_start + o.duration_ms // 10
    segments = _windows(g, model, sp, o, features, lang_id, seek_start, seek_end, progress)
    return TranscribeResult(segments, language, probs, duration)


class _Features:
    """Encoder output per window start, computed once (language detection reuses window 0)."""

    def __init__(self, model: WhisperModel, mel: np.ndarray, content: int | None = None):
        self.model, self.mel, self.cached = model, mel, {}
        self.content = content  # zero_fill: mel frames of the audio itself, zeros after them

    def __call__(self, seek: int) -> np.ndarray:
        if seek not in self.cached:
            end = None if self.content is None else max(seek + 1, self.content)
            self.cached = {seek: self.model.encode(pad_or_trim(self.mel[:, seek:end]))}
        return self.cached[seek]


def prompt_init(sp: SpecialTokens, lang_id: int | None, o: TranscribeOptions) -> list[int]:
    """<|startoftranscript|> [<|lang|> <|transcribe|> or <|translate|>] [<|notimestamps|>]."""
    out = [sp.sot]
    if sp.multilingual:
        out += [lang_id, sp.translate if o.translate else sp.transcribe]
    return out + ([sp.no_timestamps] if o.no_timestamps else [])


class _History:
    """The text a window is prompted with: prompt_past0 (the initial prompt, with
    carry_initial_prompt) and prompt_past1 (the rolling past), as whisper.cpp keeps them."""

    def __init__(self, g: GGUFFile, sp: SpecialTokens, o: TranscribeOptions, init: list[int],
                 max_ctx: int):
        self.sp, self.o, self.init, self.max_ctx = sp, o, init, max_ctx
        self.past0: list[int] = []
        self.past1: list[int] = []
        if o.prompt:
            from ..tokenizer.tokenizer import Tokenizer

            ids = Tokenizer.from_gguf(g).tokenize(o.prompt, add_special=False)
            if o.carry_initial_prompt:
                self.past0 = ids[-max(1, max_ctx - 1):]
            else:
                self.past1 = ids

    def prompt(self, t: float) -> list[int]:
        """<|startofprev|> past... then the task tokens; no past above temperature 0.5."""
        o, past = self.o, []
        if o.n_max_text_ctx > 0 and t < HISTORY_TEMP_CUTOFF and self.max_ctx > 0:
            head = self.past0 if o.carry_initial_prompt else []
            n1 = min(self.max_ctx - len(head) - 1, len(self.past1))
            if head or self.past1:
                past = [self.sp.sot_prev, *head, *self.past1[len(self.past1) - n1:]]
        return past + self.init

    def clear(self) -> None:
        self.past0, self.past1 = [], []

    def update(self, prompt: list[int], tokens: list[int]) -> None:
        """The past becomes this window's prompt text and its result tokens."""
        self.past1 = prompt[1:len(prompt) - len(self.init)] if (
            not self.o.carry_initial_prompt and prompt[0] == self.sp.sot_prev) else []
        self.past1 += tokens


def _windows(g, model, sp, o, features, lang_id, seek_start, seek_end, progress):
    """whisper_full_with_state's main loop over windows."""
    vocab = g.require("tokenizer.ggml.tokens")
    decoder = WindowDecoder(model, sp, vocab, o)
    history = _History(g, sp, o, prompt_init(sp, lang_id, o),
                       min(o.n_max_text_ctx, model.args.n_text_ctx // 2))
    seek, segments = seek_start, []
    while True:
        if progress is not None:
            progress(100 * (seek - seek_start) // max(1, seek_end - seek_start))
        if seek + 10 >= seek_end:
            break
        if seek > seek_start and seek + 500 >= seek_end:  # a short tail: past text confuses it
            history.clear()
        r = decoder.decode(features(seek), history.prompt, seek, seek_end)
        no_speech = r.no_speech_prob > o.no_speech_thold and r.avg_logprob < o.logprob_thold
        history.update(history.prompt(r.temperature), [] if no_speech else
                       [t.id for t in r.tokens])
        if not no_speech:
            segments += window_segments(r, seek, vocab, sp, o)
        seek += _seek_delta(r, seek, seek_end, sp, o)
    return segments


def _seek_delta(r, seek: int, seek_end: int, sp: SpecialTokens, o: TranscribeOptions) -> int:
    """After a lone closing timestamp the whole window is done (single_timestamp_ending)."""
    t, beg = r.tokens, sp.timestamp_begin
    max_tokens_ending = o.max_tokens > 0 and not o.single_segment and len(t) > o.max_tokens
    if len(t) > 1 and not max_tokens_ending and t[-2].id < beg < t[-1].id:
        return min(seek_end - seek, WINDOW)
    return r.seek_delta


def window_segments(r, seek: int, vocab: list[str], sp: SpecialTokens,
                    o: TranscribeOptions) -> list[Segment]:
    """whisper.cpp's segments of one window: cut after each timestamp token (> <|0.00|>) that
    follows text; consecutive timestamps start the next one; trailing text ends at the seek."""
    tokens, beg = r.tokens, sp.timestamp_begin
    if not tokens:
        return []
    out, text, i0 = [], [], 0
    t0 = seek + 2 * (tokens[0].tid - beg)
    i = 0
    while i < len(tokens):
        if tokens[i].id < sp.eot:
            text.append(tokens[i].id)
        if tokens[i].id > beg and not o.single_segment:
            t1 = seek + 2 * (tokens[i].tid - beg)
            if text:
                out.append(_segment(r, t0, t1, text, tokens[i0:i + 1], vocab, sp, seek))
            text, t0 = [], t1
            while i + 1 < len(tokens) and tokens[i + 1].id > beg:
                i += 1
                t0 = seek + 2 * (tokens[i].tid - beg)
            i0 = i + 1
        i += 1
    if text:
        out.append(_segment(r, t0, seek + r.seek_delta, text, tokens[i0:], vocab, sp, seek))
    return out


def _segment(r, t0: int, t1: int, text_ids: list[int], tokens, vocab, sp, seek) -> Segment:
    text = token_bytes(vocab, text_ids).decode("utf-8", errors="replace")
    data = text.encode("utf-8")
    ratio = len(data) / max(1, len(zlib.compress(data)))
    toks = tuple(Token(t.id, tokens_to_text(vocab, [t.id]), t.p, t.plog, t.tid, t.pt, t.ptsum)
                 for t in tokens)
    return Segment(t0 / 100, t1 / 100, text, toks, seek, r.temperature, r.avg_logprob,
                   r.no_speech_prob, ratio, sp.eot)


# --- OpenAI whisper's greedy decoding of one window: the reference the tests hold the model to


def prompt_tokens(sp: SpecialTokens, language: int | None = None) -> list[int]:
    """<|startoftranscript|> [<|lang|> <|transcribe|>] <|notimestamps|>; English-only models
    take no language or task token."""
    if not sp.multilingual:
        return [sp.sot, sp.no_timestamps]
    if language is None:
        raise ValueError("a multilingual model needs a language token here")
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
    logprobs = log_softmax(logits)
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
            log_softmax(all_logits[prompt.index(sp.sot)])[sp.no_speech]))
    while len(out) < limit and cache.n_past < model.args.n_text_ctx:
        logits[mask] = -np.inf
        if not out:
            logits[list(sp.suppress_begin)] = -np.inf
        if timestamps:
            apply_timestamp_rules(logits, out, sp)
        token = int(np.argmax(logits))
        sum_logprob += float(log_softmax(logits)[token])
        if token == sp.eot:
            break
        out.append(token)
        logits = model.decode([token], cache)[-1]
    if stats is not None:  # whisper's avg_logprob counts the end token
        stats["avg_logprob"] = sum_logprob / (len(out) + 1)
    return out


def transcribe_window(g: GGUFFile, model: WhisperModel, audio: np.ndarray,
                      language: str = "en", suppress_non_speech: bool = True) -> str:
    """The text of the first 30 seconds of 16 kHz mono float32 `audio` (`language` is used by
    multilingual models only)."""
    sp = SpecialTokens.from_gguf(g)
    mel = pad_or_trim(log_mel_spectrogram(audio, model.args.n_mels, padding=N_SAMPLES))
    lang = language_token(g, language) if sp.multilingual else None
    ids = greedy_tokens(model, sp, mel, prompt_tokens(sp, lang), suppress_non_speech)
    return tokens_to_text(g.require("tokenizer.ggml.tokens"), ids)
