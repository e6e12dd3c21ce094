"""Broken GGUF files: each gives one GGUFError naming what is wrong, never a crash or a hang.

1,000 mutants (truncations, flipped bytes, huge counts and lengths, bad offsets and types) are made
from a small valid file by a seeded generator, so the same sample runs every time.
"""

from __future__ import annotations

import struct
import time

import numpy as np
import pytest

from llamacpy.cli import inspect as inspect_cli
from llamacpy.format import GGMLType, GGUFError, TensorToWrite, open_gguf, write_gguf
from llamacpy.quants import dequantize

N_MUTANTS = 1000


@pytest.fixture(scope="module")
def valid_file(tmp_path_factory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "valid.gguf"
    rng = np.random.default_rng(0)
    meta = {"general.architecture": "llama", "llama.block_count": 2,
            "tokenizer.ggml.tokens": [f"tok{i}" for i in range(40)],
            "tokenizer.ggml.scores": rng.standard_normal(40).astype(np.float32),
            "nested": [np.arange(3, dtype=np.int32)], "flag": True}
    tensors = [TensorToWrite(f"blk.{i}.w", t, (64, 3), (lambda t=t: np.zeros(
        3 * {GGMLType.F32: 256, GGMLType.Q4_0: 36, GGMLType.Q8_0: 68}[t], np.uint8)))
        for i, t in enumerate([GGMLType.F32, GGMLType.Q4_0, GGMLType.Q8_0])]
    write_gguf(path, meta, tensors)
    return path.read_bytes()


def header_end(data: bytes) -> int:
    """Bytes before the tensor data: mutations there exercise the parser."""
    model_size = len(data) - (256 + 36 + 68) * 3
    return max(model_size, 32)


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One random mutation of the kinds real corruption produces."""
    raw = bytearray(data)
    end = header_end(data)
    kind = rng.integers(5)
    if kind == 0:  # truncation anywhere
        return bytes(raw[: rng.integers(0, len(raw))])
    if kind == 1:  # flipped bytes in the header
        for _ in range(rng.integers(1, 4)):
            raw[rng.integers(0, end)] ^= int(rng.integers(1, 256))
    elif kind == 2:  # a huge or negative-looking 64-bit value at an 8-byte-aligned-ish spot
        pos = int(rng.integers(4, end - 8))
        value = [2**63, 2**64 - 1, 2**40, 2**32 + 1, 0xFFFFFFFF][int(rng.integers(5))]
        raw[pos : pos + 8] = struct.pack("<Q", value)
    elif kind == 3:  # a 32-bit field (type ids, n_dims, lengths) set to something odd
        pos = int(rng.integers(4, end - 4))
        raw[pos : pos + 4] = struct.pack("<I", [13, 99, 0x7FFFFFFF, 5, 0][int(rng.integers(5))])
    else:  # trailing garbage or a chunk of zeros inside
        pos = int(rng.integers(0, len(raw)))
        n = int(rng.integers(1, 64))
        raw[pos : pos + n] = bytes(n)
    return bytes(raw)


def open_and_touch(path) -> None:
    """Open, then use every tensor as a model would: must not crash on what opened."""
    model = open_gguf(path)
    for t in model.tensors.values():
        dequantize(t.data, t.ggml_type, t.ne)
    model.close()


def test_thousand_mutants_fail_cleanly(valid_file, tmp_path):
    rng = np.random.default_rng(1234)
    path = tmp_path / "mutant.gguf"
    outcomes = {"error": 0, "opened": 0}
    for i in range(N_MUTANTS):
        path.write_bytes(mutate(valid_file, rng))
        start = time.perf_counter()
        try:
            open_and_touch(path)
            outcomes["opened"] += 1
        except GGUFError as e:
            msg = str(e)
            assert str(path) in msg and "\n" not in msg, f"mutant {i}: unclear message {msg!r}"
            outcomes["error"] += 1
        except Exception as e:  # anything else is a crash of the reader
            pytest.fail(f"mutant {i}: {type(e).__name__}: {e}")
        # a hang limit, not a speed check: a broken size field must not make the reader loop
        assert time.perf_counter() - start < 30.0, f"mutant {i} hung"
    assert outcomes["error"] > N_MUTANTS // 2, outcomes


@pytest.mark.parametrize("patch, message", [
    (lambda b: b"GGML" + b[4:], "not a GGUF file"),
    (lambda b: b[:20], "truncated"),
    (lambda b: b[:16] + struct.pack("<Q", 2**60) + b[24:], "metadata count 1152921504606846976 needs"),
    (lambda b: b[:8] + struct.pack("<Q", 2**50) + b[16:], "tensor count 1125899906842624 needs"),
    (lambda b: b[: len(b) - 100], "past the end of the file"),
    (lambda b: b"", "file is empty"),
])
def test_specific_errors(valid_file, tmp_path, patch, message):
    path = tmp_path / "broken.gguf"
    path.write_bytes(patch(valid_file))
    with pytest.raises(GGUFError, match=message):
        open_gguf(path)


def test_unknown_tensor_type_is_named(valid_file, tmp_path):
    # the first tensor info's type field sits after its name, n_dims and two dims
    raw = bytearray(valid_file)
    pos = raw.find(b"blk.0.w") + len("blk.0.w") + 4 + 16
    raw[pos : pos + 4] = struct.pack("<I", 77)
    path = tmp_path / "type.gguf"
    path.write_bytes(raw)
    with pytest.raises(GGUFError, match="tensor 'blk.0.w' has unknown type 77"):
        open_gguf(path)


def test_inspect_reports_one_line(valid_file, tmp_path, capsys):
    path = tmp_path / "broken.gguf"
    path.write_bytes(valid_file[:50])
    assert inspect_cli.main([str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "truncated" in err
