"""Hugging Face architecture name -> converter class: adding an architecture is one file plus
one line here."""

from __future__ import annotations

from .base import Converter
from .bert import BertConverter
from .gemma3 import Gemma3Converter
from .llama import LlamaConverter
from .qwen2 import Qwen2Converter
from .qwen3 import Qwen3Converter
from .qwen35 import Qwen35Converter
from .safetensors import ConvertError

CONVERTERS: tuple[type[Converter], ...] = (
    LlamaConverter, Qwen2Converter, Qwen3Converter, Gemma3Converter, BertConverter,
    Qwen35Converter)
BY_HF_ARCH = {name: cls for cls in CONVERTERS for name in cls.hf_archs}


def converter_for(hparams: dict) -> type[Converter]:
    """The converter of config.json's architecture, or one line naming it and what we support."""
    archs = hparams.get("architectures") or []
    if not archs:
        raise ConvertError("config.json has no 'architectures' entry")
    arch = archs[0]
    if arch not in BY_HF_ARCH:
        raise ConvertError(f"Model architecture {arch} is not supported; supported: "
                           f"{', '.join(sorted(BY_HF_ARCH))}")
    return BY_HF_ARCH[arch]
