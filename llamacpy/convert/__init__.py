"""Hugging Face checkpoint -> GGUF, as llama.cpp's convert_hf_to_gguf.py does it, without torch.

`convert(model_dir, Options(...))` reads config.json, the safetensors weights (memory-mapped, one
tensor at a time) and the tokenizer files, and writes one GGUF file. HF tensor-name maps live only
in this package, one file per architecture (registry.py lists them).
"""

from __future__ import annotations

from pathlib import Path

from .base import load_hparams
from .pipeline import Conversion, Options, prepare, write
from .registry import CONVERTERS, converter_for
from .safetensors import ConvertError, index_checkpoint

__all__ = ["CONVERTERS", "ConvertError", "Options", "convert", "plan"]


def plan(model_dir: str | Path, opts: Options) -> Conversion:
    """Everything about the output but its tensor bytes: names, types, shapes, metadata, path."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ConvertError(f"{model_dir} is not a directory")
    hparams = load_hparams(model_dir)
    cls = converter_for(hparams)
    tensors = {} if opts.vocab_only else index_checkpoint(model_dir)
    return prepare(cls(model_dir, hparams, tensors), opts)


def convert(model_dir: str | Path, opts: Options | None = None) -> Path:
    """Convert a model folder; returns the written file's path."""
    opts = opts or Options()
    conversion = plan(model_dir, opts)
    if not opts.dry_run:
        write(conversion, opts)
    return conversion.outfile
