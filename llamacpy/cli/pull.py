"""`llamacpy pull NAME`: put a catalogue model in the model cache (see llamacpy/hub)."""

from __future__ import annotations

import argparse
import sys

from ..hub import CATALOG, pull
from .common import fail


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="llamacpy pull", description=__doc__)
    parser.add_argument("name", nargs="?", help="catalogue name; omit to list the catalogue")
    args = parser.parse_args(argv)
    if not args.name:
        for entry in CATALOG.values():
            print(f"  {entry.name:<22} {entry.description}")
        return 0
    try:
        print(pull(args.name))
    except (KeyError, RuntimeError) as e:
        return fail("llamacpy pull", str(e).strip("'\""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
