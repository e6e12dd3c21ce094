"""StringArray: a GGUF string array read into one blob, checked against the list gguf-py reads
and writes, and against Python's list behaviour."""

from __future__ import annotations

import pickle

import gguf
import numpy as np
import pytest

from llamacpy.format import StringArray, open_gguf, write_gguf

TEXTS = ["a", "", "ü", "<|im_end|>", "\u2581the", "🦙" * 40, "x" * 300, "\udcff\udc80"]


def test_reader_gives_the_strings_gguf_py_wrote(tmp_path):
    path = tmp_path / "s.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_array("t.texts", TEXTS[:-1])  # gguf-py cannot encode the surrogate escapes
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file()
    w.close()
    got = open_gguf(path).metadata["t.texts"]
    assert isinstance(got, StringArray)
    assert list(got) == TEXTS[:-1] and got == TEXTS[:-1] and len(got) == len(TEXTS) - 1
    assert [got[i] for i in range(-len(got), len(got))] == TEXTS[:-1] * 2


def test_round_trip_keeps_invalid_utf8_as_surrogate_escapes(tmp_path):
    path, copy = tmp_path / "s.gguf", tmp_path / "copy.gguf"
    write_gguf(path, {"t.texts": TEXTS}, [])
    got = open_gguf(path).metadata["t.texts"]
    assert got == TEXTS and got.raw(7) == b"\xff\x80"
    write_gguf(copy, {"t.texts": got}, [])  # written straight from the blob
    assert copy.read_bytes() == path.read_bytes()


def test_behaves_like_a_list():
    arr = StringArray.from_strings(TEXTS)
    assert arr[1:4] == TEXTS[1:4] and arr[::-3] == TEXTS[::-3] and arr[-1] == TEXTS[-1]
    assert arr.tolist() == TEXTS and repr(arr) == repr(TEXTS)
    assert list(arr.byte_lengths()) == [len(t.encode("utf-8", "surrogateescape")) for t in TEXTS]
    assert arr != TEXTS[:-1] and arr != TEXTS[:-1] + ["z"] and arr == tuple(TEXTS)
    for bad in (len(TEXTS), -len(TEXTS) - 1):
        with pytest.raises(IndexError):
            arr[bad]
    assert pickle.loads(pickle.dumps(arr)) == TEXTS
    with pytest.raises(ValueError, match="offsets"):
        StringArray(b"abc", np.array([0, 2]))


def test_empty_array():
    arr = StringArray.from_strings([])
    assert len(arr) == 0 and list(arr) == [] and arr == []
