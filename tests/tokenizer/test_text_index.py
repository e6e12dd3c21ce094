"""TextIndex against the dict it replaces: dict(zip(texts, range(n))) with the first index of a
repeated text kept."""

from __future__ import annotations

import pickle
import random

import pytest

from llamacpy.format import StringArray
from llamacpy.tokenizer.text_index import TextIndex


def reference(texts: list[str]) -> dict[str, int]:
    first: dict[str, int] = {}
    for i, t in enumerate(texts):
        first.setdefault(t, i)
    return first


def random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    alphabet = "ab\u2581 ü🦙\n\udcff"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(n)]


@pytest.mark.parametrize("n,seed", [(1, 0), (7, 1), (3000, 2), (40000, 3)])
def test_matches_the_dict(n, seed):
    texts = random_texts(n, seed)  # short texts over a small alphabet: many repeats
    index, ref = TextIndex(StringArray.from_strings(texts)), reference(texts)
    assert index.n_repeats() == n - len(ref)
    for t, i in ref.items():
        assert index.get(t) == i and index[t] == i and t in index
        assert index.get(t.encode("utf-8", "surrogateescape")) == i  # bytes keys
    for t in random_texts(500, seed + 100):
        assert index.get(t, -1) == ref.get(t, -1) and (t in index) == (t in ref)


def test_misses_and_wrong_types():
    index = TextIndex(StringArray.from_strings(["x", "y"]))
    assert index.get("z") is None and index.get("z", -1) == -1 and 5 not in index
    with pytest.raises(KeyError):
        index["z"]


def test_distinct_texts_have_no_repeats_and_pickle():
    texts = [f"tok{i}" for i in range(5000)]
    index = TextIndex(StringArray.from_strings(texts))
    assert index.n_repeats() == 0
    copy = pickle.loads(pickle.dumps(index))  # rebuilt: str hashes differ between processes
    assert all(copy[t] == i for i, t in enumerate(texts))
