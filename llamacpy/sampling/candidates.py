"""Candidates: llama_token_data_array on numpy arrays, plus the sort and softmax every sampler uses.

Float32 arithmetic follows llama.cpp's: sums are sequential (np.cumsum), expf is glibc's own
algorithm (bit-identical), other transcendental functions are float64 rounded to float32, which
matches glibc's logf in all but ~1% of inputs (by one ulp).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from decimal import Decimal, localcontext

import numpy as np

F32 = np.float32


def _exp2_table() -> np.ndarray:
    """glibc's __exp2f_data.tab: bits of 2^(i/32) less i << 47, so adding k << 47 scales by 2^k."""
    with localcontext() as ctx:
        ctx.prec = 40
        values = [float(Decimal(2) ** (Decimal(i) / 32)) for i in range(32)]
    bits = np.array(values, dtype=np.float64).view(np.uint64)
    return bits - (np.arange(32, dtype=np.uint64) << np.uint64(47))


_EXP2_TAB = _exp2_table()
_INVLN2_32 = float.fromhex("0x1.71547652b82fep0") * 32
_SHIFT = float.fromhex("0x1.8p52")
_C0, _C1, _C2 = (
    float.fromhex("0x1.c6af84b912394p-5") / 32**3,
    float.fromhex("0x1.ebfce50fac4f3p-3") / 32**2,
    float.fromhex("0x1.62e42ff0c52d6p-1") / 32,
)
_UNDERFLOW, _OVERFLOW = float.fromhex("-0x1.9fe368p6"), float.fromhex("0x1.62e42ep6")
_EXP_BLOCK = 1 << 15


def expf(x: np.ndarray) -> np.ndarray:
    """glibc's expf (from Arm's optimized-routines) element-wise: bit-identical to libm.

    Blocks of 32k keep the float64 temporaries small (large fresh arrays cost page faults).
    """
    x = np.asarray(x, dtype=F32)
    if x.size <= _EXP_BLOCK:
        return _expf_block(x)
    out = np.empty(x.shape, dtype=F32)
    for i in range(0, x.size, _EXP_BLOCK):
        out[i : i + _EXP_BLOCK] = _expf_block(x[i : i + _EXP_BLOCK])
    return out


def _expf_block(x: np.ndarray) -> np.ndarray:
    """exp(x) = 2^(k/32) * 2^(r/32): a table for the first factor, a cubic for the second."""
    z = x.astype(np.float64) * _INVLN2_32
    with np.errstate(invalid="ignore", over="ignore"):
        kd = z + _SHIFT  # rounds z to an integer held in the low mantissa bits
        ki = kd.view(np.uint64)
        scale = _EXP2_TAB[(ki & np.uint64(31)).astype(np.intp)]  # intp: uint64 gathers are slow
        scale += ki << np.uint64(47)
        kd -= _SHIFT
        z -= kd  # r, in [-1/2, 1/2]
        y = (_C0 * z + _C1) * (z * z) + (_C2 * z + 1.0)
        y *= scale.view(np.float64)
        y[x < _UNDERFLOW] = 0.0  # also -inf
        y[x > _OVERFLOW] = np.inf
    return y.astype(F32)


def logf(x) -> np.ndarray:
    """logf element-wise (or on a scalar), float32 out."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log(np.asarray(x, dtype=np.float64)).astype(F32)


def log2f(x) -> np.ndarray:
    """log2f: numpy's float32 log2 is libm's log2f here."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.log2(np.asarray(x, dtype=F32))


def powf(x, y) -> np.float32:
    """powf: numpy's float32 power is libm's powf here."""
    with np.errstate(all="ignore"):
        return np.power(F32(x), F32(y))


def seq_sum(x: np.ndarray) -> np.float32:
    """A float32 accumulator added left to right, as the C loops do (np.sum is pairwise)."""
    return np.cumsum(x, dtype=F32)[-1] if x.size else F32(0)


@functools.cache
def _token_ids(n: int) -> np.ndarray:
    """arange(n) shared read-only between steps: samplers never write ids in place."""
    ids = np.arange(n, dtype=np.int32)
    ids.flags.writeable = False
    return ids


@dataclass
class Candidates:
    """llama_token_data_array: parallel arrays in candidate order (not token order).

    `identity` says ids == arange(n) (fresh from the logits), so token ids index positions.
    """

    ids: np.ndarray  # (n,) int32 token ids
    logits: np.ndarray  # (n,) float32
    probs: np.ndarray | None = None  # (n,) float32, set by softmax / dist; None = never computed
    sorted: bool = False  # descending by logit
    selected: int = -1  # index into the arrays, not a token id
    identity: bool = False

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> Candidates:
        """All tokens in id order, logits copied (the samplers write into them)."""
        logits = np.array(logits, dtype=F32, copy=True).reshape(-1)
        return cls(_token_ids(len(logits)), logits, identity=True)

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, idx: np.ndarray | slice) -> None:
        """Keep the candidates at idx (an index array or slice), in that order."""
        self.ids, self.logits = self.ids[idx], self.logits[idx]
        if self.probs is not None:
            self.probs = self.probs[idx]
        self.identity = self.identity and isinstance(idx, slice) and idx.start in (None, 0)

    def positions(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions, mask into tokens) of the given token ids that are candidates."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.identity:
            mask = (tokens >= 0) & (tokens < len(self.ids))
            return tokens[mask], mask
        order = np.argsort(self.ids, kind="stable")
        found = np.searchsorted(self.ids, tokens, sorter=order)
        found = np.minimum(found, len(order) - 1)
        pos = order[found] if len(order) else found
        mask = (self.ids[pos] == tokens) if len(order) else np.zeros(len(tokens), bool)
        return pos[mask], mask


def top_indices(x: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, descending; equal values in index order, and at the cut
    the lowest indices win (llama.cpp's partial sorts leave both unspecified)."""
    n = len(x)
    if k <= 0:
        return np.zeros(0, dtype=np.intp)
    if 4 * k > n:  # most of it: a full sort is cheaper than selecting first
        return descending(x, np.arange(n))[:k]
    cand = _above_guess(x, k)
    sub = x[cand]
    kth = np.partition(sub, len(sub) - k)[len(sub) - k]
    above = cand[sub > kth]
    return descending(x, np.concatenate([above, cand[sub == kth][: k - len(above)]]))


def descending(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """idx ordered by x[idx] descending, ties by index: one in-place sort of uint64
    (key << 32 | index) values, ~10x faster than a stable argsort."""
    bits = (x[idx] + F32(0)).view(np.uint32)  # + 0 turns -0.0 into +0.0, its equal
    # float bits -> unsigned keys in descending float order
    down = np.where(bits >> np.uint32(31) == 1, bits, ~(bits | np.uint32(0x80000000)))
    keys = down.astype(np.uint64)
    keys <<= np.uint64(32)
    keys |= idx.astype(np.uint64, copy=False)
    keys.sort()
    keys &= np.uint64(0xFFFFFFFF)
    return keys.view(np.int64)


def _above_guess(x: np.ndarray, k: int) -> np.ndarray:
    """Ascending indices holding all of the k largest values: those above a threshold guessed
    from a strided sample (like llama.cpp's bucket pre-pass), or all of them if it falls short."""
    step = 64
    if len(x) < 64 * step or k * 2 > len(x) // step:
        return np.arange(len(x))
    sample = x[::step]
    j = min(len(sample), (3 * k) // (2 * step) + 8)  # expect ~1.5k + 512 survivors
    threshold = np.partition(sample, len(sample) - j)[len(sample) - j]
    if threshold == -np.inf:  # mostly masked (a grammar): the finite ones, then the first -inf
        finite = np.flatnonzero(x > -np.inf)
        if len(finite) >= k:
            return finite
        banned = np.flatnonzero(x == -np.inf)[: k - len(finite)]
        return np.sort(np.concatenate([finite, banned]))
    cand = np.flatnonzero(x >= threshold)
    return cand if len(cand) >= k else np.arange(len(x))


def sort_top(cur: Candidates, k: int) -> None:
    """llama_token_data_array_partial_sort_inplace: keep the k highest logits, sorted descending."""
    cur.take(top_indices(cur.logits, min(k, len(cur))))
    cur.sorted = True


def softmax(cur: Candidates, do_sort: bool) -> None:
    """llama_sampler_softmax_impl: probs over the candidates, optionally sorting them first."""
    assert len(cur) > 0, "softmax of no candidates"
    if do_sort and not cur.sorted:
        sort_top(cur, len(cur))
    max_l = cur.logits[0] if cur.sorted else cur.logits.max()
    with np.errstate(invalid="ignore"):
        p = expf(cur.logits - max_l)
    cur.probs = p / seq_sum(p)
