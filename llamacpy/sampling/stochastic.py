"""The samplers that draw from an RNG: dist, XTC, mirostat v1 and v2 (llama-sampler.cpp).

Each owns a std::mt19937-compatible generator seeded like llama.cpp's, so a fixed seed draws the
same numbers as llama.cpp; LLAMA_DEFAULT_SEED picks a random seed at construction and on reset.
"""

from __future__ import annotations

import numpy as np

from llamacpy.sampling.candidates import (
    F32,
    Candidates,
    expf,
    log2f,
    logf,
    powf,
    seq_sum,
    softmax,
)
from llamacpy.sampling.rng import LLAMA_DEFAULT_SEED, MT19937
from llamacpy.sampling.samplers import _first, top_k


class Dist:
    """llama_sampler_dist: softmax and one draw; normalises probs in the same pass."""

    def __init__(self, seed: int = LLAMA_DEFAULT_SEED) -> None:
        self.rng = MT19937(seed)

    def reset(self) -> None:
        self.rng.reset()

    def __call__(self, cur: Candidates) -> None:
        """llama_sampler_dist_apply: probs in float, their sum and the search in double."""
        if len(cur) == 0:
            cur.selected = -1
            return
        cur.selected = 0
        if len(cur) == 1:
            self.rng.uniform_double()  # llama.cpp draws anyway, keeping the stream aligned
            cur.probs = np.ones(1, dtype=F32)
            return
        max_l = cur.logits[0] if cur.sorted else cur.logits.max()
        with np.errstate(invalid="ignore"):
            p = expf(cur.logits - max_l)
        running = np.cumsum(p, dtype=np.float64)
        target = running[-1] * self.rng.uniform_double()
        cur.selected = min(int(np.searchsorted(running, target, side="left")), len(cur) - 1)
        cur.probs = (p.astype(np.float64) / running[-1]).astype(F32)


class Xtc:
    """llama_sampler_xtc: with some probability, drop every top token above the threshold but
    the least likely of them."""

    def __init__(
        self,
        probability: float,
        threshold: float,
        min_keep: int = 0,
        seed: int = LLAMA_DEFAULT_SEED,
    ) -> None:
        self.probability, self.threshold = F32(probability), F32(threshold)
        self.min_keep = min_keep
        self.rng = MT19937(seed)

    def reset(self) -> None:
        self.rng.reset()

    def __call__(self, cur: Candidates) -> None:
        if self.probability <= 0 or self.threshold > F32(0.5) or len(cur) < 2:
            return
        if self.rng.uniform_float() > self.probability:
            return
        softmax(cur, True)
        above = cur.probs >= self.threshold
        pos_last = (int(np.argmin(above)) if not above.all() else len(cur)) - 1
        if pos_last > 0 and len(cur) - pos_last >= self.min_keep:
            cur.take(slice(pos_last, None))


class Mirostat:
    """llama_sampler_mirostat (v1): top-k from the estimated Zipf exponent, then draw; mu tracks
    the target surprise tau."""

    def __init__(
        self,
        n_vocab: int | None,
        seed: int = LLAMA_DEFAULT_SEED,
        tau: float = 5.0,
        eta: float = 0.1,
        m: int = 100,
    ) -> None:
        self.n_vocab, self.tau, self.eta, self.m = n_vocab, F32(tau), F32(eta), m
        self.rng = MT19937(seed)
        self.mu = F32(2) * self.tau

    def reset(self) -> None:
        self.mu = F32(2) * self.tau
        self.rng.reset()

    def __call__(self, cur: Candidates) -> None:
        if self.n_vocab is None:  # not given: the candidates are the whole vocabulary
            self.n_vocab = len(cur)
        softmax(cur, True)
        top_k(cur, _k_from_float(self._k(cur.probs)))
        softmax(cur, True)
        cur.selected = self.rng.discrete(cur.probs)
        self.mu = _update_mu(self.mu, self.eta, self.tau, cur.probs[cur.selected])

    def _k(self, p: np.ndarray) -> np.float32:
        """s_hat from the top m probabilities, then k for the current mu (all in float)."""
        n = min(self.m - 1, len(p) - 1)
        i = np.arange(n, dtype=F32)
        t = logf((i + F32(2)) / (i + F32(1)))
        with np.errstate(all="ignore"):
            b = logf(p[:n] / p[1 : n + 1])
            s_hat = seq_sum(t * b) / seq_sum(t * t)  # 0/0 for a single candidate, as in C
            eps = s_hat - F32(1)
            num = eps * powf(2, self.mu)
            return powf(num / (F32(1) - powf(F32(self.n_vocab), -eps)), F32(1) / s_hat)


class MirostatV2:
    """llama_sampler_mirostat_v2: drop tokens whose surprise exceeds mu, then draw."""

    def __init__(self, seed: int = LLAMA_DEFAULT_SEED, tau: float = 5.0, eta: float = 0.1) -> None:
        self.tau, self.eta = F32(tau), F32(eta)
        self.rng = MT19937(seed)
        self.mu = F32(2) * self.tau

    def reset(self) -> None:
        self.mu = F32(2) * self.tau
        self.rng.reset()

    def __call__(self, cur: Candidates) -> None:
        softmax(cur, True)
        too_surprising = -log2f(cur.probs) > self.mu
        cur.take(slice(0, max(_first(too_surprising, len(cur)), 1)))
        softmax(cur, True)
        cur.selected = self.rng.discrete(cur.probs)
        self.mu = _update_mu(self.mu, self.eta, self.tau, cur.probs[cur.selected])


def _update_mu(mu: np.float32, eta: np.float32, tau: np.float32, p: np.float32) -> np.float32:
    """mu -= eta * (observed surprise - tau), in float."""
    return F32(mu - eta * (-log2f(p) - tau))


def _k_from_float(k: np.float32) -> int:
    """std::max(int(k), 1) as x86 computes it: NaN and out-of-range floats become INT_MIN."""
    if not np.isfinite(k) or not (-(2.0**31) <= float(k) < 2.0**31):
        return 1
    return max(int(k), 1)
