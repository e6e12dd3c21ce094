"""The temperature fallback and the no-speech skip (whisper_full_with_state's rules), with a
scripted stand-in model whose logits make each rule fire, then on real noise with tiny.en; and
the options an English-only model or this engine refuses."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.decode import Sequence, TokenData, sequence_score
from llamacpy.audio.transcribe import SpecialTokens, TranscribeOptions, transcribe

LOW = -1e9


class _Args:
    n_mels, n_text_ctx = 80, 448

    def __init__(self, n_vocab: int):
        self.n_vocab = n_vocab


class _Cache:
    n_past = 0

    def reorder(self, rows, src):
        pass


class Scripted:
    """logits = script(step) for every sequence; the prompt's last row also carries
    `no_speech` as the <|nocaptions|> logit."""

    def __init__(self, sp: SpecialTokens, n_vocab: int, script, no_speech: float = LOW):
        self.sp, self.args, self.script, self.no_speech = sp, _Args(n_vocab), script, no_speech
        self.prompt_len = 0

    def encode(self, mel):
        return None

    def new_cache(self, features, n_seq=1):
        return _Cache()

    def decode(self, tokens, cache):
        cache.n_past, self.prompt_len = len(tokens), len(tokens)
        out = np.full((len(tokens), self.args.n_vocab), LOW, np.float32)
        out[-1] = self.script(0)
        out[-1, self.sp.no_speech] = self.no_speech
        return out

    def decode_step(self, tokens, cache, rows):
        cache.n_past += 1
        return np.stack([self.script(cache.n_past - self.prompt_len)] * len(rows))


def _uncertain(sp, n_vocab):
    """Uniform over 100 text tokens (log-probability -4.6 each), the end at step 3."""
    def script(step):
        x = np.full(n_vocab, LOW, np.float32)
        x[1000:1100] = 0.0
        if step >= 3:
            x[sp.eot] = 30.0
        return x
    return script


def _repetitive(sp, n_vocab):
    """Token 1000 again and again (the entropy of the last 32 is near 0), the end at step 40."""
    def script(step):
        x = np.full(n_vocab, LOW, np.float32)
        x[1000], x[1001] = 20.0, 0.0
        if step >= 40:
            x[sp.eot] = 40.0
        return x
    return script


def _run(g, model, **kw):
    o = TranscribeOptions(beam_size=1, best_of=2, no_timestamps=True, **kw)
    return transcribe(g, model, np.zeros(16000 * 3, np.float32), o)


@pytest.fixture(scope="module")
def sp_vocab(whisper_gguf):
    return SpecialTokens.from_gguf(whisper_gguf), len(whisper_gguf.require("tokenizer.ggml.tokens"))


def test_low_logprob_falls_back_through_every_temperature(whisper_gguf, sp_vocab):
    sp, n = sp_vocab
    model = Scripted(sp, n, _uncertain(sp, n))
    r = _run(whisper_gguf, model)
    assert [s.temperature for s in r.segments] == [pytest.approx(1.0)]  # 0, 0.2 ... 1.0
    assert r.segments[0].avg_logprob < -1.0
    r = _run(whisper_gguf, model, logprob_thold=-5.0)  # now good enough at temperature 0
    assert [s.temperature for s in r.segments] == [0.0]
    r = _run(whisper_gguf, model, temperature_inc=0.0)  # -nf: no fallback
    assert [s.temperature for s in r.segments] == [0.0]


def test_no_speech_skips_the_window_without_fallback(whisper_gguf, sp_vocab):
    sp, n = sp_vocab
    model = Scripted(sp, n, _uncertain(sp, n), no_speech=6.0)  # P(<|nocaptions|>) = 0.80
    assert _run(whisper_gguf, model).segments == []  # > no_speech_thold 0.6, avg_logprob < -1
    r = _run(whisper_gguf, model, no_speech_thold=0.9)  # not silence now: text, after fallback
    assert [s.temperature for s in r.segments] == [pytest.approx(1.0)]
    assert r.segments[0].no_speech_prob == pytest.approx(np.exp(6) / (np.exp(6) + 100), 1e-5)
    r = _run(whisper_gguf, model, no_speech_thold=0.7, logprob_thold=-5.0)  # good logprob
    assert [s.temperature for s in r.segments] == [0.0]


def test_repetition_fails_on_entropy(whisper_gguf, sp_vocab):
    sp, n = sp_vocab
    model = Scripted(sp, n, _repetitive(sp, n))
    r = _run(whisper_gguf, model)
    assert [s.temperature for s in r.segments] == [pytest.approx(1.0)]
    r = _run(whisper_gguf, model, entropy_thold=0.0)
    assert [s.temperature for s in r.segments] == [0.0]
    assert r.segments[0].text.count(r.segments[0].tokens[0].text) >= 32


def test_sequence_score_matches_whisper_cpp():
    seq = Sequence([TokenData(i % 2, 0, 0.5, -0.5 * (i + 1), 0.0, 0.0) for i in range(40)],
                   result_len=36)
    sequence_score(seq, -1.0)
    logps = [-0.5 * (i + 1) for i in range(36)]
    assert seq.sum_logprobs == pytest.approx(sum(logps))
    assert seq.score == pytest.approx(sum(logps) / 36)  # length_penalty -1: by the length
    assert seq.entropy == pytest.approx(np.log(2))  # tokens 4..35: half 0, half 1
    sequence_score(seq, 1.0)
    assert seq.score == pytest.approx(sum(logps) / ((5 + 36) / 6))


@pytest.mark.slow
def test_noise_is_silence_then_falls_back_when_told_not_to(whisper_gguf, whisper_model):
    noise = (0.05 * np.random.default_rng(0).standard_normal(16000 * 4)).astype(np.float32)
    o = {"beam_size": 1, "best_of": 2}
    assert transcribe(whisper_gguf, whisper_model, noise, TranscribeOptions(**o)).segments == []
    r = transcribe(whisper_gguf, whisper_model, noise, TranscribeOptions(no_speech_thold=1.0, **o))
    assert r.segments and all(s.temperature > 0 for s in r.segments)


@pytest.mark.parametrize("kw, message", [
    ({"translate": True}, "English-only model cannot translate"),
    ({"language": "de"}, "language 'de'"),
    ({"token_timestamps": True}, "token_timestamps"),
    ({"audio_ctx": 768}, "audio_ctx"),
    ({"beam_size": 9}, "too many decoders"),
    ({"best_of": 0}, "at least 1"),
    ({"temperature": 1.5}, "temperature"),
])
def test_options_that_cannot_take_effect_are_refused(whisper_gguf, sp_vocab, kw, message):
    model = Scripted(*sp_vocab, _uncertain(*sp_vocab))
    with pytest.raises(ValueError, match=message):
        transcribe(whisper_gguf, model, np.zeros(16000, np.float32), TranscribeOptions(**kw))
