"""llama-quantize: same usage as llama.cpp's tools/quantize.

    llama-quantize [--allow-requantize] [--leave-output-tensor] [--pure] [--output-tensor-type T]
                   [--token-embedding-type T] [--tensor-type NAME=T] [--dry-run]
                   model-f32.gguf [model-quant.gguf] type [nthreads]
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from ..format import GGUFError
from ..format.constants import GGMLType, block_geometry
from ..quants.model_quantize import QuantizeError, TensorPlan, plan_types, quantize_model
from ..quants.recipe import (
    FILE_TYPE_OPTIONS,
    UNSUPPORTED_FILE_TYPES,
    QuantizeParams,
    parse_file_type,
)
from .common import fail, ggml_type_name, mib, progress_bar, set_threads

TOOL = "llama-quantize"
NOT_SUPPORTED = {"--imatrix", "--include-weights", "--exclude-weights", "--prune-layers",
                 "--keep-split", "--override-kv"}


def usage(code: int = 1) -> int:
    print(f"usage: {TOOL} [--help] [--allow-requantize] [--leave-output-tensor] [--pure]\n"
          "       [--output-tensor-type] [--token-embedding-type] [--tensor-type] [--tensor-type-file]\n"
          "       [--dry-run] [--max-buffer-size] model-f32.gguf [model-quant.gguf] type [nthreads]\n\n"
          "  --allow-requantize      allow requantizing tensors that have already been quantized\n"
          "  --leave-output-tensor   leave output.weight un(re)quantized\n"
          "  --pure                  disable k-quant mixtures and quantize all tensors to the same type\n"
          "  --output-tensor-type T  use this ggml_type for the output.weight tensor\n"
          "  --token-embedding-type T  use this ggml_type for the token embeddings tensor\n"
          "  --tensor-type NAME=T    quantize tensors matching NAME to this ggml_type\n"
          "  --tensor-type-file F    list of NAME=T entries separated by spaces or newlines\n"
          "  --dry-run               show the final sizes without quantizing\n\n"
          "allowed quantization types:\n")
    for opt in FILE_TYPE_OPTIONS:
        num = f"{int(opt.ftype):2d}  or  " if opt.name != "COPY" else "          "
        print(f"  {num}{opt.name:<7} : {opt.description}")
    return code


def parse_ggml_type(text: str) -> GGMLType | None:
    """parse_ggml_type: a tensor type name, case-insensitive (q8_0, Q6_K, f16 ...)."""
    for t in GGMLType:
        if t.name.lower() == text.lower():
            return t
    return None


@dataclass
class Args:
    params: QuantizeParams | None = None
    path_in: str = ""
    path_out: str = ""
    nthread: int = 0
    dry_run: bool = False
    flags: dict = field(default_factory=dict)


def parse_args(argv: list[str]) -> Args | int:
    """Flags first, then positionals, exactly as the C tool reads them."""
    a, i, tensor_types, flags = Args(), 0, [], {}
    while i < len(argv) and argv[i].startswith("--"):
        arg = argv[i]
        if arg in ("--help", "-h"):
            return usage(0)
        if arg in NOT_SUPPORTED:
            return fail(TOOL, f"{arg} is not supported by llamacpy yet")
        if arg in ("--allow-requantize", "--leave-output-tensor", "--pure", "--dry-run"):
            flags[arg] = True
        elif arg in ("--output-tensor-type", "--token-embedding-type", "--tensor-type",
                     "--tensor-type-file", "--max-buffer-size"):
            if i + 1 >= len(argv):
                return usage()
            i += 1
            if arg == "--tensor-type":
                tensor_types.append(argv[i])
            elif arg == "--tensor-type-file":
                with open(argv[i]) as f:
                    tensor_types.extend(f.read().split())
            else:
                flags[arg] = argv[i]
        else:
            return usage()
        i += 1
    rest = argv[i:]
    if len(rest) < 2:
        print(f"{TOOL}: bad arguments", file=sys.stderr)
        return usage()
    return finish_args(a, rest, flags, tensor_types)


def finish_args(a: Args, rest: list[str], flags: dict, tensor_types: list[str]) -> Args | int:
    a.path_in = rest[0]
    opt = parse_file_type(rest[1])
    if opt is not None:  # <input> <type>: output next to the input
        a.path_out = os.path.join(os.path.dirname(a.path_in), f"ggml-model-{opt.name}.gguf")
        rest = rest[2:]
    else:  # <input> <output> <type>
        a.path_out = rest[1]
        if len(rest) < 3:
            return fail(TOOL, "missing ftype")
        opt = parse_file_type(rest[2])
        if opt is None:
            known = rest[2].upper() in UNSUPPORTED_FILE_TYPES
            why = "is not supported by llamacpy yet" if known else "is not a valid ftype"
            return fail(TOOL, f"file type '{rest[2]}' {why}")
        rest = rest[3:]
    if rest:
        if not rest[0].lstrip("-").isdigit():
            return fail(TOOL, f"invalid nthread '{rest[0]}'")
        a.nthread = int(rest[0])
    p = QuantizeParams(ftype=opt, only_copy=opt.name == "COPY",
                       allow_requantize=flags.get("--allow-requantize", False),
                       quantize_output_tensor=not flags.get("--leave-output-tensor", False),
                       pure=flags.get("--pure", False))
    for flag, attr in (("--output-tensor-type", "output_tensor_type"),
                       ("--token-embedding-type", "token_embedding_type")):
        if flag in flags:
            t = parse_ggml_type(flags[flag])
            if t is None:
                return fail(TOOL, f"{flag}: unknown ggml type '{flags[flag]}'")
            setattr(p, attr, t)
    for entry in tensor_types:
        name, _, tname = entry.partition("=")
        t = parse_ggml_type(tname)
        if not name or t is None:
            return fail(TOOL, f"--tensor-type: malformed '{entry}' (expected name=type)")
        p.tensor_types.append((name, t))
    a.params, a.dry_run = p, flags.get("--dry-run", False)
    return a


def print_tensor(i: int, n: int, plan: TensorPlan) -> None:
    t = plan.tensor
    shape = ", ".join(f"{d:5d}" for d in (list(t.ne) + [1, 1, 1])[:4])
    line = (f"{progress_bar(i + 1, n)} [{i + 1:4d}/{n:4d}] {t.name:<36} - [{shape}], "
            f"type = {ggml_type_name(t.ggml_type):>6}, ")
    if plan.converts:
        block, block_bytes = block_geometry(plan.new_type)
        new_bytes = t.n_elements // block * block_bytes
        line += (f"converting to {ggml_type_name(plan.new_type)} .. "
                 f"size = {mib(t.nbytes):8.2f} MiB -> {mib(new_bytes):8.2f} MiB")
    else:
        line += f"size = {mib(t.nbytes):8.3f} MiB"
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if isinstance(args, int):
        return args
    if os.path.exists(args.path_out) and os.path.samefile(args.path_in, args.path_out):
        return fail(TOOL, f"input and output files are the same: '{args.path_in}'")
    set_threads(args.nthread)
    verb = "calculating quantization size for" if args.dry_run else "quantizing"
    target = "" if args.dry_run else f" to '{args.path_out}'"
    print(f"main: {verb} '{args.path_in}'{target} as {args.params.ftype.name}", file=sys.stderr)
    try:
        if args.dry_run:
            return dry_run(args)
        summary = quantize_model(args.path_in, args.path_out, args.params, on_tensor=print_tensor)
    except (GGUFError, QuantizeError, ValueError, OSError) as e:
        return fail(TOOL, f"failed to quantize: {e}")
    n = max(summary.n_elements, 1)
    print(f"llama_model_quantize_impl: model size  = {mib(summary.size_in):8.2f} MiB "
          f"({summary.size_in * 8 / n:.2f} BPW)")
    print(f"llama_model_quantize_impl: quant size  = {mib(summary.size_out):8.2f} MiB "
          f"({summary.size_out * 8 / n:.2f} BPW)")
    if summary.n_fallback:
        print(f"llama_model_quantize_impl: WARNING: {summary.n_fallback} of {len(summary.plans)} "
              f"tensor(s) required fallback quantization")
    print(f"\nmain: quantize time = {summary.seconds * 1000:8.2f} ms")
    return 0


def dry_run(args: Args) -> int:
    from ..format import open_gguf

    model = open_gguf(args.path_in)
    plans, _ = plan_types(model, args.params)
    size_in = size_out = 0
    for i, plan in enumerate(plans):
        print_tensor(i, len(plans), plan)
        block, nbytes = block_geometry(plan.new_type)
        size_in += plan.tensor.nbytes
        size_out += plan.tensor.n_elements // block * nbytes
    print(f"llama_model_quantize_impl: model size  = {mib(size_in):8.2f} MiB")
    print(f"llama_model_quantize_impl: quant size  = {mib(size_out):8.2f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
