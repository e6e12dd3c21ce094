"""GGUF reading and writing: real models against gguf-py, every value type, versions, split files."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from llamacpy.format import GGMLType, GGUFError, TensorToWrite, ValueType, open_gguf, write_gguf
from llamacpy.format.constants import KEY_SPLIT_COUNT, KEY_SPLIT_NO

EVERY_VALUE = {
    "t.u8": (7, ValueType.UINT8), "t.i8": (-7, ValueType.INT8),
    "t.u16": (65535, ValueType.UINT16), "t.i16": (-32768, ValueType.INT16),
    "t.u32": (4_000_000_000, ValueType.UINT32), "t.i32": (-2_000_000_000, ValueType.INT32),
    "t.u64": (2**63 + 5, ValueType.UINT64), "t.i64": (-(2**62), ValueType.INT64),
    "t.f32": (1.5, ValueType.FLOAT32), "t.f64": (1e300, ValueType.FLOAT64),
    "t.bool": (True, ValueType.BOOL), "t.str": ("héllo ✓ 🦙", ValueType.STRING),
    "t.arr_f32": (np.arange(5, dtype=np.float32), None),
    "t.arr_i64": (np.array([-1, 2**40], dtype=np.int64), None),
    "t.arr_bool": (np.array([True, False]), None),
    "t.arr_str": (["a", "", "ü", "<|im_end|>"], None),
    "t.nested": ([np.array([1, 2], dtype=np.int32), np.array([3], dtype=np.int32)], None),
    "t.nested_str": ([["x", "y"], ["z"]], None),
    "t.empty": (np.array([], dtype=np.uint8), None),
}


def small_tensors() -> list[TensorToWrite]:
    rng = np.random.default_rng(1)
    w = rng.standard_normal((4, 64)).astype(np.float32)
    return [
        TensorToWrite("a.weight", GGMLType.F32, (64, 4), lambda: w),
        TensorToWrite("b.weight", GGMLType.F16, (64, 4), lambda: w.astype(np.float16)),
        TensorToWrite("c.weight", GGMLType.Q8_0, (64, 1), lambda: np.zeros(68, np.uint8)),
    ]


def write_every_value(path) -> None:
    meta = {k: v for k, (v, _) in EVERY_VALUE.items()}
    types = {k: t for k, (_, t) in EVERY_VALUE.items() if t is not None}
    write_gguf(path, meta, small_tensors(), types)


def test_every_value_type_round_trips(tmp_path):
    path = tmp_path / "values.gguf"
    write_every_value(path)
    model = open_gguf(path)
    for key, (value, vtype) in EVERY_VALUE.items():
        got = model.metadata[key]
        if vtype is not None:
            assert model.value_types[key] == vtype and got == value, key
        elif isinstance(value, np.ndarray):
            assert got.dtype == value.dtype and np.array_equal(got, value), key
        else:
            assert [list(g) for g in got] == [list(v) for v in value], key
    assert model.tensors["b.weight"].ggml_type == GGMLType.F16
    assert model.tensors["a.weight"].shape == (4, 64)


def test_gguf_py_reads_what_we_write(tmp_path):
    path = tmp_path / "values.gguf"
    write_every_value(path)
    reader = gguf.GGUFReader(path)
    assert reader.fields["t.str"].contents() == "héllo ✓ 🦙"
    assert reader.fields["t.u64"].contents() == 2**63 + 5
    assert reader.fields["t.arr_str"].contents() == ["a", "", "ü", "<|im_end|>"]
    ours = open_gguf(path)
    for t in reader.tensors:
        assert ours.tensors[t.name].offset == t.data_offset
        assert bytes(ours.tensors[t.name].data) == np.asarray(t.data).tobytes()


def test_version_2_is_read(tmp_path):
    path = tmp_path / "v2.gguf"
    write_every_value(path)
    raw = bytearray(path.read_bytes())
    raw[4:8] = struct.pack("<I", 2)
    path.write_bytes(raw)
    assert open_gguf(path).version == 2


@pytest.mark.parametrize("version", [1, 4, 0x03000000])
def test_other_versions_are_refused(tmp_path, version):
    path = tmp_path / "v.gguf"
    write_every_value(path)
    raw = bytearray(path.read_bytes())
    raw[4:8] = struct.pack("<I", version)
    path.write_bytes(raw)
    with pytest.raises(GGUFError, match="unsupported GGUF version"):
        open_gguf(path)


def test_custom_alignment(tmp_path):
    path = tmp_path / "align.gguf"
    write_gguf(path, {"general.alignment": 64}, small_tensors(),
               {"general.alignment": ValueType.UINT32})
    model = open_gguf(path)
    assert model.alignment == 64
    assert all(t.offset % 64 == 0 for t in model.tensors.values())


def test_split_model(tmp_path):
    tensors = small_tensors()
    for i, t in enumerate(tensors):
        meta = {KEY_SPLIT_NO: i, KEY_SPLIT_COUNT: 3, "split.tensors.count": 3}
        if i == 0:
            meta["general.architecture"] = "llama"
        write_gguf(tmp_path / f"m-{i + 1:05d}-of-00003.gguf", meta, [t],
                   {KEY_SPLIT_NO: ValueType.UINT16, KEY_SPLIT_COUNT: ValueType.UINT16})
    model = open_gguf(tmp_path / "m-00002-of-00003.gguf")
    assert list(model.tensors) == ["a.weight", "b.weight", "c.weight"]
    assert model.metadata["general.architecture"] == "llama" and len(model.parts) == 3
    assert np.array_equal(model.tensors["b.weight"].data.view(np.float16).astype(np.float32),
                          model.tensors["a.weight"].data.view(np.float32).astype(np.float16)
                          .astype(np.float32))
    (tmp_path / "m-00003-of-00003.gguf").unlink()
    with pytest.raises(GGUFError, match="missing part"):
        open_gguf(tmp_path / "m-00001-of-00003.gguf")


@pytest.mark.parametrize("name", ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"])
def test_real_models_match_gguf_py(name, real_models, model_paths):
    ours = real_models[name]
    reader = gguf.GGUFReader(model_paths[name])
    assert [t.name for t in reader.tensors] == list(ours.tensors)
    for t in reader.tensors:
        mine = ours.tensors[t.name]
        assert mine.offset == t.data_offset and mine.ggml_type == t.tensor_type
        assert mine.ne == tuple(int(n) for n in t.shape) and mine.nbytes == t.n_bytes
        assert np.shares_memory(mine.data, ours.parts[0].array), "tensor data must be a view"
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert keys == list(ours.metadata)
    for key in keys:
        ref, got = reader.fields[key].contents(), ours.metadata[key]
        if isinstance(got, np.ndarray):
            assert np.array_equal(got, np.asarray(ref)), key
        else:
            assert got == ref, key


def test_missing_required_key_names_it(real_models):
    with pytest.raises(GGUFError, match="'llama.no_such_key' is missing"):
        real_models["smollm2-135m"].require("llama.no_such_key")
