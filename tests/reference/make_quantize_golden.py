"""Regenerate tests/golden/llama_quantize.json: llama.cpp's llama_model_quantize output, tensor by
tensor (type and sha256 of the bytes), for every file type from the two tiny models.

    .venv/bin/python -m tests.reference.make_quantize_golden   # needs llama-cpp-python 0.3.36
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from pathlib import Path

from llamacpy.format import GGMLType, open_gguf
from llamacpy.quants.recipe import parse_file_type
from tests.reference import llamacpp, tiny_models

GOLDEN = Path(__file__).parent.parent / "golden" / "llama_quantize.json"
FILE_TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L",
              "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "F16", "BF16",
              "F32"]
# (label, file type, llama_model_quantize_params fields, llama-quantize flags)
VARIANTS = [
    ("pure", "Q4_K_M", {"pure": True}, ["--pure"]),
    ("leave-output", "Q4_K_M", {"quantize_output_tensor": False}, ["--leave-output-tensor"]),
    ("output-q8_0", "Q3_K_M", {"output_tensor_type": int(GGMLType.Q8_0)},
     ["--output-tensor-type", "q8_0"]),
    ("embd-q4_0", "Q5_K_S", {"token_embedding_type": int(GGMLType.Q4_0)},
     ["--token-embedding-type", "q4_0"]),
]


def tensor_digests(path: Path) -> list[list[str]]:
    """[name, type, sha256 prefix] of every tensor, in file order."""
    model = open_gguf(path)
    out = [[name, t.ggml_type.name, hashlib.sha256(t.data).hexdigest()[:16]]
           for name, t in model.tensors.items()]
    model.close()
    return out


def main() -> None:
    golden: dict = {"models": {}, "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for model in tiny_models.SPECS:
            src = tiny_models.build(model, Path(tmp) / f"{model}.gguf")
            golden["models"][model] = tiny_models.sha256(src)
            cases = [(ft, ft, {}, []) for ft in FILE_TYPES] + VARIANTS
            for label, ft, fields, flags in cases:
                out = Path(tmp) / "out.gguf"
                llamacpp.model_quantize(src, out, int(parse_file_type(ft).ftype), **fields)
                golden["cases"].append({"model": model, "label": label, "ftype": ft,
                                        "flags": flags, "tensors": tensor_digests(out)})
                print(model, label, "done")
    GOLDEN.write_text(json.dumps(golden, indent=0))


if __name__ == "__main__":
    main()
