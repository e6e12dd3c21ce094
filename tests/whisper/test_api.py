"""`from llamacpy import Whisper`: segments and info against faster-whisper's WhisperModel on the
same clip (float32, the same CTranslate2 weights), greedy and beam search; paths, open files and
arrays give the same answer; arguments llamacpy cannot honour are refused."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy import Whisper
from llamacpy.audio.wav import load_audio
from llamacpy.whisper import NotSupportedError

from .test_server import spoken_wav
from .test_timestamps import LONG

faster_whisper = pytest.importorskip("faster_whisper")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return spoken_wav(tmp_path_factory.mktemp("api"), "long.wav", LONG)


@pytest.fixture(scope="module")
def ours(whisper_gguf):
    return Whisper("whisper-tiny.en", cpu_threads=1)


@pytest.fixture(scope="module")
def reference(ct2_folder):
    return faster_whisper.WhisperModel(str(ct2_folder), device="cpu", compute_type="float32",
                                       cpu_threads=1)


@pytest.mark.parametrize("beam_size", [1, 5])
def test_segments_equal_faster_whisper(ours, reference, clip, beam_size):
    audio = load_audio(clip)  # the same samples for both
    segments, info = ours.transcribe(audio, beam_size=beam_size)
    ref_segments, ref_info = reference.transcribe(audio, beam_size=beam_size)
    ref_segments = list(ref_segments)
    assert [(s.start, s.end, s.text) for s in segments] == \
        [(s.start, s.end, s.text) for s in ref_segments]
    eot = ours.gguf.get("whisper.token.eot")  # timestamps between segments: see docs/WHISPER.md
    text = lambda segs: [[t for t in s.tokens if t < eot] for s in segs]
    assert text(segments) == text(ref_segments)
    assert [s.seek for s in segments] == [s.seek for s in ref_segments]
    assert (info.language, info.duration) == (ref_info.language, ref_info.duration)
    # avg_logprob is whisper.cpp's (the window's result tokens), not faster-whisper's
    assert all(s.avg_logprob < 0 and 0 <= s.no_speech_prob <= 1 for s in segments)


def test_paths_and_open_files_agree(ours, clip):  # arrays: the test above
    with open(clip, "rb") as fh:
        from_file = ours.transcribe(fh, beam_size=1)[0]
    from_path = ours.transcribe(str(clip), beam_size=1, word_timestamps=True)[0]
    assert [s.text for s in from_file] == [s.text for s in from_path]
    assert from_file[0].words is None
    words = [w for s in from_path for w in s.words]  # whisper.cpp's token times
    assert "".join(w.word for w in words) == "".join(s.text for s in from_path)
    assert all(s.start <= w.start <= w.end <= s.end for s in from_path for w in s.words)
    assert all(0 < w.probability <= 1 for w in words)
    assert "lazy dog" in from_path[0].text


def test_arguments_without_an_effect_here_are_refused(ours):
    silence = np.zeros(16000, np.float32)
    for kwargs, match in [({"vad_filter": True}, "vad_filter"),
                          ({"temperature": [0.0, 0.5, 0.7]}, "evenly spaced"),
                          ({"suppress_tokens": [1, 2]}, "suppress_tokens"),
                          ({"length_penalty": 0.5}, "length_penalty"),
                          ({"compression_ratio_threshold": 3.0}, "compression_ratio")]:
        with pytest.raises(NotSupportedError, match=match):
            ours.transcribe(silence, **kwargs)
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        ours.transcribe(silence, colour="red")
    with pytest.raises(ValueError, match="English-only"):
        ours.transcribe(silence, task="translate")
