"""Greedy decoding with timestamps (OpenAI's ApplyTimestampRules) against CTranslate2's greedy
search on the same mel, and the segments cut from its timestamp tokens."""

from __future__ import annotations

import pytest

from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, greedy_tokens, tokens_to_text, window_segments

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

    segments = window_segments(ours, sp)
    assert len(segments) >= 2
    ends = [0.0] + [x for s in segments for x in (s.start, s.end)]
    assert ends == sorted(ends) and segments[-1].end <= len(audio) / 16000 + 1.0
    tok = tokenizers.Tokenizer.from_file(str(ct2_folder / "tokenizer.json"))
    texts = [tokens_to_text(whisper_gguf.require("tokenizer.ggml.tokens"), list(s.tokens))
             for s in segments]
    assert texts == [tok.decode(list(s.tokens)) for s in segments]
    assert "lazy dog" in texts[0] and "cheese" in texts[-1]


def test_window_segments_cuts_at_timestamps(whisper_gguf):
    sp = SpecialTokens.from_gguf(whisper_gguf)
    ts = lambda sec: sp.timestamp_begin + round(sec / 0.02)
    segs = window_segments([ts(0), 10, 11, ts(1.5), ts(1.5), 12, ts(3.0), ts(3.2), 13], sp,
                           offset=30.0)
    assert [(s.start, s.end, s.tokens) for s in segs] == [
        (30.0, 31.5, (10, 11)), (31.5, 33.0, (12,)), (33.2, 60.0, (13,))]
