"""Regenerate tests/golden/sampling_golden.npz: llama.cpp's sampler outputs for CI (no llama.cpp).

Stores, with their inputs: every sampler case of tests/sampling/cases.py at vocab sizes 32 and
200; every CHAIN_PARAMS chain over 4 steps of a 2000-token vocabulary; DRY on token histories
of SmolLM2 (BPE) and Gemma 3 (SPM), with the restart sequences llamacpy derives from each
vocabulary (the llama.cpp test checks that derivation).

    .venv/bin/python -m tests.sampling.make_sampling_golden   # needs llama-cpp-python
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llamacpy.hub import pull
from llamacpy.sampling import SamplingParams, dry_breakers
from tests.sampling import cases as C
from tests.sampling import reference as R

GOLDEN = Path(__file__).parent.parent / "golden" / "sampling_golden.npz"
CHAIN_VOCAB, CHAIN_STEPS = 2000, 4


class Packer:
    """Every array goes into one flat int32 or float32 array (thousands of small .npy members
    would cost more in headers than in data); the JSON index keeps [offset, length]."""

    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {"i32": [], "f32": []}
        self.size = {"i32": 0, "f32": 0}

    def add(self, a: np.ndarray) -> list:
        kind = "i32" if a.dtype.kind in "iu" else "f32"
        self.parts[kind].append(a.astype(np.int32 if kind == "i32" else np.float32))
        self.size[kind] += len(a)
        return [self.size[kind] - len(a), len(a)]

    def result(self) -> dict:
        return {kind: np.concatenate(parts) for kind, parts in self.parts.items()}


def put(pack: Packer, out: dict) -> dict:
    """A result as its JSON entry (arrays packed)."""
    return {
        "ids": pack.add(out["ids"]),
        "logits": pack.add(out["logits"]),
        "probs": pack.add(out["probs"]),
        "selected": out["selected"],
        "sorted": out["sorted"],
    }


def sampler_golden(pack: Packer) -> list[dict]:
    index = []
    for case in C.all_cases(sizes=(32, 200), seeds=(0,)):
        steps = [
            {
                "in_ids": pack.add(case.ids[step]),
                "in_logits": pack.add(case.logits[step]),
                "out": put(pack, out),
            }
            for step, out in enumerate(R.run_ref(case))
        ]
        index.append({**case.meta(), "steps": steps})
    return index


def chain_golden(pack: Packer) -> list[dict]:
    index = []
    for name, kwargs in C.CHAIN_PARAMS.items():
        params = SamplingParams(**kwargs)
        ref = R.chain_from_params(params, CHAIN_VOCAB)
        history, rows = C.chain_inputs(CHAIN_VOCAB, CHAIN_STEPS, seed=len(name))
        for token in history:
            ref.accept(token)
        steps = []
        for step, logits in enumerate(rows):
            out = ref.apply(np.arange(CHAIN_VOCAB, dtype=np.int32), logits)
            steps.append({"in_logits": pack.add(logits), "out": put(pack, out)})
            ref.accept(int(out["ids"][out["selected"]]))
        index.append({"name": name, "history": history, "steps": steps})
    return index


def dry_golden(pack: Packer) -> list[dict]:
    index = []
    for model in ("smollm2-135m", "gemma3-270m"):
        vocab = R.Vocab(pull(model, quiet=True))
        pieces = vocab.pieces()
        histories = C.dry_histories(vocab.tokenize, pieces, seed=5)
        for breakers in C.DRY_BREAKERS[:2]:
            table = dry_breakers(pieces, vocab.tokenize, breakers)
            refs = [R.dry(vocab.vocab, *params, breakers) for params in C.DRY_PARAMS]
            for h, history in enumerate(histories):
                index.append(_dry_entry(pack, refs, table, history, vocab.n_vocab, h))
    return index


def _dry_entry(
    pack: Packer, refs: list, table: dict, history: list[int], n_vocab: int, seed: int
) -> dict:
    """One history: the restart sequences it can meet, its candidates, llama.cpp's outputs."""
    ids, logits = C.dry_candidates(history, n_vocab, seed=seed)
    outs = []
    for ref in refs:
        ref.reset()
        for token in history:
            ref.accept(token)
        outs.append(put(pack, ref.apply(ids, logits)))
    used = {str(t): [list(x) for x in table[t]] for t in set(history) if t in table}
    return {
        "history": history,
        "breakers": used,
        "in_ids": pack.add(ids),
        "in_logits": pack.add(logits),
        "outs": outs,
    }


def main() -> None:
    pack = Packer()
    meta = {
        "samplers": sampler_golden(pack),
        "chains": chain_golden(pack),
        "chain_vocab": CHAIN_VOCAB,
        "dry": dry_golden(pack),
        "dry_params": C.DRY_PARAMS,
    }
    np.savez_compressed(GOLDEN, meta=np.array(json.dumps(meta)), **pack.result())
    print(f"wrote {GOLDEN} ({GOLDEN.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
