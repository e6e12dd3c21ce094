"""llamacpy's samplers against llama.cpp's outputs stored in tests/golden/sampling_golden.npz
(made by tests/sampling/make_sampling_golden.py), so CI checks them without llama.cpp.

Bit-identical on every CPU, except where our result goes through math that numpy dispatches per
CPU (dynatemp): there within the ulps that cases.DYNATEMP_ULPS states."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from llamacpy.sampling import Sampler, SamplingParams
from tests.sampling import cases as C

GOLDEN = Path(__file__).parent.parent / "golden" / "sampling_golden.npz"


class Golden:
    def __init__(self, path: Path) -> None:
        data = np.load(path)
        self.meta = json.loads(str(data["meta"]))
        self.i32, self.f32 = data["i32"], data["f32"]

    def ints(self, ref: list) -> np.ndarray:
        return self.i32[ref[0] : ref[0] + ref[1]]

    def floats(self, ref: list) -> np.ndarray:
        return self.f32[ref[0] : ref[0] + ref[1]]

    def out(self, entry: dict) -> dict:
        return {
            "ids": self.ints(entry["ids"]),
            "logits": self.floats(entry["logits"]),
            "probs": self.floats(entry["probs"]),
            "selected": entry["selected"],
            "sorted": entry["sorted"],
        }


@pytest.fixture(scope="module")
def golden() -> Golden:
    return Golden(GOLDEN)


def _case(golden: Golden, entry: dict) -> C.Case:
    kwargs = dict(entry["kwargs"])
    if "bias" in kwargs:
        kwargs["bias"] = [tuple(b) for b in kwargs["bias"]]
    case = C.Case(entry["sampler"], kwargs, entry["n_vocab"], entry["variant"], entry["history"])
    case.ids = [golden.ints(s["in_ids"]) for s in entry["steps"]]
    case.logits = [golden.floats(s["in_logits"]) for s in entry["steps"]]
    return case


@pytest.mark.parametrize("sampler", sorted({s[0] for s in C.SPECS}))
def test_samplers(golden, sampler):
    entries = [e for e in golden.meta["samplers"] if e["sampler"] == sampler]
    assert entries
    for entry in entries:
        case = _case(golden, entry)
        for step, ours in enumerate(C.run_ours(case)):
            ref = golden.out(entry["steps"][step]["out"])
            ulps = C.sampler_ulps(case.sampler, case.kwargs)
            C.check(ours, ref, case.ids[step], case.logits[step], ulps=ulps)


@pytest.mark.parametrize("name", list(C.CHAIN_PARAMS))
def test_chains(golden, name):
    entry = next(e for e in golden.meta["chains"] if e["name"] == name)
    sampler = Sampler(SamplingParams(**C.CHAIN_PARAMS[name]), n_vocab=golden.meta["chain_vocab"])
    for token in entry["history"]:
        sampler.accept(token)
    for step in entry["steps"]:
        logits, ref = golden.floats(step["in_logits"]), golden.out(step["out"])
        token = sampler.sample(logits)
        C.check_chain_step(sampler, token, ref, logits, ulps=C.chain_ulps(C.CHAIN_PARAMS[name]))
        sampler.accept(int(ref["ids"][ref["selected"]]))


def test_dry(golden):
    for entry in golden.meta["dry"]:
        table = {int(t): [tuple(x) for x in tails] for t, tails in entry["breakers"].items()}
        ids, logits = golden.ints(entry["in_ids"]), golden.floats(entry["in_logits"])
        for params, out in zip(golden.meta["dry_params"], entry["outs"]):
            ours = C.run_dry_ours(params, table, entry["history"], ids, logits)
            C.check(ours, golden.out(out), ids, logits, ulps=C.EXACT)


def test_ulp_distance():
    one = np.float32(1)
    up = np.nextafter(one, np.float32(2))
    a = np.array([one, -0.0, np.inf, np.nan, -np.inf, one, np.float32(-1e-45)], np.float32)
    b = np.array([one, 0.0, np.inf, np.nan, -np.inf, up, np.float32(1e-45)], np.float32)
    assert C.ulp_distance(a, b).tolist() == [0, 0, 0, 0, 0, 1, 2]
    C.assert_max_ulps(a, b, 2, "x")
    with pytest.raises(AssertionError, match="1 of 7 values more than 1 ulps"):
        C.assert_max_ulps(a, b, 1, "x")
