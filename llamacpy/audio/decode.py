"""One audio window decoded as whisper.cpp's whisper_full_with_state does it: a set of decoders
(greedy, best-of sampling at temperature > 0, or beam search) stepped together in one batch over
a shared cross-attention cache, whisper_process_logits' filters, whisper_sequence_score's
ranking, and the temperature fallback on failure (entropy, average log-probability).

One deviation, on purpose: at temperature 0 the beam candidates are each decoder's top-k tokens
by log-probability (OpenAI whisper and CTranslate2's beam search), where whisper.cpp draws them
from the distribution (whisper_sample_token_topk); at temperature > 0 they are drawn, as there.
Random draws use numpy's PCG64 seeded with the decoder's index (whisper.cpp: mt19937(j)).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

import numpy as np

from ..models.whisper import WhisperModel
from .vocab import SpecialTokens

HISTORY_TEMP_CUTOFF = 0.5  # WHISPER_HISTORY_CONDITIONING_TEMP_CUTOFF: no past text above it
WINDOW = 3000  # mel frames in a 30 s window (100 * WHISPER_CHUNK_SIZE)
DELTA_MIN = 10  # whisper.cpp stops 100 ms before the end


@dataclass
class TokenData:
    """whisper_token_data: the token, its probability, and the likeliest timestamp beside it."""

    id: int
    tid: int  # the most probable timestamp token at this step
    p: float  # probability of `id`
    plog: float  # log-probability of `id`
    pt: float  # probability of `tid` among the timestamps
    ptsum: float  # total probability of the timestamps


@dataclass
class Sequence:
    """whisper_sequence: the tokens and their scores."""

    tokens: list[TokenData] = field(default_factory=list)
    result_len: int = 0  # tokens up to the last timestamp (the result)
    sum_logprobs_all: float = 0.0
    sum_logprobs: float = -math.inf
    avg_logprobs: float = -math.inf
    entropy: float = 0.0
    score: float = -math.inf

    def copy(self) -> Sequence:
        return dataclasses.replace(self, tokens=list(self.tokens))


@dataclass
class Decoder:
    """whisper_decoder: one hypothesis being decoded, with its window position."""

    rng: np.random.Generator
    seq: Sequence = field(default_factory=Sequence)
    seek_delta: int = WINDOW
    has_ts: bool = False
    failed: bool = False
    completed: bool = False
    logprobs: np.ndarray | None = None  # float64 [n_vocab] after the filters
    probs: np.ndarray | None = None  # float64 [n_vocab]

    @property
    def live(self) -> bool:
        return not (self.failed or self.completed)


@dataclass
class WindowResult:
    """The best decoder of one window and what the fallback looked at."""

    tokens: list[TokenData]  # the result: result_len tokens
    seek_delta: int  # mel frames to advance (whisper.cpp's seek_delta)
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    entropy: float
    failed: bool  # every temperature failed (the last one's best result is kept)


class LogitFilter:
    """whisper_process_logits: the fixed suppressions, computed once, then the per-step rules."""

    def __init__(self, sp: SpecialTokens, n_vocab: int, vocab: list[str], opts):
        self.sp, self.opts = sp, opts
        mask = np.zeros(n_vocab, bool)
        # <|notimestamps|>, <|startoftranscript|>, <|nocaptions|>, <|startoflm|>, the task and
        # language tokens and <|startofprev|>: every special token but <|endoftext|> and times
        mask[sp.eot + 1:sp.timestamp_begin] = True
        if opts.no_timestamps:
            mask[sp.timestamp_begin:] = True
        if opts.suppress_nst:
            mask[list(sp.suppress)] = True
        if opts.suppress_regex:
            pattern = re.compile(opts.suppress_regex)
            for i, text in enumerate(vocab[:sp.eot]):
                if pattern.fullmatch(text.replace("\u0120", " ")):
                    mask[i] = True
        self.static = mask
        self.blank = vocab.index("\u0120") if "\u0120" in vocab else None
        self.max_initial = round(opts.max_initial_ts / 0.02) if opts.max_initial_ts > 0 else None

    def __call__(self, logits: np.ndarray, d: Decoder, temperature: float) -> None:
        """Fill d.logprobs and d.probs from one row of raw logits."""
        sp, opts, ts = self.sp, self.opts, self.sp.timestamp_begin
        x = logits.astype(np.float64)
        if temperature > 0:
            x /= temperature
        x[self.static] = -np.inf
        tokens = d.seq.tokens
        if not tokens and opts.suppress_blank:
            x[sp.eot] = -np.inf
            if self.blank is not None:
                x[self.blank] = -np.inf
        if (not opts.no_timestamps and not opts.single_segment and opts.max_tokens > 0
                and len(tokens) >= opts.max_tokens):
            x[:sp.eot] = -np.inf
        last_ts = len(tokens) > 0 and tokens[-1].id >= ts
        penultimate_ts = len(tokens) < 2 or tokens[-2].id >= ts
        if last_ts:  # timestamps come in pairs, except before the end
            if penultimate_ts:
                x[ts:] = -np.inf
            else:
                x[:sp.eot] = -np.inf
        if not tokens and self.max_initial is not None:
            x[ts + self.max_initial + 1:] = -np.inf
        if d.has_ts:  # never go back in time
            x[ts:ts + d.seek_delta // 2] = -np.inf
        logprobs = log_softmax(x)
        ts_mass = np.logaddexp.reduce(logprobs[ts:])
        if ts_mass > logprobs[:ts].max():  # the timestamps together beat every text token
            logprobs[:ts] = -np.inf
        d.logprobs, d.probs = logprobs, np.exp(logprobs)


def log_softmax(x: np.ndarray) -> np.ndarray:
    """float64 log-softmax that leaves -inf entries at -inf."""
    x = np.asarray(x, np.float64)
    top = x[np.isfinite(x)].max()
    return x - (top + np.log(np.exp(x - top).sum()))


def _timestamp_stats(d: Decoder, ts: int) -> tuple[int, float, float]:
    """(tid, pt, ptsum) as whisper_sample_token computes them over the timestamp tokens."""
    probs = d.probs[ts:]
    tid = ts + int(np.argmax(probs)) if probs.max() > 0 else ts
    total = float(probs.sum())
    return tid, float(probs.max()) / (total + 1e-10), total


def _token(d: Decoder, token: int, ts: int) -> TokenData:
    tid, pt, ptsum = _timestamp_stats(d, ts)
    p, plog = float(d.probs[token]), float(d.logprobs[token])
    if token >= ts:
        tid, pt = token, p
    return TokenData(token, tid, p, plog, pt, ptsum)


def _candidates(d: Decoder, k: int, temperature: float) -> list[int]:
    """Beam candidates: the top k at temperature 0, k draws above it (whisper.cpp always draws)."""
    if temperature > 0:
        return [int(t) for t in d.rng.choice(d.probs.size, size=k, p=d.probs / d.probs.sum())]
    top = np.argpartition(-d.logprobs, k)[:k]
    return [int(t) for t in top[np.argsort(-d.logprobs[top], kind="stable")]]


def sequence_score(seq: Sequence, length_penalty: float) -> None:
    """whisper_sequence_score: sum and average log-probability of the result, the score (divided
    by the length, or by ((5 + n) / 6) ** length_penalty), and the entropy of the last 32."""
    n = seq.result_len
    if n == 0:
        return
    total = sum(t.plog for t in seq.tokens[:n])
    seq.sum_logprobs, seq.avg_logprobs = total, total / n
    penalty = ((5.0 + n) / 6.0) ** length_penalty if length_penalty > 0 else float(n)
    seq.score = total / penalty
    counts = np.unique([t.id for t in seq.tokens[max(0, n - 32):n]], return_counts=True)[1]
    p = counts / counts.sum()
    seq.entropy = float(-(p * np.log(p)).sum())


class WindowDecoder:
    """Decodes windows of one transcription (the options are fixed for all of them)."""

    def __init__(self, model: WhisperModel, sp: SpecialTokens, vocab: list[str], opts):
        self.model, self.sp, self.opts = model, sp, opts
        self.filter = LogitFilter(sp, model.args.n_vocab, vocab, opts)
        self.beam = opts.beam_size > 1

    def temperatures(self) -> list[float]:
        """[t0, t0 + inc, ...] below 1.0 + 1e-6, or just t0 without fallback."""
        o = self.opts
        if o.temperature_inc <= 0:
            return [o.temperature]
        out, t = [], o.temperature
        while t < 1.0 + 1e-6:
            out.append(t)
            t += o.temperature_inc
        return out

    def decode(self, features: np.ndarray, prompt_for, seek: int, seek_end: int) -> WindowResult:
        """The window at `seek`: each temperature in turn until one succeeds. `prompt_for(t)` is
        the prompt at temperature t (no past text above HISTORY_TEMP_CUTOFF)."""
        o, temps = self.opts, self.temperatures()
        cache = self.model.new_cache(features, n_seq=max(o.beam_size, o.best_of, 1))
        best: WindowResult | None = None
        for it, t in enumerate(temps):
            best = self._at_temperature(cache, prompt_for(t), t, seek, seek_end)
            if it == len(temps) - 1:
                break
            if not (best.failed or (best.avg_logprob < o.logprob_thold
                                    and best.no_speech_prob < o.no_speech_thold)):
                break
        return best

    def _n_decoders(self, t: float) -> int:
        o = self.opts
        return max(1, o.best_of if t > 0 else (o.beam_size if self.beam else 1))

    def _at_temperature(self, cache, prompt: list[int], t: float, seek: int,
                        seek_end: int) -> WindowResult:
        n = self._n_decoders(t)
        cache.n_past = 0
        logits = self.model.decode(prompt, cache)[-1]
        no_speech = float(np.exp(log_softmax(logits)[self.sp.no_speech]))
        decoders = [Decoder(np.random.default_rng(j)) for j in range(n)]
        for d in decoders:
            self.filter(logits, d, t)
        n_max = self.model.args.n_text_ctx // 2 - 4
        for i in range(n_max):
            self._sample(decoders, cache, t, i)
            for d in decoders:
                if d.live:
                    self._update(d, i, n_max, seek, seek_end)
            live = [j for j, d in enumerate(decoders) if d.live]
            if not live:
                break
            rows = self.model.decode_step([decoders[j].seq.tokens[-1].id for j in live],
                                          cache, live)
            for j, row in zip(live, rows):
                self.filter(row, decoders[j], t)
        return self._rank(decoders, no_speech, t)

    def _sample(self, decoders: list[Decoder], cache, t: float, i: int) -> None:
        """One token for every live decoder: argmax or a draw; beam search picks the best
        continuations over all decoders and moves their caches (whisper_kv_cache_seq_cp)."""
        ts = self.sp.timestamp_begin
        if not self.beam:
            for d in decoders:
                if d.live:
                    token = int(np.argmax(d.probs)) if t < 1e-6 else int(
                        d.rng.choice(d.probs.size, p=d.probs / d.probs.sum()))
                    d.seq.tokens.append(_token(d, token, ts))
                    d.seq.sum_logprobs_all += d.seq.tokens[-1].plog
            return
        found = []  # (sum_logprobs_all, decoder index, token data)
        for j, d in enumerate(decoders):
            if d.live:
                for token in _candidates(d, self.opts.beam_size, t):
                    data = _token(d, token, ts)
                    found.append((d.seq.sum_logprobs_all + data.plog, j, data))
        found.sort(key=lambda c: (-c[0], c[1]))
        picked, seen = [], set()
        for c in found:  # identical sequences count once (OpenAI's dict of sequences)
            key = (tuple(x.id for x in decoders[c[1]].seq.tokens), c[2].id)
            if key not in seen:
                seen.add(key)
                picked.append(c)
        live = [j for j, d in enumerate(decoders) if d.live]
        src, states = [], []
        for k, j in enumerate(live):
            total, origin, data = picked[k % len(picked)]
            o = decoders[origin]
            seq = o.seq.copy()
            seq.tokens.append(data)
            seq.sum_logprobs_all = total
            states.append((seq, o.seek_delta, o.has_ts))
            src.append(origin)
        for j, (seq, delta, has_ts) in zip(live, states):
            decoders[j].seq, decoders[j].seek_delta, decoders[j].has_ts = seq, delta, has_ts
        cache.reorder(live, src)

    def _update(self, d: Decoder, i: int, n_max: int, seek: int, seek_end: int) -> None:
        """Completion and failure of one decoder after its token at step i (whisper.cpp's
        "update the decoder state")."""
        o, sp, seq = self.opts, self.sp, d.seq
        token = seq.tokens[-1]
        if token.id > sp.timestamp_begin:
            delta = 2 * (token.id - sp.timestamp_begin)
            if d.has_ts and d.seek_delta > delta and seq.result_len < i:
                d.failed = True  # went back in time
                return
            d.seek_delta, seq.result_len, d.has_ts = delta, i + 1, True
        at_end = d.has_ts and seek + d.seek_delta + DELTA_MIN >= seek_end
        if token.id == sp.eot or (o.max_tokens > 0 and i >= o.max_tokens) or at_end:
            if seq.result_len == 0 and not o.no_timestamps:
                if seek + d.seek_delta + DELTA_MIN >= seek_end:
                    seq.result_len = i + 1
                else:
                    d.failed = True
                    return
            if o.single_segment or o.no_timestamps:
                seq.result_len, d.seek_delta = i + 1, WINDOW
            d.completed = True
            return
        if i == n_max - 1 and (seq.result_len == 0 or d.seek_delta < WINDOW // 2):
            d.failed = True  # a repetition loop

    def _rank(self, decoders: list[Decoder], no_speech: float, t: float) -> WindowResult:
        """The best-scoring decoder that did not fail (entropy below entropy_thold fails)."""
        best, best_score = 0, -math.inf
        for j, d in enumerate(decoders):
            if d.failed:
                continue
            d.seq.tokens = d.seq.tokens[:d.seq.result_len]
            sequence_score(d.seq, self.opts.length_penalty)
            if d.seq.result_len > 32 and d.seq.entropy < self.opts.entropy_thold:
                d.failed = True
                continue
            if best_score < d.seq.score:
                best, best_score = j, d.seq.score
        d = decoders[best]
        return WindowResult(d.seq.tokens[:d.seq.result_len], d.seek_delta, d.seq.avg_logprobs,
                            no_speech, t, d.seq.entropy, d.failed)
