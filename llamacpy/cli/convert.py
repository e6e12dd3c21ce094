"""convert-hf-to-gguf / `llamacpy convert`: llama.cpp's convert_hf_to_gguf.py usage.

    convert-hf-to-gguf MODEL_DIR [--outfile OUT] [--outtype f32|f16|bf16|q8_0|auto|Q4_K_M...]
                       [--vocab-only] [--mmproj] [--no-mtp] [--split-max-size N] [--dry-run]
                       [--verbose] [--model-name NAME] [--keep-intermediate]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..convert import ConvertError, Options, convert, convert_and_quantize, plan
from ..convert.pipeline import FTYPES, shard_paths, split_tensors, text_progress
from .common import fail

TOOL = "convert-hf-to-gguf"
# llama.cpp flags this converter does not implement: refused, never ignored
NOT_SUPPORTED = ("--bigendian", "--use-temp-file", "--no-lazy", "--metadata", "--remote",
                 "--mtp", "--dspark", "--mistral-format", "--split-max-tensors",
                 "--no-tensor-first-split", "--sentence-transformers-dense-modules",
                 "--fuse-gate-up-exps", "--fp8-as-q8", "--fuse-qkv", "--target-model-dir",
                 "--disable-mistral-community-chat-template", "--print-supported-models")


def split_size(text: str) -> int:
    """N, NK, NM or NG in decimal units (split_str_to_n_bytes)."""
    scale = {"K": 1000, "M": 1000**2, "G": 1000**3}.get(text[-1:], 1)
    digits = text[:-1] if text[-1:] in "KMG" and text[-1:] else text
    if not digits.isdecimal():
        raise argparse.ArgumentTypeError(f"invalid split size {text!r}: a number, optionally "
                                         "followed by K, M or G")
    return int(digits) * scale


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description="Convert a Hugging Face model to GGUF")
    p.add_argument("model", help="directory with config.json, *.safetensors and the tokenizer")
    p.add_argument("--outfile", type=Path, help="output path (a folder, or a file name where "
                   "{ftype} is replaced by the outtype); default: llama.cpp's name in MODEL_DIR")
    p.add_argument("--outtype", default="auto", help="f32, f16, bf16, q8_0, auto (the weights' "
                   "16-bit type), or a llama-quantize type such as Q4_K_M (converts, then "
                   "quantizes)")
    p.add_argument("--vocab-only", action="store_true", help="write only the vocabulary")
    p.add_argument("--mmproj", action="store_true", help="export the vision projector")
    p.add_argument("--no-mtp", "--no-nextn", dest="no_mtp", action="store_true",
                   help="leave out multi-token-prediction tensors")
    p.add_argument("--split-max-size", type=split_size, default=0,
                   help="max size per split N(K|M|G)")
    p.add_argument("--dry-run", action="store_true", help="print the plan, write nothing")
    p.add_argument("--verbose", action="store_true", help="print every tensor")
    p.add_argument("--model-name", help="general.name to write")
    p.add_argument("--keep-intermediate", action="store_true",
                   help="with a quantized --outtype, keep the F16 GGUF too")
    return p


def refused(argv: list[str]) -> str | None:
    for arg in argv:
        if arg.split("=", 1)[0] in NOT_SUPPORTED:
            return f"{arg.split('=', 1)[0]} is not supported by llamacpy's converter yet"
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if (why := refused(argv)) is not None:
        return fail(TOOL, why, 2)
    args = parser().parse_args(argv)
    opts = Options(outfile=args.outfile, outtype=args.outtype.lower() if args.outtype.lower()
                   in (*FTYPES, "auto") else args.outtype, vocab_only=args.vocab_only,
                   mmproj=args.mmproj,
                   dry_run=args.dry_run, model_name=args.model_name,
                   split_max_size=args.split_max_size, no_mtp=args.no_mtp,
                   progress=text_progress)
    try:
        return run(args, opts)
    except ConvertError as e:
        return fail(TOOL, str(e))
    except KeyError as e:  # a field an architecture needs is absent from config.json
        return fail(TOOL, f"config.json: required field {e} is missing")
    except OSError as e:
        return fail(TOOL, f"{e.filename or ''}: {e.strerror or e}")


def run(args: argparse.Namespace, opts: Options) -> int:
    if opts.outtype not in (*FTYPES, "auto"):
        if args.dry_run or args.vocab_only:
            raise ConvertError(f"--outtype {opts.outtype} cannot be combined with "
                               "--dry-run or --vocab-only")
        out = convert_and_quantize(args.model, opts, opts.outtype, args.keep_intermediate)
        print(f"{TOOL}: wrote {out}")
        return 0
    if args.dry_run or args.verbose:
        show_plan(plan(args.model, opts), opts.split_max_size)
    if not args.dry_run:
        print(f"{TOOL}: wrote {convert(args.model, opts)}")
    return 0


def show_plan(conversion, max_size: int) -> None:
    for t in conversion.tensors:
        shape = ", ".join(str(n) for n in reversed(t.shape))
        print(f"{t.name:<40} {t.ggml_type.name:<5} {{{shape}}}")
    shards = split_tensors(conversion.tensors, max_size)
    for path, shard in zip(shard_paths(conversion.outfile, len(shards)), shards):
        total = sum(t.nbytes for t in shard)
        print(f"{TOOL}: {path}: {len(shard)} tensors, {total / 2**20:.1f} MiB of tensor data")


if __name__ == "__main__":
    sys.exit(main())
