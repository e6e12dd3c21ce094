"""`llamacpy inspect FILE`: metadata and a tensor table (name, type, shape, bytes)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

import numpy as np

from ..format import GGUFError, StringArray, open_gguf
from ..format.constants import ValueType
from .common import fail, ggml_type_name, mib

TOOL = "llamacpy inspect"


def describe_value(value, vtype: int, width: int = 60) -> str:
    """One-line rendering: long arrays show their length and first items."""
    if vtype == ValueType.ARRAY:
        items = list(value[:5]) if isinstance(value, (list, np.ndarray, StringArray)) else []
        shown = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in items)
        more = ", ..." if len(value) > 5 else ""
        return f"[{shown}{more}] ({len(value)} items)"
    text = repr(value) if isinstance(value, str) else str(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= width else text[: width - 3] + "..."


def print_report(path: str, show_tensors: bool = True) -> None:
    model = open_gguf(path)
    print(f"{path}: GGUF v{model.version}, {len(model.parts)} file(s), {mib(model.nbytes):.2f} MiB, "
          f"{len(model.metadata)} metadata keys, {len(model.tensors)} tensors, "
          f"alignment {model.alignment}")
    print("\nmetadata:")
    for key, value in model.metadata.items():
        vtype = ValueType(model.value_types[key])
        print(f"  {key:<45} {vtype.name.lower():<8} {describe_value(value, vtype)}")
    counts = Counter(ggml_type_name(t.ggml_type) for t in model.tensors.values())
    n_params = sum(t.n_elements for t in model.tensors.values())
    print(f"\ntensors: {n_params / 1e6:.2f} M parameters; types: "
          + ", ".join(f"{n} x {t}" for t, n in counts.most_common()))
    if show_tensors:
        print(f"  {'#':>4}  {'name':<40} {'type':<7} {'shape (ne)':<24} {'bytes':>12}  offset")
        for i, t in enumerate(model.tensors.values()):
            shape = " x ".join(str(n) for n in t.ne)
            print(f"  {i:4d}  {t.name:<40} {ggml_type_name(t.ggml_type):<7} {shape:<24} "
                  f"{t.nbytes:12d}  {t.offset}")
    model.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=TOOL, description=__doc__)
    parser.add_argument("file", help="a .gguf file (any part of a split model)")
    parser.add_argument("--no-tensors", action="store_true", help="metadata only")
    args = parser.parse_args(argv)
    try:
        print_report(args.file, show_tensors=not args.no_tensors)
    except GGUFError as e:
        return fail(TOOL, str(e))
    except BrokenPipeError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
