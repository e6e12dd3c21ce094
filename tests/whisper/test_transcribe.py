"""Audio longer than one window: our seek loop against OpenAI whisper's transcribe() (greedy,
temperature 0 only, previous text as prompt) on the same weights, with its zero-filled last
window."""

from __future__ import annotations

import pytest

from llamacpy.audio.transcribe import tokens_to_text, transcribe

from .test_timestamps import LONG

whisper = pytest.importorskip("whisper")
torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow
STORY = LONG + (" When the sunlight strikes raindrops in the air, they act as a prism and form a "
                "rainbow. The rainbow is a division of white light into many beautiful colors. "
                "These take the shape of a long round arch, with its path high above, and its "
                "two ends apparently beyond the horizon.")


def test_long_audio_matches_openai_transcribe(ct2_folder, whisper_gguf, whisper_model, speak):
    from .openai_reference import openai_whisper_model

    audio = speak(STORY + " " + STORY)
    assert len(audio) > 16000 * 35  # two windows at least
    ref = whisper.transcribe(openai_whisper_model(ct2_folder), audio, temperature=0.0,
                             fp16=False, language="en", condition_on_previous_text=True)
    ours = transcribe(whisper_gguf, whisper_model, audio, zero_fill=True)
    vocab = whisper_gguf.require("tokenizer.ggml.tokens")
    got = [(round(s.start, 2), round(s.end, 2), tokens_to_text(vocab, list(s.tokens)))
           for s in ours]
    want = [(round(s["start"], 2), round(s["end"], 2), s["text"]) for s in ref["segments"]]
    assert got == want
    assert max(s.end for s in ours) > 30
