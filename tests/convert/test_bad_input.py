"""Bad checkpoints end convert-hf-to-gguf with one line naming the cause and an exit status in
1..125, never a traceback (llama.cpp's own converter tracebacks on LFS pointers and truncated
safetensors). Each case is a hand-made folder: no torch needed."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 1, "hidden_size": 8,
          "num_attention_heads": 2, "vocab_size": 4}


def safetensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    header, offset, blobs = {}, 0, []
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a, "<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    head = json.dumps(header).encode()
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)


def folder(tmp_path: Path, config: dict | None = CONFIG, weights: bytes | None = None) -> Path:
    d = tmp_path / "model"
    d.mkdir()
    if config is not None:
        (d / "config.json").write_text(json.dumps(config))
    if weights is not None:
        (d / "model.safetensors").write_bytes(weights)
    return d


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamacpy.cli.convert", *args],
                          capture_output=True, text=True, timeout=120)


def assert_one_line_failure(r: subprocess.CompletedProcess, *words: str) -> None:
    assert 1 <= r.returncode <= 125, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    for w in words:
        assert w in lines[0], lines[0]


LFS_POINTER = (b"version https://git-lfs.github.com/spec/v1\n"
               b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
               b"size 269060552\n")


def test_lfs_pointer(tmp_path):
    r = run_cli(str(folder(tmp_path, weights=LFS_POINTER)))
    assert_one_line_failure(r, "LFS pointers, not weights")


def test_unknown_architecture_lists_supported(tmp_path):
    config = {**CONFIG, "architectures": ["FalconMambaForCausalLM"]}
    r = run_cli(str(folder(tmp_path, config=config, weights=b"")))
    assert_one_line_failure(r, "Model architecture FalconMambaForCausalLM is not supported",
                            "LlamaForCausalLM", "BertModel", "Gemma3ForCausalLM")


def test_truncated_safetensors(tmp_path):
    data = safetensors_bytes({"model.embed_tokens.weight": np.ones((4, 8), np.float32)})
    r = run_cli(str(folder(tmp_path, weights=data[:-40])))
    assert_one_line_failure(r, "truncated safetensors")


def test_corrupt_safetensors_header(tmp_path):
    data = struct.pack("<Q", 20) + b"{not json at all...}"
    r = run_cli(str(folder(tmp_path, weights=data)))
    assert_one_line_failure(r, "safetensors")


def test_missing_config(tmp_path):
    r = run_cli(str(folder(tmp_path, config=None, weights=b"")))
    assert_one_line_failure(r, "config.json")


def test_missing_tokenizer(tmp_path):
    data = safetensors_bytes({"model.embed_tokens.weight": np.ones((4, 8), np.float32),
                              "model.norm.weight": np.ones(8, np.float32)})
    r = run_cli(str(folder(tmp_path, weights=data)), "--outfile", str(tmp_path / "o.gguf"))
    assert_one_line_failure(r, "missing tokenizer")


def test_not_enough_disk_space(tmp_path, monkeypatch):
    from llamacpy.convert import pipeline
    from llamacpy.convert.safetensors import ConvertError

    monkeypatch.setattr(pipeline.shutil, "disk_usage", lambda p: type("U", (), {"free": 10}))
    with pytest.raises(ConvertError, match="not enough disk space"):
        pipeline.check_disk_space(tmp_path / "x.gguf", 1 << 20)
    assert not (tmp_path / "x.gguf").exists()


@pytest.mark.parametrize("flag", [["--mmproj"], ["--bigendian"],
                                  ["--no-mtp"]])
def test_unsupported_flags_are_refused(tmp_path, flag):
    data = safetensors_bytes({"model.embed_tokens.weight": np.ones((4, 8), np.float32)})
    r = run_cli(str(folder(tmp_path, weights=data)), *flag)
    assert_one_line_failure(r, flag[0].lstrip("-").split("-")[0])


def test_pytorch_bin_weights_are_refused(tmp_path):
    d = folder(tmp_path)
    (d / "pytorch_model.bin").write_bytes(b"PK\x03\x04 not really a zip")
    r = run_cli(str(d))
    assert_one_line_failure(r, "PyTorch .bin", "safetensors")


def test_index_naming_a_missing_shard(tmp_path):
    data = safetensors_bytes({"model.norm.weight": np.ones(8, np.float32)})
    d = folder(tmp_path, weights=None)
    (d / "model-00001-of-00002.safetensors").write_bytes(data)
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}))
    r = run_cli(str(d))
    assert_one_line_failure(r, "model-00002-of-00002.safetensors", "missing")
