"""Sampler cases shared by the llama.cpp comparison, the golden generator and the golden test.

A case is one sampler (by llama.cpp name and arguments) run over one or more steps of candidate
arrays, after accepting a token history. `run_ours` runs llamacpy; tests/sampling/reference.py
runs llama.cpp on the same case; `check` compares the two results.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from llamacpy.sampling import samplers as S
from llamacpy.sampling.candidates import Candidates
from llamacpy.sampling.penalties import Dry, Penalties
from llamacpy.sampling.stochastic import Dist, Mirostat, MirostatV2, Xtc

INF = float("inf")

# (sampler, arguments in llama_sampler_init_* order, steps); `n_vocab` is filled in per case
SPECS: list[tuple[str, dict, int]] = [
    ("greedy", {}, 1),
    ("top_k", {"k": 0}, 1),
    ("top_k", {"k": -3}, 1),
    ("top_k", {"k": 1}, 1),
    ("top_k", {"k": 40}, 1),
    ("top_k", {"k": 300}, 1),
    ("top_k", {"k": 1 << 30}, 1),
    ("top_p", {"p": 0.95, "min_keep": 0}, 1),
    ("top_p", {"p": 0.5, "min_keep": 0}, 1),
    ("top_p", {"p": 0.3, "min_keep": 20}, 1),
    ("top_p", {"p": 0.0, "min_keep": 0}, 1),
    ("top_p", {"p": 1.0, "min_keep": 0}, 1),
    ("top_p", {"p": 0.999999, "min_keep": 1}, 1),
    ("min_p", {"p": 0.05, "min_keep": 0}, 1),
    ("min_p", {"p": 0.3, "min_keep": 0}, 1),
    ("min_p", {"p": 0.5, "min_keep": 25}, 1),
    ("min_p", {"p": 0.0, "min_keep": 0}, 1),
    ("min_p", {"p": 1.0, "min_keep": 0}, 1),
    ("typical", {"p": 0.9, "min_keep": 0}, 1),
    ("typical", {"p": 0.5, "min_keep": 3}, 1),
    ("typical", {"p": 0.2, "min_keep": 0}, 1),
    ("typical", {"p": 1.0, "min_keep": 0}, 1),
    ("temp", {"t": 0.8}, 1),
    ("temp", {"t": 1.0}, 1),
    ("temp", {"t": 2.5}, 1),
    ("temp", {"t": 0.0}, 1),
    ("temp", {"t": -1.0}, 1),
    ("temp_ext", {"t": 0.8, "delta": 0.5, "exponent": 1.0}, 1),
    ("temp_ext", {"t": 1.0, "delta": 1.0, "exponent": 2.0}, 1),
    ("temp_ext", {"t": 0.3, "delta": 0.5, "exponent": 0.5}, 1),
    ("temp_ext", {"t": 0.7, "delta": 0.0, "exponent": 1.0}, 1),
    ("top_n_sigma", {"n": 1.0}, 1),
    ("top_n_sigma", {"n": 2.5}, 1),
    ("top_n_sigma", {"n": 0.0}, 1),
    ("top_n_sigma", {"n": -1.0}, 1),
    ("penalties", {"last_n": 64, "repeat": 1.3, "freq": 0.2, "present": 0.5}, 1),
    ("penalties", {"last_n": 8, "repeat": 0.8, "freq": 0.0, "present": 0.0}, 1),
    ("penalties", {"last_n": 0, "repeat": 1.5, "freq": 0.1, "present": 0.1}, 1),
    ("penalties", {"last_n": 64, "repeat": 1.0, "freq": -0.5, "present": 1.0}, 1),
    ("logit_bias", {"bias": [(3, 5.0), (10, -INF), (3, 1.5), (17, -2.0), (10**7, 1.0)]}, 1),
    ("dist", {"seed": 1234}, 6),
    ("dist", {"seed": 0}, 3),
    ("xtc", {"probability": 1.0, "threshold": 0.1, "min_keep": 0, "seed": 7}, 2),
    ("xtc", {"probability": 0.5, "threshold": 0.02, "min_keep": 2, "seed": 99}, 8),
    ("xtc", {"probability": 1.0, "threshold": 0.6, "min_keep": 0, "seed": 7}, 1),
    ("mirostat", {"seed": 42, "tau": 5.0, "eta": 0.1, "m": 100}, 8),
    ("mirostat", {"seed": 3, "tau": 2.0, "eta": 0.5, "m": 10}, 8),
    ("mirostat_v2", {"seed": 42, "tau": 5.0, "eta": 0.1}, 8),
    ("mirostat_v2", {"seed": 5, "tau": 1.5, "eta": 0.3}, 8),
]
# typical sorts by |surprise - entropy|; with zero probabilities that is NaN in llama.cpp, where
# std::sort's order is then unspecified, so typical cases get no -inf logits
NO_NEG_INF = {"typical"}


@dataclass
class Case:
    sampler: str
    kwargs: dict
    n_vocab: int
    variant: str  # "ids" (token order), "sorted" (descending, sorted flag), "shuffled"
    history: list[int] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)  # per step (n,) int32
    logits: list[np.ndarray] = field(default_factory=list)  # per step (n,) float32

    @property
    def is_sorted(self) -> bool:
        return self.variant == "sorted"

    def meta(self) -> dict:
        kwargs = {k: (list(map(list, v)) if k == "bias" else v) for k, v in self.kwargs.items()}
        return {
            "sampler": self.sampler,
            "kwargs": kwargs,
            "n_vocab": self.n_vocab,
            "variant": self.variant,
            "history": self.history,
        }


def random_logits(n: int, rng: np.random.Generator, neg_inf: bool = True) -> np.ndarray:
    """Normal logits with ~30% rounded to halves (many ties) and ~5% -inf."""
    x = rng.normal(0.0, 3.0, n).astype(np.float32)
    tie = rng.random(n) < 0.3
    x[tie] = np.round(x[tie] * 2) / 2
    if neg_inf:
        x[1:][rng.random(n - 1) < 0.05] = -np.inf  # x[0] stays finite
    return x


def make_case(sampler: str, kwargs: dict, steps: int, n: int, variant: str, seed: int) -> Case:
    rng = np.random.default_rng([seed, n, len(sampler), steps])
    history = rng.integers(0, min(n, 12), 40).tolist() if sampler == "penalties" else []
    case = Case(sampler, dict(kwargs), n, variant, history)
    for _ in range(steps):
        logits = random_logits(n, rng, neg_inf=sampler not in NO_NEG_INF)
        ids = np.arange(n, dtype=np.int32)
        if variant == "sorted":
            ids = np.lexsort((ids, -logits)).astype(np.int32)
        elif variant == "shuffled":
            ids = rng.permutation(n).astype(np.int32)
        case.ids.append(ids)
        case.logits.append(logits[ids])
    return case


def all_cases(
    sizes=(32, 1000, 50000), variants=("ids", "sorted", "shuffled"), seeds=(0, 1)
) -> list[Case]:
    return [
        make_case(name, kw, steps, n, variant, seed)
        for name, kw, steps in SPECS
        for n in sizes
        for variant in variants
        for seed in seeds
    ]


def build_ours(case: Case):
    """The llamacpy sampler for a case: a callable on Candidates, maybe with accept()."""
    kw, n = case.kwargs, case.n_vocab
    stateful = {
        "penalties": lambda: Penalties(**kw),
        "dist": lambda: Dist(**kw),
        "xtc": lambda: Xtc(**kw),
        "mirostat": lambda: Mirostat(n, **kw),
        "mirostat_v2": lambda: MirostatV2(**kw),
    }
    if case.sampler in stateful:
        return stateful[case.sampler]()
    fn = getattr(S, case.sampler)
    return lambda cur: fn(cur, **kw)


def run_ours(case: Case, sampler=None) -> list[dict]:
    sampler = sampler or build_ours(case)
    for token in case.history:
        sampler.accept(token)
    out = []
    for ids, logits in zip(case.ids, case.logits):
        cur = Candidates(
            ids.copy(), logits.copy(), sorted=case.is_sorted, identity=case.variant == "ids"
        )
        sampler(cur)
        probs = cur.probs if cur.probs is not None else np.zeros(len(cur), np.float32)
        out.append(
            {
                "ids": cur.ids,
                "logits": cur.logits,
                "probs": probs,
                "selected": cur.selected,
                "sorted": cur.sorted,
            }
        )
    return out


# --- comparison ---------------------------------------------------------------------------------

# Bounds in float32 ulps, (logits, probs). Most samplers reproduce llama.cpp's float arithmetic
# with our own fixed code (expf, sequential sums), so they must be bit-identical on every CPU
# (where numpy's logf or powf only places a cut, in typical, min-p and mirostat, a cut placed
# elsewhere fails the size check).
EXACT = (0, 0)
# temp_ext with dynatemp (delta > 0) is the exception: its temperature goes through powf (the
# entropy through logf) and its probabilities through a float64 exp, and numpy dispatches those
# per CPU: glibc's libm on AVX2 (as llama.cpp uses, so the goldens, made on AVX2, match bit for
# bit there), its own SIMD code on AVX-512, at most 1 ulp from glibc (measured). One ulp in the
# temperature moves each logit l / t by at most 2 ulps. exp turns those absolute errors (about
# |l| 2^-23) into relative errors of the probabilities, tens of ulps for the logits up to ~16
# here: 64 ulps for the probs (relative 4e-6 to 8e-6, like check's rtol). Seen on AVX-512
# against glibc: at most 2 and 15 ulps over 1008 chain steps (vocabularies of 2000 and 32000).
DYNATEMP_ULPS = (2, 64)


def sampler_ulps(sampler: str, kwargs: dict) -> tuple[int, int]:
    """The (logits, probs) ulp bounds for one sampler case against llama.cpp's output."""
    return DYNATEMP_ULPS if sampler == "temp_ext" and kwargs.get("delta", 0) > 0 else EXACT


def chain_ulps(params: dict) -> tuple[int, int]:
    """The (logits, probs) ulp bounds for a CHAIN_PARAMS chain against llama.cpp's output."""
    return DYNATEMP_ULPS if params.get("dynatemp_range", 0) > 0 else EXACT


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per element, how many float32 steps lie from a to b: 0 where they are equal (equal
    infinities, or both NaN), and -0.0 and +0.0 are equal."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    assert a.shape == b.shape, f"shape {a.shape} != {b.shape}"

    def ordered(x: np.ndarray) -> np.ndarray:  # float32 bits as integers in the floats' order
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    dist = np.abs(ordered(a) - ordered(b))
    dist[(a == b) | (np.isnan(a) & np.isnan(b))] = 0
    return dist


def assert_max_ulps(actual: np.ndarray, expected: np.ndarray, max_ulps: int, what: str) -> None:
    """Assert every element of actual is within max_ulps float32 ulps of expected."""
    dist = ulp_distance(actual, expected)
    if dist.size and dist.max() > max_ulps:
        i = int(np.argmax(dist))
        raise AssertionError(
            f"{what}: {int((dist > max_ulps).sum())} of {dist.size} values more than {max_ulps} "
            f"ulps away; worst at {i}: {actual[i]!r} vs {expected[i]!r} ({int(dist[i])} ulps)"
        )


def check(
    ours: dict,
    ref: dict,
    in_ids: np.ndarray,
    in_logits: np.ndarray,
    rtol: float = 4e-6,
    ulps: tuple[int, int] | None = None,
) -> bool:
    """Assert ours matches llama.cpp's result to float32 rounding, and, given `ulps` (bounds
    for logits and probs, EXACT for bit-identical), within those ulps; True when every logit
    and probability is bit-identical.

    Ids may differ only between tokens whose input logits were equal: llama.cpp's sorts leave
    the order of ties, and which tie survives a cut, unspecified.
    """
    assert len(ours["ids"]) == len(ref["ids"]), f"size {len(ours['ids'])} != {len(ref['ids'])}"
    assert ours["sorted"] == ref["sorted"], "sorted flag"
    assert ours["selected"] == ref["selected"], f"selected {ours['selected']} != {ref['selected']}"
    np.testing.assert_allclose(ours["logits"], ref["logits"], rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(ours["probs"], ref["probs"], rtol=rtol, atol=1e-7)
    if ulps is not None:
        assert_max_ulps(ours["logits"], ref["logits"], ulps[0], "logits")
        assert_max_ulps(ours["probs"], ref["probs"], ulps[1], "probs")
    differ = np.flatnonzero(ours["ids"] != ref["ids"])
    if len(differ):
        by_id = dict(zip(in_ids.tolist(), in_logits.tolist()))
        tied = [by_id[a] == by_id[b] for a, b in zip(ours["ids"][differ], ref["ids"][differ])]
        assert all(tied), f"different tokens at {differ[~np.array(tied)][:5]}"
    return np.array_equal(ours["logits"], ref["logits"]) and np.array_equal(
        ours["probs"], ref["probs"]
    )


# --- whole chains (common_sampler) -------------------------------------------------------------

CHAIN_PARAMS: dict[str, dict] = {
    "defaults": {"seed": 42},
    "penalties_no_top_k": {
        "seed": 1,
        "top_k": 0,
        "repeat_penalty": 1.1,
        "frequency_penalty": 0.1,
        "presence_penalty": 0.2,
        "repeat_last_n": 16,
        "min_keep": 3,
    },
    "typical_xtc": {
        "seed": 2,
        "typical_p": 0.9,
        "xtc_probability": 0.5,
        "xtc_threshold": 0.05,
        "temperature": 1.2,
        "top_k": 100,
    },
    "sigma_dynatemp": {
        "seed": 3,
        "top_n_sigma": 1.5,
        "dynatemp_range": 0.5,
        "dynatemp_exponent": 1.5,
    },
    "custom_order": {"seed": 7, "samplers": ["min_p", "temperature", "top_k"], "min_p": 0.1},
    "top_p_full_vocab": {"seed": 9, "samplers": ["top_p", "temperature"], "top_p": 0.8},
    "logit_bias": {"seed": 8, "logit_bias": {0: 4.0, 1: -INF, 2: 2.5, 5: -INF}},
    "greedy": {"seed": 4, "temperature": 0.0},
    "greedy_penalties": {
        "seed": 4,
        "temperature": 0.0,
        "repeat_penalty": 1.5,
        "repeat_last_n": 8,
        "logit_bias": {3: 30.0},
    },
    "mirostat1": {"seed": 5, "mirostat": 1, "temperature": 0.9},
    "mirostat2": {"seed": 6, "mirostat": 2, "mirostat_tau": 3.0, "mirostat_eta": 0.2},
}


def chain_inputs(n_vocab: int, steps: int, seed: int) -> tuple[list[int], list[np.ndarray]]:
    """A token history (with repeats, for the penalties) and one row of logits per step."""
    rng = np.random.default_rng([seed, n_vocab, steps])
    history = rng.integers(0, 64, 24).tolist()
    return history, [random_logits(n_vocab, rng) for _ in range(steps)]


def candidates_dict(cur: Candidates) -> dict:
    probs = cur.probs if cur.probs is not None else np.zeros(len(cur), np.float32)
    return {
        "ids": cur.ids,
        "logits": cur.logits,
        "probs": probs,
        "selected": cur.selected,
        "sorted": cur.sorted,
    }


def reported_probs(ids: np.ndarray, probs: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The server's post-sampling n_probs from llama.cpp's final candidates: by probability,
    at most n, stopping at the first zero (populate_token_probs)."""
    order = np.argsort(-probs, kind="stable")[:n]
    order = order[: int(np.argmax(probs[order] == 0)) if (probs[order] == 0).any() else n]
    return ids[order], probs[order]


def check_chain_step(
    sampler, token: int, ref: dict, logits: np.ndarray, ulps: tuple[int, int] | None = None
) -> bool:
    """Our Sampler's step against llama.cpp's chain output (within `ulps`, as in check); True
    when values are bit-identical.

    The fast greedy path keeps only the chosen token, so there the reported probs are compared.
    """
    ref_token = int(ref["ids"][ref["selected"]])
    assert token == ref_token or logits[token] == logits[ref_token], (token, ref_token)
    exact = True
    if sampler._greedy_steps is None:
        exact = check(
            candidates_dict(sampler.cur), ref, np.arange(len(logits)), logits, ulps=ulps
        )
    ref_ids, ref_p = reported_probs(ref["ids"], ref["probs"], 8)
    ours = sampler.probs(8)
    np.testing.assert_allclose([t.p for t in ours], ref_p, rtol=4e-6)
    for t, rid in zip(ours, ref_ids):
        assert t.id == rid or logits[t.id] == logits[rid]
    return exact


# --- DRY ----------------------------------------------------------------------------------------

DRY_PARAMS = [  # multiplier, base, allowed_length, penalty_last_n
    (0.8, 1.75, 2, 64),
    (1.0, 2.0, 1, 16),
    (0.5, 1.1, 3, 256),
    (0.8, 1.75, 2, 0),
    (2.0, 1.000001, 0, 40),
    (0.8, 30.0, 1, 64),
]
DRY_BREAKERS = [["\n", ":", '"', "*"], ["\n", ":", '"', "*", " Note:", "Chapter", "ab:cd"], []]
DRY_TEXT = (
    b"The cat sat on the mat. The cat sat on the mat: the cat sat\n* The cat sat on "
    b'the "mat". Note: the cat sat on the mat. Chapter 1: the cat sat on the mat.\n'
    b"ab:cd the cat sat on the mat ab:cd the cat sat on the"
)


def dry_histories(tokenize, pieces: list[bytes], seed: int) -> list[list[int]]:
    """Repetitive text, and random runs over a few tokens that include sequence breakers."""
    rng = np.random.default_rng(seed)
    text = tokenize(DRY_TEXT)
    breakerish = [t for t, w in enumerate(pieces) if w in (b":", b"\n", b"*", b'"', b" Note")]
    alphabet = text[:5] + breakerish[:3]
    runs = [alphabet[i] for i in rng.integers(0, len(alphabet), 200)]
    repeated = (text[:7] * 6)[:40] + text[10:14] + text[:5]
    return [text, runs, repeated, text[:3], text * 3]


def dry_candidates(history: list[int], n_vocab: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Candidates holding every history token plus random others, in random order."""
    rng = np.random.default_rng(seed)
    ids = np.unique(np.concatenate([history, rng.integers(0, n_vocab, 200)])).astype(np.int32)
    ids = rng.permutation(ids).astype(np.int32)
    return ids, random_logits(len(ids), rng)


def run_dry_ours(params, breakers: dict, history: list[int], ids, logits) -> dict:
    dry = Dry(*params, breakers=breakers)
    for token in history:
        dry.accept(token)
    cur = Candidates(ids.copy(), logits.copy())
    dry(cur)
    return candidates_dict(cur)
