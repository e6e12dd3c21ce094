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
    cls = converter_for(hparams, opts.mmproj)
    tensors = {} if opts.vocab_only else index_checkpoint(model_dir)
    return prepare(cls(model_dir, hparams, tensors, no_mtp=opts.no_mtp), opts)


def convert(model_dir: str | Path, opts: Options | None = None) -> Path:
    """Convert a model folder; returns the written file's path (the first shard's when split)."""
    opts = opts or Options()
    conversion = plan(model_dir, opts)
    if opts.dry_run:
        return conversion.outfile
    return write(conversion, opts)[0]


def convert_and_quantize(model_dir: str | Path, opts: Options, quant_type: str,
                         keep_intermediate: bool = False) -> Path:
    """--outtype Q4_K_M (any llama-quantize type): an F16 GGUF, then our llama-quantize on it;
    the F16 file is removed unless `keep_intermediate`."""
    from ..quants.model_quantize import QuantizeError, quantize_model
    from ..quants.recipe import QuantizeParams, parse_file_type

    option = parse_file_type(quant_type)
    if option is None:
        raise ConvertError(f"--outtype {quant_type}: not a converter or llama-quantize type")
    first = Options(**{**opts.__dict__, "outtype": "f16"})
    named = opts.outfile is not None and not opts.outfile.is_dir()
    if named:  # the F16 file goes beside the requested one
        first.outfile = opts.outfile.parent / f"{opts.outfile.stem}.f16-intermediate.gguf"
    conversion = plan(model_dir, first)
    final = _quantized_path(conversion, opts.outfile, option.name)
    if final == conversion.outfile:
        raise ConvertError(f"{final}: the output would overwrite the F16 intermediate")
    write(conversion, first)
    try:
        quantize_model(conversion.outfile, final, QuantizeParams(ftype=option))
    except QuantizeError as e:
        raise ConvertError(f"quantizing to {option.name}: {e}") from None
    finally:
        if not keep_intermediate:
            conversion.outfile.unlink(missing_ok=True)
    return final


def _quantized_path(conversion: Conversion, outfile: Path | None, type_name: str) -> Path:
    from .naming import naming_convention

    if outfile is not None and not outfile.is_dir():
        low, up = type_name.lower(), type_name.upper()
        return outfile.parent / outfile.name.format(low, outtype=low, ftype=low, OUTTYPE=up,
                                                    FTYPE=up)
    meta = {k.removeprefix("general."): v for k, v in conversion.kv.values().items()
            if k.startswith("general.") and isinstance(v, str)}
    return conversion.outfile.parent / f"{naming_convention(meta, type_name)}.gguf"
