"""Token-level timestamps and segment wrapping as whisper.cpp computes them for whisper-cli's
-ml / -sow / -ojf (src/whisper.cpp: whisper_exp_compute_token_level_timestamps, its "experimental"
heuristic, and whisper_wrap_segment), over transcribe()'s segments.

Times are whisper.cpp's 10 ms ticks inside; a token with a likely timestamp (pt > thold_pt,
ptsum > 0.01) pins its start, the rest share the gaps by a guessed voice length, then each
token is stretched or shrunk to where the signal energy crosses half its local mean.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from .formats import cpp_token_bytes
from .vocab import SpecialTokens, token_bytes

SAMPLE_RATE = 16000
THOLD_PTSUM = 0.01  # whisper_full_params.thold_ptsum


def signal_energy(audio: np.ndarray, half_window: int = 32) -> np.ndarray:
    """get_signal_energy: the mean |x| over a centred window of 2 * half_window + 1 samples
    (zeros past the ends count in the divisor), summed in float32 in whisper.cpp's order."""
    a = np.abs(np.asarray(audio, np.float32))
    padded = np.pad(a, half_window)
    total = np.zeros(len(a), np.float32)
    for j in range(2 * half_window + 1):
        total += padded[j:j + len(a)]
    return total / np.float32(2 * half_window + 1)


def voice_length(text: bytes) -> float:
    """whisper.cpp's guess at how long a token takes to say (punctuation and digits are long)."""
    weights = {ord(" "): 0.01, ord(","): 2.0, ord("."): 3.0, ord("!"): 3.0, ord("?"): 3.0}
    return sum(weights.get(b, 3.0 if 48 <= b <= 57 else 1.0) for b in text)


class _Tok:
    """A token's mutable timing state (whisper_token_data t0, t1, vlen)."""

    def __init__(self, token, text: bytes):
        self.token, self.id, self.tid, self.text = token, token.id, token.tid, text
        self.t0, self.t1, self.vlen = -1, -1, 0.0


class TokenTimer:
    """State carried across the segments of one transcription (t_beg, t_last, tid_last)."""

    def __init__(self, audio: np.ndarray, vocab: list[str], sp: SpecialTokens,
                 thold_pt: float = 0.01):
        self.energy = signal_energy(audio)
        self.vocab, self.sp, self.thold_pt = vocab, sp, thold_pt
        self.t_beg = self.t_last = self.tid_last = 0

    def segment(self, seg):
        """The segment with its tokens' t0 / t1 (seconds) filled in."""
        toks = [_Tok(t, cpp_token_bytes(self.vocab, self.sp, t.id)) for t in seg.tokens]
        self._compute(toks, round(seg.start * 100), round(seg.end * 100))
        times = [dataclasses.replace(t.token, t0=t.t0 / 100, t1=t.t1 / 100) for t in toks]
        return dataclasses.replace(seg, tokens=tuple(times))

    def _compute(self, toks: list[_Tok], t0: int, t1: int) -> None:
        n, beg = len(toks), self.sp.timestamp_begin
        if n == 0 or len(self.energy) == 0:
            return
        if n == 1:
            toks[0].t0, toks[0].t1 = t0, t1
            return
        for j, tok in enumerate(toks):
            if j == 0:
                if tok.id == beg:
                    tok.t0 = tok.t1 = toks[1].t0 = t0
                    self.t_beg, self.t_last, self.tid_last = t0, t0, beg
                else:
                    tok.t0 = self.t_last
            tt = self.t_beg + 2 * (tok.tid - beg)
            tok.vlen = voice_length(tok.text)
            if tok.token.pt > self.thold_pt and tok.token.ptsum > THOLD_PTSUM and \
                    tok.tid > self.tid_last and tt <= t1:
                if j > 0:
                    toks[j - 1].t1 = tt
                tok.t0, self.tid_last = tt, tok.tid
        toks[n - 2].t1 = t1
        toks[n - 1].t0 = toks[n - 1].t1 = t1
        self.t_last = t1
        _split_unknown(toks)
        _fix_up(toks)
        self._vad(toks, t0)

    def _vad(self, toks: list[_Tok], seg_t0: int) -> None:
        """Expand or contract each text token to where the energy crosses half its local mean
        (sample indices relative to the segment start, as whisper.cpp takes them)."""
        e, n_samples, hw = self.energy, len(self.energy), SAMPLE_RATE // 8
        to_sample = lambda t: max(0, min(n_samples - 1, (t - seg_t0) * SAMPLE_RATE // 100))
        to_time = lambda k: 100 * k // SAMPLE_RATE + seg_t0
        for j, tok in enumerate(toks):
            if tok.id >= self.sp.eot:
                continue
            s0, s1 = to_sample(tok.t0), to_sample(tok.t1)
            ss0, ss1 = max(s0 - hw, 0), min(s1 + hw, n_samples)
            total = np.cumsum(e[ss0:ss1], dtype=np.float32)[-1]  # float32, in order
            thold = np.float32(0.5 * float(total) / (ss1 - ss0))
            k = s0
            if e[k] > thold and j > 0:
                while k > 0 and e[k] > thold:
                    k -= 1
                tok.t0 = to_time(k)
                if tok.t0 < toks[j - 1].t1:
                    tok.t0 = toks[j - 1].t1
                else:
                    s0 = k
            else:
                while e[k] < thold and k < s1:
                    k += 1
                s0, tok.t0 = k, to_time(k)
            k = s1
            if e[k] > thold:
                while k < n_samples - 1 and e[k] > thold:
                    k += 1
                tok.t1 = to_time(k)
                if j < len(toks) - 1 and tok.t1 > toks[j + 1].t0:
                    tok.t1 = toks[j + 1].t0
            else:
                while e[k] < thold and k > s0:
                    k -= 1
                tok.t1 = to_time(k)


def _split_unknown(toks: list[_Tok]) -> None:
    """Runs of tokens without a pinned end share their interval by voice length."""
    n, p0, p1 = len(toks), 0, 0
    while True:
        while p1 < n and toks[p1].t1 < 0:
            p1 += 1
        if p1 >= n:
            p1 -= 1
        if p1 > p0:
            psum = sum(toks[j].vlen for j in range(p0, p1 + 1))
            dt = toks[p1].t1 - toks[p0].t0
            for j in range(p0 + 1, p1 + 1):
                ct = int(toks[j - 1].t0 + dt * toks[j - 1].vlen / psum)  # double -> int64
                toks[j - 1].t1 = toks[j].t0 = ct
        p1 += 1
        p0 = p1
        if p1 >= n:
            break


def _fix_up(toks: list[_Tok]) -> None:
    for j in range(len(toks) - 1):
        if toks[j].t1 < 0:
            toks[j + 1].t0 = toks[j].t1
        if j > 0 and toks[j - 1].t1 > toks[j].t0:
            toks[j].t0 = toks[j - 1].t1
            toks[j].t1 = max(toks[j].t0, toks[j].t1)


def _utf8_len(b: bytes) -> int:
    return sum(1 for c in b if c & 0xC0 != 0x80)


def wrap_segment(seg, vocab: list[str], sp: SpecialTokens, max_len: int,
                 split_on_word: bool) -> list:
    """whisper_wrap_segment: cut a segment (with token times) where its text would pass
    `max_len` characters, at any token or, with split_on_word, before a token starting with a
    space; each piece starts at its first token's t0."""
    out, cur, acc, text, i = [], seg, 0, b"", 0
    while i < len(cur.tokens):
        tok = cur.tokens[i]
        if tok.id >= sp.eot:
            i += 1
            continue
        txt = token_bytes(vocab, [tok.id])
        if acc + _utf8_len(txt) > max_len and i > 0 and (not split_on_word or txt[:1] == b" "):
            out.append(dataclasses.replace(cur, end=tok.t0, text=_text(text),
                                           tokens=cur.tokens[:i]))
            cur = dataclasses.replace(cur, start=tok.t0, tokens=cur.tokens[i:])
            acc, text, i = 0, b"", 0
            continue
        acc, text, i = acc + _utf8_len(txt), text + txt, i + 1
    return [*out, dataclasses.replace(cur, text=_text(text))]


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


def with_token_times(segments: Sequence, audio: np.ndarray, vocab: list[str],
                     sp: SpecialTokens, thold_pt: float = 0.01, max_len: int = 0,
                     split_on_word: bool = False) -> list:
    """Every segment with token times, wrapped at max_len characters when it is > 0
    (whisper_full_with_state with token_timestamps)."""
    timer, out = TokenTimer(audio, vocab, sp, thold_pt), []
    for seg in segments:
        timed = timer.segment(seg)
        out += wrap_segment(timed, vocab, sp, max_len, split_on_word) if max_len > 0 else [timed]
    return out
