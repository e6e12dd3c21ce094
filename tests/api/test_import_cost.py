"""What `from llamacpy import Llama` loads: not jinja2, llguidance or the gguf package (peak RSS,
issue 17); gguf-py's constants come as a standalone copy that still mixes with gguf's own."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys
from llamacpy import Llama
import llamacpy.server.app
print(sorted(m for m in ("jinja2", "llguidance", "gguf", "sentencepiece") if m in sys.modules))
import gguf
from llamacpy.format.constants import GGML_QUANT_SIZES, GGMLType, Keys
q4_k = gguf.GGMLQuantizationType.Q4_K
assert GGMLType.Q4_K == q4_k and GGMLType(q4_k) is GGMLType.Q4_K
assert GGML_QUANT_SIZES[q4_k] == (256, 144) and gguf.GGML_QUANT_SIZES[GGMLType.Q4_K] == (256, 144)
assert Keys.LLM.CONTEXT_LENGTH == gguf.Keys.LLM.CONTEXT_LENGTH == "{arch}.context_length"
print("mixed")
"""


def test_llama_and_the_server_import_no_template_grammar_or_gguf_package():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["[]", "mixed"]
