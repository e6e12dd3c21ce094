"""Hugging Face architecture name -> converter class: adding an architecture is one file plus
one line here."""

from __future__ import annotations

from .base import Converter
from .bert import BertConverter
from .gemma3 import Gemma3Converter
from .gemma3_vision import Gemma3VisionConverter
from .llama import LlamaConverter
from .qwen2 import Qwen2Converter
from .qwen3 import Qwen3Converter
from .qwen35 import Qwen35Converter
from .qwen35_vision import Qwen35VisionConverter
from .safetensors import ConvertError
from .whisper import WhisperConverter

CONVERTERS: tuple[type[Converter], ...] = (
    LlamaConverter, Qwen2Converter, Qwen3Converter, Gemma3Converter, BertConverter,
    Qwen35Converter, WhisperConverter)
MMPROJ_CONVERTERS: tuple[type[Converter], ...] = (Gemma3VisionConverter, Qwen35VisionConverter)
BY_HF_ARCH = {name: cls for cls in CONVERTERS for name in cls.hf_archs}
MMPROJ_BY_HF_ARCH = {name: cls for cls in MMPROJ_CONVERTERS for name in cls.hf_archs}


def converter_for(hparams: dict, mmproj: bool = False) -> type[Converter]:
    """The converter of config.json's architecture, or one line naming it and what we support."""
    archs = hparams.get("architectures") or []
    if not archs:
        raise ConvertError("config.json has no 'architectures' entry")
    arch, table = archs[0], MMPROJ_BY_HF_ARCH if mmproj else BY_HF_ARCH
    if arch not in table:
        what = "--mmproj of model architecture" if mmproj else "Model architecture"
        raise ConvertError(f"{what} {arch} is not supported; supported: "
                           f"{', '.join(sorted(table))}")
    return table[arch]
