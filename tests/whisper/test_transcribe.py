"""Audio longer than one window: our whisper.cpp loop (greedy, no fallback, the previous text as
prompt) against OpenAI whisper's transcribe() at temperature 0 on the same weights. The texts
are equal; the times agree to 0.04 s (the last window is padded as whisper.cpp pads it, with the
log-mel of silence, where OpenAI fills zero features)."""

from __future__ import annotations

import pytest

from llamacpy.audio.transcribe import TranscribeOptions, transcribe

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
    progress = []
    options = TranscribeOptions(beam_size=1, temperature_inc=0.0, suppress_nst=True)
    ours = transcribe(whisper_gguf, whisper_model, audio, options, progress.append).segments
    assert [s.text for s in ours] == [s["text"] for s in ref["segments"]]
    for s, r in zip(ours, ref["segments"]):
        assert abs(s.start - r["start"]) <= 0.041 and abs(s.end - r["end"]) <= 0.041
    assert max(s.end for s in ours) > 30
    assert progress[0] == 0 and progress == sorted(progress) and len(progress) >= 3
