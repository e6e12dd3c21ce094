"""Fixtures for the converter tests: tiny checkpoints (made once per session) and llama.cpp's
conversions of them, cached per session in tmp_path_factory (never in the repo)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.convert import checkpoints  # noqa: E402

# name -> (SPECS entry, vocab source catalogue model, tokenizer kind, folder name, dtype)
CASES = {
    "llama": ("llama", "smollm2-135m", "smollm", "Tiny-Llama-v0.1-Instruct", torch.float32),
    "llama-rope-llama3": ("llama-rope-llama3", "smollm2-135m", "smollm", "TinyLlama3-Base",
                          torch.float32),
    "qwen2": ("qwen2", "qwen2.5-coder-0.5b", "qwen2", "Tiny-Qwen2.5-Coder-Instruct",
              torch.float32),
    "qwen3": ("qwen3", "qwen2.5-coder-0.5b", "qwen2", "Qwen3-Tiny", torch.float32),
    "gemma3": ("gemma3", "qwen2.5-coder-0.5b", "qwen2", "gemma-3-tiny-it", torch.float32),
    "qwen2-bf16": ("qwen2", "qwen2.5-coder-0.5b", "qwen2", "Tiny-Qwen2-BF16", torch.bfloat16),
    "llama-f16": ("llama", "smollm2-135m", "smollm", "Tiny-Llama-F16", torch.float16),
}


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory, model_paths):
    """name -> folder of that tiny checkpoint (made on first use)."""
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            spec, vocab, kind, folder, dtype = CASES[name]
            root = tmp_path_factory.mktemp(f"ckpt-{name}")
            made[name] = checkpoints.make_checkpoint(spec, Path(model_paths[vocab]), kind,
                                                     root / folder, dtype=dtype)
        return made[name]
    return get


@pytest.fixture(scope="session")
def reference_gguf(tmp_path_factory, checkpoint):
    """(name, outtype) -> llama.cpp's conversion of that checkpoint (made on first use)."""
    made: dict[tuple, Path] = {}

    def get(name: str, outtype: str) -> Path:
        if (name, outtype) not in made:
            out = tmp_path_factory.mktemp(f"ref-{name}") / f"ref-{outtype}.gguf"
            r = checkpoints.reference_convert(checkpoint(name), out, "--outtype", outtype)
            assert r.returncode == 0, r.stderr[-3000:]
            made[name, outtype] = out
        return made[name, outtype]
    return get
