"""Shared fixtures: the real models (pulled once into the model cache) and reference libraries."""

from __future__ import annotations

import pytest

from llamacpy.format import open_gguf
from llamacpy.hub import CATALOG, pull

# the decoder GGUFs: gemma3-270m, smollm2-135m, qwen2.5-coder-0.5b (not the converted embedder,
# nor whisper)
REAL_MODELS = [name for name, e in CATALOG.items() if not e.convert_folder and not e.source_format]


@pytest.fixture(scope="session")
def model_paths() -> dict:
    """name -> path of every catalogue model (downloaded on first use, then cached)."""
    return {name: pull(name, quiet=True) for name in REAL_MODELS}


@pytest.fixture(scope="session")
def real_models(model_paths) -> dict:
    """name -> opened GGUFFile for every catalogue model."""
    return {name: open_gguf(path) for name, path in model_paths.items()}
