"""Fixtures for the converter tests: tiny checkpoints (made once per session) and llama.cpp's
conversions of them, cached per session in tmp_path_factory (never in the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

# name -> (SPECS entry, vocab source catalogue model, tokenizer kind, folder name, dtype)
CASES = {
    "llama": ("llama", "smollm2-135m", "smollm", "Tiny-Llama-v0.1-Instruct", "float32"),
    "llama-rope-llama3": ("llama-rope-llama3", "smollm2-135m", "smollm", "TinyLlama3-Base",
                          "float32"),
    "qwen2": ("qwen2", "qwen2.5-coder-0.5b", "qwen2", "Tiny-Qwen2.5-Coder-Instruct", "float32"),
    "qwen3": ("qwen3", "qwen2.5-coder-0.5b", "qwen2", "Qwen3-Tiny", "float32"),
    "gemma3": ("gemma3", "qwen2.5-coder-0.5b", "qwen2", "gemma-3-tiny-it", "float32"),
    "qwen2-bf16": ("qwen2", "qwen2.5-coder-0.5b", "qwen2", "Tiny-Qwen2-BF16", "bfloat16"),
    "llama-f16": ("llama", "smollm2-135m", "smollm", "Tiny-Llama-F16", "float16"),
    "llama-spm": ("llama", "smollm2-135m", "spm", "Tiny-Llama-SPM-v2", "float32"),
    "gemma3-spm": ("gemma3", "smollm2-135m", "spm", "gemma-3-spm-tiny", "float32"),
    "qwen35": ("qwen35", "qwen2.5-coder-0.5b", "qwen2", "Qwen3.5-Tiny", "float32"),
    "qwen35-mtp": ("qwen35-mtp", "qwen2.5-coder-0.5b", "qwen2", "Qwen3.5-Tiny-MTP", "float32"),
    "gemma3-vision": ("gemma3-vision", "qwen2.5-coder-0.5b", "qwen2", "gemma-3-vision-tiny",
                      "float32"),
    "qwen35-vision": ("qwen35-vision", "qwen2.5-coder-0.5b", "qwen2", "Qwen3.5-VL-tiny",
                      "float32"),
    "llama-48": ("llama", "smollm2-135m", "smollm", "Tiny-Llama-48", "float32"),
    "qwen3-sharded": ("qwen3", "qwen2.5-coder-0.5b", "qwen2", "Qwen3-Sharded", "float32"),
}
SHARDS = {"qwen3-sharded": "2MB"}
OVERRIDES = {"llama-48": {"hidden_size": 48, "intermediate_size": 80}}


def _checkpoints():
    """The checkpoint helpers; tests that need them skip where torch or transformers is absent."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.convert import checkpoints
    return torch, checkpoints


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory, model_paths):
    """name -> folder of that tiny checkpoint (made on first use)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            torch, checkpoints = _checkpoints()
            spec, vocab, kind, folder, dtype = CASES[name]
            root = tmp_path_factory.mktemp(f"ckpt-{name}")
            if spec == "qwen35-vision":
                made[name] = checkpoints.make_qwen35_vision_checkpoint(
                    Path(model_paths[vocab]), root / folder)
                return made[name]
            if spec == "gemma3-vision":
                made[name] = checkpoints.make_gemma3_vision_checkpoint(
                    Path(model_paths[vocab]), root / folder)
                return made[name]
            if spec.startswith("qwen35"):
                made[name] = checkpoints.make_qwen35_checkpoint(
                    Path(model_paths[vocab]), root / folder, mtp=spec == "qwen35-mtp")
                return made[name]
            made[name] = checkpoints.make_checkpoint(spec, Path(model_paths[vocab]), kind,
                                                     root / folder, dtype=getattr(torch, dtype),
                                                     shard=SHARDS.get(name),
                                                     **OVERRIDES.get(name, {}))
        return made[name]
    return get


@pytest.fixture(scope="session")
def reference_gguf(tmp_path_factory, checkpoint):
    """(name, outtype) -> llama.cpp's conversion of that checkpoint (made on first use)."""
    made: dict[tuple, Path] = {}

    def get(name: str, outtype: str, *flags: str) -> Path:
        if (name, outtype, flags) not in made:
            _, checkpoints = _checkpoints()
            out = tmp_path_factory.mktemp(f"ref-{name}") / f"ref-{outtype}.gguf"
            r = checkpoints.reference_convert(checkpoint(name), out, "--outtype", outtype,
                                              *flags)
            assert r.returncode == 0, r.stderr[-3000:]
            made[name, outtype, flags] = out
        return made[name, outtype, flags]
    return get
