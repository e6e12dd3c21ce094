"""Distances between next-token distributions (KLD as llama-perplexity --kl-divergence uses it:
KL(reference || candidate), natural log)."""

from __future__ import annotations

import numpy as np


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def full_kld(logp_ref: np.ndarray, logp: np.ndarray) -> np.ndarray:
    """KL(ref || candidate) per position over the whole vocabulary."""
    return (np.exp(logp_ref) * (logp_ref - logp)).sum(-1)


def top_k(logp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k most likely ids per position (int32) and their log-probs (float32), best first."""
    ids = np.argsort(-logp, axis=-1)[:, :k]
    return ids.astype(np.int32), np.take_along_axis(logp, ids, -1).astype(np.float32)


def partition_kld(ref_ids: np.ndarray, ref_logp: np.ndarray, logp: np.ndarray) -> np.ndarray:
    """KL over the partition {each of the reference's top-k tokens, everything else}.

    A lower bound of the full KLD that is tight when the top-k hold nearly all the mass; it lets a
    test compare against a stored reference without storing whole vocabularies.
    """
    p = np.exp(ref_logp.astype(np.float64))
    q = np.exp(np.take_along_axis(logp, ref_ids, -1))
    p_rest = np.clip(1 - p.sum(-1), 1e-12, None)
    q_rest = np.clip(1 - q.sum(-1), 1e-12, None)
    return (p * (np.log(p) - np.log(q))).sum(-1) + p_rest * (np.log(p_rest) - np.log(q_rest))
