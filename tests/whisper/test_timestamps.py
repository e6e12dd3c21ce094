"""Greedy decoding with timestamps (OpenAI's ApplyTimestampRules) against CTranslate2's greedy
search on the same mel, and the segments cut from its timestamp tokens."""

from __future__ import annotations

import pytest

from llamacpy.audio.decode import TokenData, WindowResult
from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import (
    SpecialTokens,
    TranscribeOptions,
    greedy_tokens,
    tokens_to_text,
    window_segments,
)

ctranslate2 = pytest.importorskip("ctranslate2")
LONG = ("The quick brown fox jumps over the lazy dog. Please call Stella and ask her to bring "
        "these things with her from the store. Six spoons of fresh snow peas, five thick slabs "
        "of blue cheese.")


@pytest.mark.slow
def test_timestamp_tokens_and_segments_match_ctranslate2(whisper_gguf, whisper_model, ct2_model,
                                                         ct2_folder, speak):
    tokenizers = pytest.importorskip("tokenizers")
    audio = speak(LONG)
    mel = pad_or_trim(log_mel_spectrogram(audio, 80, padding=N_SAMPLES))
    sp = SpecialTokens.from_gguf(whisper_gguf)
    ours = greedy_tokens(whisper_model, sp, mel, [sp.sot])
    ref = ct2_model.generate(ctranslate2.StorageView.from_array(mel[None]), [[sp.sot]],
                             beam_size=1, max_length=448)[0].sequences_ids[0]
    assert ours == [t for t in ref if t != sp.eot]
    assert sum(t >= sp.timestamp_begin for t in ours) >= 4  # several timestamped segments

    segments = window_segments(_result(ours, sp), 0, whisper_gguf.require("tokenizer.ggml.tokens"),
                               sp, TranscribeOptions())
    assert len(segments) >= 2
    ends = [0.0] + [x for s in segments for x in (s.start, s.end)]
    assert ends == sorted(ends) and segments[-1].end <= len(audio) / 16000 + 1.0
    tok = tokenizers.Tokenizer.from_file(str(ct2_folder / "tokenizer.json"))
    texts = [s.text for s in segments]
    assert texts == [tokens_to_text(whisper_gguf.require("tokenizer.ggml.tokens"), list(s.ids))
                     for s in segments]
    assert texts == [tok.decode(list(s.ids)) for s in segments]
    assert "lazy dog" in texts[0] and "cheese" in texts[-1]


def _result(ids: list[int], sp: SpecialTokens, seek_delta: int = 3000) -> WindowResult:
    tokens = [TokenData(t, max(t, sp.timestamp_begin), 1.0, 0.0, 1.0,
                        1.0) for t in ids]
    return WindowResult(tokens, seek_delta, 0.0, 0.0, 0.0, 0.0, False)


def test_window_segments_cuts_at_timestamps(whisper_gguf):
    """whisper.cpp's cutting: at each timestamp after text; a pair starts the next segment at
    its second time; trailing text ends at the window's seek_delta."""
    sp = SpecialTokens.from_gguf(whisper_gguf)
    vocab = whisper_gguf.require("tokenizer.ggml.tokens")
    ts = lambda sec: sp.timestamp_begin + round(sec / 0.02)
    r = _result([ts(0), 10, 11, ts(1.5), ts(1.5), 12, ts(3.0), ts(3.2), 13], sp, seek_delta=2500)
    segs = window_segments(r, 3000, vocab, sp, TranscribeOptions())
    assert [(s.start, s.end, s.ids) for s in segs] == [
        (30.0, 31.5, (10, 11)), (31.5, 33.0, (12,)), (33.2, 55.0, (13,))]
    assert [t.id for t in segs[0].tokens] == [ts(0), 10, 11, ts(1.5)]
    assert segs[0].text == tokens_to_text(vocab, [10, 11])
