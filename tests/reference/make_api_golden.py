"""Regenerate tests/golden/llama_api_golden.json: tests/api/compat_script.py run on
llama-cpp-python 0.3.36 with SmolLM2-135M-Instruct.

    .venv/bin/python -m tests.reference.make_api_golden
"""

from __future__ import annotations

import json
from pathlib import Path

from llamacpy.hub import pull
from tests.api.compat_script import run
from tests.reference import llamacpp

GOLDEN = Path(__file__).parent.parent / "golden" / "llama_api_golden.json"


def main() -> None:
    import llama_cpp

    llamacpp.patch_default_params()
    out = run(llama_cpp.Llama, str(pull("smollm2-135m")))
    out["detokenized"] = out["detokenized"].decode("utf-8")
    GOLDEN.write_text(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
