"""The stateless samplers of llama-sampler.cpp, each `f(cur, ...)` editing the candidates in place."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from llamacpy.sampling.candidates import (
    F32,
    Candidates,
    logf,
    powf,
    seq_sum,
    softmax,
    sort_top,
    top_indices,
)

NEG_INF = F32(-np.inf)


def _first(cond: np.ndarray, default: int) -> int:
    """Index of the first True, or default when there is none."""
    return int(np.argmax(cond)) if cond.any() else default


def greedy(cur: Candidates) -> None:
    """llama_sampler_greedy_apply: the first highest logit."""
    cur.selected = int(np.argmax(cur.logits))


def logit_bias(cur: Candidates, bias: Iterable[tuple[int, float]]) -> None:
    """llama_sampler_logit_bias_apply; in id order every entry adds (duplicates add twice)."""
    pairs = list(bias)
    if not pairs:
        return
    tokens = np.array([t for t, _ in pairs], dtype=np.int64)
    values = np.array([b for _, b in pairs], dtype=F32)
    if not cur.identity:
        # the search path adds only the first entry for a token
        tokens, first = np.unique(tokens, return_index=True)
        values = values[first]
    pos, mask = cur.positions(tokens)
    np.add.at(cur.logits, pos, values[mask])


def top_k(cur: Candidates, k: int) -> None:
    """llama_sampler_top_k_impl: k <= 0 is a no-op; sorts the survivors."""
    if k <= 0:
        return
    k = min(k, len(cur))
    if not cur.sorted:
        sort_top(cur, k)
    cur.take(slice(0, k))


def top_p(cur: Candidates, p: float, min_keep: int = 0) -> None:
    """llama_sampler_top_p_apply: smallest sorted prefix with probability >= p (probs of the
    whole input are kept, not renormalised)."""
    if p >= 1.0:
        return
    softmax(cur, False)
    if not cur.sorted:
        _sort_enough(cur, p, min_keep)
    cum = np.cumsum(cur.probs, dtype=F32)
    cond = (cum >= F32(p)) & (np.arange(1, len(cur) + 1) >= min_keep)
    cur.take(slice(0, _first(cond, len(cur) - 1) + 1))


def _sort_enough(cur: Candidates, p: float, min_keep: int) -> None:
    """Sort heads of 256, then 4096 candidates until one reaches p, else everything (llama.cpp
    tries 256, then sorts everything); keeping only that head leaves the result unchanged."""
    for k in (256, 4096):
        if k >= len(cur):
            break
        head = top_indices(cur.logits, k)
        cum = np.cumsum(cur.probs[head], dtype=F32)
        if ((cum >= F32(p)) & (np.arange(1, k + 1) >= min_keep)).any():
            cur.take(head)
            cur.sorted = True
            return
    sort_top(cur, len(cur))


def min_p(cur: Candidates, p: float, min_keep: int = 0) -> None:
    """llama_sampler_min_p_apply: keep logits >= max + log(p), order-preserving when unsorted."""
    if p <= 0.0 or len(cur) == 0:
        return
    if not cur.sorted:
        max_logit = max(cur.logits.max(), F32(-np.finfo(F32).max))  # C starts from -FLT_MAX
        keep = np.flatnonzero(cur.logits >= F32(max_logit + logf(p)))
        if len(keep) and len(keep) >= min_keep:
            cur.take(keep)
            return
        sort_top(cur, len(cur))
    min_logit = F32(cur.logits[0] + logf(p))
    cond = (cur.logits[1:] < min_logit) & (np.arange(1, len(cur)) >= min_keep)
    cur.take(slice(0, 1 + _first(cond, len(cur) - 1)))


def typical(cur: Candidates, p: float, min_keep: int = 0) -> None:
    """llama_sampler_typical_apply: locally typical tokens, ordered by |surprise - entropy|.

    With zero probabilities the entropy is NaN in llama.cpp too; NaN scores keep sorted order here.
    """
    if p >= 1.0:
        return
    softmax(cur, True)
    with np.errstate(invalid="ignore", divide="ignore"):
        neg_log = -logf(cur.probs)
        entropy = seq_sum(-cur.probs * logf(cur.probs))
        shifted = np.abs(neg_log - entropy)
    order = np.argsort(shifted, kind="stable")
    cum = np.cumsum(cur.probs[order], dtype=F32)
    i = np.arange(len(cur))
    cond = (cum > F32(p)) & ((min_keep == 0) | (i >= min_keep - 1))
    cur.take(order[: _first(cond, len(cur) - 1) + 1])
    cur.sorted = False


def temp(cur: Candidates, t: float) -> None:
    """llama_sampler_temp_impl: divide by t; t <= 0 keeps only the first highest logit."""
    if len(cur) == 0:
        return
    if t <= 0.0:
        best = int(np.argmax(cur.logits))
        keep = cur.logits[best]
        cur.logits[:] = NEG_INF
        cur.logits[best] = keep
        return
    cur.logits /= F32(t)


def temp_ext(cur: Candidates, t: float, delta: float = 0.0, exponent: float = 1.0) -> None:
    """llama_sampler_temp_ext_apply: entropy-scaled temperature in [t - delta, t + delta]."""
    if delta <= 0:
        temp(cur, t)
        return
    if len(cur) <= 1:
        return
    min_temp, max_temp = max(F32(0), F32(t) - F32(delta)), F32(t) + F32(delta)
    max_entropy = -logf(F32(1) / F32(len(cur)))
    softmax(cur, True)
    pos = cur.probs[cur.probs > 0]
    entropy = -seq_sum(pos * logf(pos))
    normalized = F32(entropy / max_entropy)
    temp(cur, F32(min_temp + (max_temp - min_temp) * powf(normalized, exponent)))
    with np.errstate(invalid="ignore"):
        p = np.exp(cur.logits.astype(np.float64) - np.float64(cur.logits[0]))
    cur.probs = (p.astype(F32).astype(np.float64) / np.cumsum(p)[-1]).astype(F32)


def top_n_sigma(cur: Candidates, n: float) -> None:
    """llama_sampler_top_n_sigma_apply: -inf below max - n * std of the finite logits."""
    if n <= 0.0 or len(cur) <= 1:
        return
    finite = cur.logits[cur.logits != NEG_INF]
    count = len(finite)
    mx = max(cur.logits[0], finite.max()) if count else cur.logits[0]
    mean = F32(seq_sum(finite) / F32(count)) if count else F32(0)
    # llama.cpp accumulates pow(x - mean, 2) (a double) into a float; float64 here is within ulps
    acc = F32(np.cumsum((finite - mean).astype(np.float64) ** 2)[-1]) if count else F32(0)
    std = F32(np.sqrt(acc / F32(count))) if count else F32(0)
    cur.logits[cur.logits < F32(mx - F32(n) * std)] = NEG_INF
