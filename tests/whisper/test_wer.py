"""Accuracy against faster-whisper (the same CTranslate2 weights, float32): 20 Harvard sentences
spoken by espeak-ng, greedy decoding at temperature 0 on both sides, for whisper-tiny.en and
whisper-base. The sentences go four to a clip, a second of silence apart (five encoder windows
instead of twenty keep the test short); each clip's segments must equal faster-whisper's on
nearly all, and the word error rate (OpenAI's EnglishTextNormalizer on both sides) be no worse
by more than 0.02."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy import Whisper
from llamacpy.audio.wav import load_audio

from .conftest import unpacked_ct2_folder
from .test_server import spoken_wav

faster_whisper = pytest.importorskip("faster_whisper")
normalizers = pytest.importorskip("whisper.normalizers")
pytestmark = pytest.mark.slow

SENTENCES = [  # the Harvard sentences, list 1 and 2
    "The birch canoe slid on the smooth planks.", "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.", "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.", "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.", "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.", "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.", "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.",
    "Kick the ball straight and follow through.", "Help the woman get back to her feet.",
    "A pot of tea helps to pass the evening.", "Smoky fires lack flame and heat.",
    "The soft cushion broke the man's fall.", "The salt breeze came across from the sea.",
    "The girl at the booth sold fifty bonds."]
PER_CLIP = 4
MAX_DIFFERENT = 2  # segments of about 20: "nearly all" equal faster-whisper's


def word_errors(reference: str, hypothesis: str) -> int:
    """Word-level Levenshtein distance (substitutions + deletions + insertions)."""
    ref, hyp = reference.split(), hypothesis.split()
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[-1]


def wer(references: list[str], hypotheses: list[str]) -> float:
    norm = normalizers.EnglishTextNormalizer()
    refs, hyps = [norm(r) for r in references], [norm(h) for h in hypotheses]
    return sum(map(word_errors, refs, hyps)) / sum(len(r.split()) for r in refs)


def test_word_errors_counts_edits():
    assert word_errors("a b c d", "a x c") == 2
    assert word_errors("", "a b") == 2 and word_errors("a b", "a b") == 0
    assert wer(["The boy was there."], ["the boy is there"]) == 0.25


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Five clips of four sentences each, one second of silence after every sentence."""
    folder = tmp_path_factory.mktemp("harvard")
    spoken = [load_audio(spoken_wav(folder, f"{i}.wav", s)) for i, s in enumerate(SENTENCES)]
    gap = np.zeros(16000, np.float32)
    return [np.concatenate([x for a in spoken[i:i + PER_CLIP] for x in (a, gap)])
            for i in range(0, len(spoken), PER_CLIP)]


@pytest.mark.parametrize("name", ["whisper-tiny.en", "whisper-base"])
def test_transcripts_and_wer_match_faster_whisper(name, clips):
    ours = Whisper(name)
    ref = faster_whisper.WhisperModel(str(unpacked_ct2_folder(name)), device="cpu",
                                      compute_type="float32", cpu_threads=2)
    mine, theirs = [], []
    for audio in clips:
        segments, _ = ours.transcribe(audio, language="en", beam_size=1, temperature=0.0)
        mine.append([s.text for s in segments])
        segments, _ = ref.transcribe(audio, language="en", beam_size=1, temperature=0.0)
        theirs.append([s.text for s in segments])
    different = sum(max(len(a), len(b)) - sum(x == y for x, y in zip(a, b))
                    for a, b in zip(mine, theirs))
    references = [" ".join(SENTENCES[i:i + PER_CLIP]) for i in range(0, 20, PER_CLIP)]
    ours_wer = wer(references, ["".join(t) for t in mine])
    ref_wer = wer(references, ["".join(t) for t in theirs])
    print(f"{name}: {different} of {sum(map(len, theirs))} segments differ; WER ours "
          f"{ours_wer:.4f}, faster-whisper {ref_wer:.4f}")
    assert different <= MAX_DIFFERENT, list(zip(mine, theirs))
    assert ours_wer <= ref_wer + 0.02
