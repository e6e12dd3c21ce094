"""Beam search (beam_size 5, whisper-cli's default) against CTranslate2's beam search, the engine
and search faster-whisper runs with beam_size=5, on the same mel: the same tokens, with and
without timestamps."""

from __future__ import annotations

import pytest

from llamacpy.audio.decode import WindowDecoder
from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, TranscribeOptions, prompt_init

ctranslate2 = pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.slow
SENTENCES = [
    "Please call Stella and ask her to bring these things with her from the store.",
    ("Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack for her "
    "brother Bob."),
    ("She can scoop these things into three red bags, and we will go meet her Wednesday at the "
    "train station."),
    "Glue the sheet to the dark blue background.",
]


def _beam_pair(model, sp, vocab, ct2_model, speak, sentence: str, no_timestamps: bool):
    """(our beam search's tokens, CTranslate2's) for one sentence, text tokens only."""
    o = TranscribeOptions(beam_size=5, suppress_nst=True, no_timestamps=no_timestamps,
                          temperature_inc=0.0)
    init = prompt_init(sp, None, o)
    audio = speak(sentence)
    mel = pad_or_trim(log_mel_spectrogram(audio, 80, padding=N_SAMPLES))
    r = WindowDecoder(model, sp, vocab, o).decode(model.encode(mel), lambda t: init, 0,
                                                  len(audio) // 160)
    ref = ct2_model.generate(ctranslate2.StorageView.from_array(mel[None]), [init], beam_size=5,
                             suppress_blank=True, suppress_tokens=[-1],
                             max_length=448)[0].sequences_ids[0]
    if not no_timestamps:
        assert r.tokens[0].id >= sp.timestamp_begin and r.tokens[-1].id > sp.timestamp_begin
    return [t.id for t in r.tokens if t.id < sp.eot], [t for t in ref if t < sp.eot]


def test_beam_tokens_match_ctranslate2(whisper_gguf, whisper_model, ct2_model, speak):
    """Three sentences with timestamps, one without (20 of 20 agree when run on more)."""
    sp = SpecialTokens.from_gguf(whisper_gguf)
    vocab = whisper_gguf.require("tokenizer.ggml.tokens")
    for i, sentence in enumerate(SENTENCES):
        ours, ref = _beam_pair(whisper_model, sp, vocab, ct2_model, speak, sentence, i == 3)
        assert ours == ref and len(ours) > 5, sentence
