"""`Whisper`: speech to text from Python, shaped like faster-whisper's `WhisperModel`, so code
written for it runs after changing `WhisperModel("tiny.en")` to `Whisper("whisper-tiny.en")`.

    segments, info = Whisper("whisper-tiny.en").transcribe("speech.wav", beam_size=5)
    for s in segments:
        print(s.start, s.end, s.text)

`transcribe` takes faster-whisper's arguments and defaults and returns (segments, info) with
its fields; segments come as a list (faster-whisper yields them lazily). Decoding is
audio/transcribe.py's (whisper.cpp's loop), with faster-whisper's padding of the last window
(zero features after the audio) so that transcripts match its own. An argument whose effect
llamacpy does not provide raises NotSupportedError rather than being ignored.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from .audio.transcribe import TranscribeOptions, transcribe
from .format import open_gguf
from .hub import resolve_model
from .kernels import set_threads
from .models.whisper import WhisperModel

FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # faster-whisper's default temperatures
# faster-whisper arguments that only their default value can take here
ONLY_DEFAULT = {"patience": 1, "repetition_penalty": 1, "no_repeat_ngram_size": 0,
                "prompt_reset_on_temperature": 0.5, "prefix": None,
                "vad_filter": False, "vad_parameters": None, "multilingual": False,
                "max_new_tokens": None, "chunk_length": None, "clip_timestamps": "0",
                "hallucination_silence_threshold": None, "hotwords": None,
                "language_detection_threshold": 0.5, "language_detection_segments": 1}


class NotSupportedError(ValueError):
    """An argument whose effect llamacpy does not provide."""


@dataclass
class Word:
    """faster_whisper.transcribe.Word."""

    start: float
    end: float
    word: str
    probability: float


@dataclass
class Segment:
    """faster_whisper.transcribe.Segment."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[Word] | None
    temperature: float


@dataclass
class TranscriptionInfo:
    """faster_whisper.transcribe.TranscriptionInfo."""

    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: list[tuple[str, float]] | None
    transcription_options: dict
    vad_options: None = None


class Whisper:
    """A whisper model (a GGUF path or a catalogue name: whisper-tiny.en, whisper-base)."""

    def __init__(self, model: str | os.PathLike = "whisper-tiny.en", cpu_threads: int = 0):
        path = resolve_model(str(model))
        self.gguf = open_gguf(path)
        if self.gguf.get("general.architecture") != "whisper":
            raise ValueError(f"{path} is not a whisper model")
        self.model = WhisperModel(self.gguf)
        self.multilingual = bool(self.gguf.get("whisper.multilingual"))
        if cpu_threads > 0:
            set_threads(cpu_threads)

    def transcribe(self, audio: str | os.PathLike | BinaryIO | np.ndarray,
                   language: str | None = None, task: str = "transcribe",
                   beam_size: int = 5, best_of: int = 5, length_penalty: float = 1,
                   temperature: float | Sequence[float] = FALLBACK,
                   compression_ratio_threshold: float | None = 2.4,
                   log_prob_threshold: float | None = -1.0,
                   no_speech_threshold: float | None = 0.6,
                   condition_on_previous_text: bool = True,
                   initial_prompt: str | None = None, suppress_blank: bool = True,
                   suppress_tokens: list[int] | None = (-1,), without_timestamps: bool = False,
                   max_initial_timestamp: float = 1.0, word_timestamps: bool = False,
                   log_progress: bool = False, **kwargs) -> tuple[list[Segment], TranscriptionInfo]:
        """Transcribe a file (WAV, or any format through ffmpeg), an open binary file or 16 kHz
        mono float32 samples; faster-whisper's arguments and return values."""
        refuse_non_defaults(kwargs)
        if task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', not {task!r}")
        if length_penalty != 1:
            raise NotSupportedError("length_penalty other than 1 (the score is the average "
                                    "log-probability)")
        start, inc = temperature_steps(temperature)
        options = TranscribeOptions(
            language=language or ("auto" if self.multilingual else "en"),
            translate=task == "translate", beam_size=beam_size, best_of=best_of,
            temperature=start, temperature_inc=inc,
            entropy_thold=repetition_threshold(compression_ratio_threshold),
            logprob_thold=-np.inf if log_prob_threshold is None else log_prob_threshold,
            no_speech_thold=np.inf if no_speech_threshold is None else no_speech_threshold,
            n_max_text_ctx=16384 if condition_on_previous_text else 0,
            prompt=prompt_text(initial_prompt), suppress_blank=suppress_blank,
            suppress_nst=non_speech(suppress_tokens), no_timestamps=without_timestamps,
            max_initial_ts=max_initial_timestamp, zero_fill=True)
        progress = (lambda p: print(f"whisper: progress = {p:3d}%", flush=True)) \
            if log_progress else None
        samples = load(audio)
        result = transcribe(self.gguf, self.model, samples, options, progress)
        segments = result.segments
        if word_timestamps:  # whisper.cpp's token times, not faster-whisper's DTW alignment
            from .audio.token_times import with_token_times
            from .audio.transcribe import SpecialTokens

            segments = with_token_times(segments, samples, self.gguf.require(
                "tokenizer.ggml.tokens"), SpecialTokens.from_gguf(self.gguf))
        out = [segment(i, s, word_timestamps) for i, s in enumerate(segments)]
        return out, info(result, options)


def refuse_non_defaults(kwargs: dict[str, Any]) -> None:
    for name, value in kwargs.items():
        if name not in ONLY_DEFAULT:
            raise TypeError(f"transcribe() got an unexpected keyword argument '{name}'")
        if value != ONLY_DEFAULT[name]:
            raise NotSupportedError(f"{name}={value!r} is not supported by llamacpy (only "
                                    f"{ONLY_DEFAULT[name]!r})")


def temperature_steps(temperature: float | Sequence[float]) -> tuple[float, float]:
    """(first, step) of whisper.cpp's fallback: a float is one temperature, no fallback; a
    sequence must be evenly spaced up to 1.0, as whisper.cpp steps through them."""
    if isinstance(temperature, (int, float)):
        return float(temperature), 0.0
    steps = [float(t) for t in temperature]
    if len(steps) == 1:
        return steps[0], 0.0
    inc = steps[1] - steps[0]
    expected = np.arange(steps[0], 1.0 + 1e-6, inc) if inc > 0 else []
    if len(expected) != len(steps) or not np.allclose(expected, steps):
        raise NotSupportedError(f"temperature={temperature!r}: only evenly spaced steps up to "
                                "1.0 (whisper.cpp's temperature_inc) are supported")
    return steps[0], inc


def repetition_threshold(compression_ratio_threshold: float | None) -> float:
    """The fallback's repetition test is whisper.cpp's (entropy of the last 32 tokens below
    2.4), which stands in for faster-whisper's compression ratio above 2.4."""
    if compression_ratio_threshold is None:
        return 0.0  # the test off
    if compression_ratio_threshold != 2.4:
        raise NotSupportedError("compression_ratio_threshold other than 2.4 or None (the "
                                "repetition test is whisper.cpp's entropy_thold 2.4)")
    return 2.4


def non_speech(suppress_tokens) -> bool:
    """[-1] (the model's non-speech tokens) or nothing; other lists are not supported."""
    ids = list(suppress_tokens or [])
    if ids not in ([], [-1]):
        raise NotSupportedError("suppress_tokens other than [-1] or [] (use suppress_tokens"
                                "=[-1] for the non-speech tokens)")
    return ids == [-1]


def prompt_text(initial_prompt) -> str | None:
    if initial_prompt is not None and not isinstance(initial_prompt, str):
        raise NotSupportedError("initial_prompt as token ids (give the text)")
    return initial_prompt or None


def load(audio) -> np.ndarray:
    """16 kHz mono float32 samples of a path, an open binary file or an array."""
    from .audio.wav import load_audio

    if isinstance(audio, np.ndarray):
        return np.asarray(audio, np.float32).reshape(-1)
    if isinstance(audio, (str, os.PathLike)):
        return load_audio(audio)
    with tempfile.NamedTemporaryFile(suffix=os.path.splitext(getattr(audio, "name", ""))[1]) \
            as fh:
        fh.write(audio.read())
        fh.flush()
        return load_audio(fh.name)


def segment(i: int, s, with_words: bool) -> Segment:
    return Segment(i, s.seek, s.start, s.end, s.text, [t.id for t in s.tokens], s.avg_logprob,
                   s.compression_ratio, s.no_speech_prob, words(s) if with_words else None,
                   s.temperature)


def words(s) -> list[Word]:
    """A timed segment's tokens joined into words (a new one at a leading space): from the
    first token's start to the last one's end, the tokens' mean probability."""
    groups: list[list] = []
    for t in (t for t in s.tokens if t.id < s.eot):
        if not groups or t.text.startswith(" "):
            groups.append([])
        groups[-1].append(t)
    return [Word(g[0].t0, g[-1].t1, "".join(t.text for t in g), float(np.mean([t.p for t in g])))
            for g in groups]


def info(result, options: TranscribeOptions) -> TranscriptionInfo:
    probs = sorted(result.language_probs.items(), key=lambda kv: -kv[1]) \
        if result.language_probs else None
    return TranscriptionInfo(result.language, probs[0][1] if probs else 1.0, result.duration,
                             result.duration, probs, dataclasses.asdict(options))
