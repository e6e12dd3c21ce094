"""llama-quantize against llama.cpp's llama_model_quantize, tensor by tensor (type and bytes).

The reference digests in tests/golden/llama_quantize.json come from
tests/reference/make_quantize_golden.py (llama-cpp-python 0.3.36) on the two tiny crop models.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from llamacpy.cli import quantize as cli
from llamacpy.format import open_gguf
from tests.reference import tiny_models

GOLDEN = json.loads((Path(__file__).parent.parent / "golden" / "llama_quantize.json").read_text())
CASES = GOLDEN["cases"]


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tiny")
    paths = {name: tiny_models.build(name, folder / f"{name}.gguf") for name in tiny_models.SPECS}
    for name, path in paths.items():
        assert tiny_models.sha256(path) == GOLDEN["models"][name], \
            f"tiny model {name} no longer matches the golden input: regenerate the golden file"
    return paths


def digests(path: Path) -> list[list[str]]:
    model = open_gguf(path)
    out = [[n, t.ggml_type.name, hashlib.sha256(t.data).hexdigest()[:16]]
           for n, t in model.tensors.items()]
    model.close()
    return out


@pytest.mark.parametrize("case", CASES, ids=[f"{c['model']}-{c['label']}" for c in CASES])
def test_matches_llama_cpp(case, tiny_inputs, tmp_path, capsys):
    out = tmp_path / "out.gguf"
    rc = cli.main([*case["flags"], str(tiny_inputs[case["model"]]), str(out), case["ftype"], "2"])
    assert rc == 0, capsys.readouterr().err
    ours, ref = digests(out), case["tensors"]
    assert [t[0] for t in ours] == [t[0] for t in ref], "tensor order differs from llama.cpp's"
    wrong = [(a, b) for a, b in zip(ours, ref) if a != b]
    assert not wrong, f"{len(wrong)} tensors differ (ours, llama.cpp): {wrong[:3]}"


def test_refuses_to_requantize(tiny_inputs, tmp_path, capsys):
    q8 = tmp_path / "q8.gguf"
    assert cli.main([str(tiny_inputs["qwen2-f16"]), str(q8), "Q8_0"]) == 0
    assert cli.main([str(q8), str(tmp_path / "q4.gguf"), "Q4_0"]) == 1
    assert "requantizing from type Q8_0 is disabled" in capsys.readouterr().err
    assert cli.main(["--allow-requantize", str(q8), str(tmp_path / "q4.gguf"), "Q4_0"]) == 0


def test_default_output_name_and_summary(tiny_inputs, tmp_path, capsys):
    src = tmp_path / "model.gguf"
    src.write_bytes(tiny_inputs["llama-f32"].read_bytes())
    assert cli.main([str(src), "q8_0"]) == 0
    assert (tmp_path / "ggml-model-Q8_0.gguf").exists()
    out = capsys.readouterr().out
    assert "model size  =" in out and "quant size  =" in out and "[  74/  74]" in out


@pytest.mark.parametrize("argv, message", [
    (["a.gguf", "b.gguf", "IQ2_XXS"], "not supported by llamacpy yet"),
    (["a.gguf", "b.gguf", "Q9_9"], "not a valid ftype"),
    (["--imatrix", "x.dat", "a.gguf", "Q4_0"], "--imatrix is not supported by llamacpy yet"),
    (["/nonexistent.gguf", "b.gguf", "Q4_0"], "cannot open"),
])
def test_clear_errors(argv, message, capsys):
    assert cli.main(argv) != 0
    assert message in capsys.readouterr().err


def test_dry_run_writes_nothing(tiny_inputs, tmp_path, capsys):
    assert cli.main(["--dry-run", str(tiny_inputs["qwen2-f16"]), "Q4_K_M"]) == 0
    assert "quant size" in capsys.readouterr().out
    assert not list(tiny_inputs["qwen2-f16"].parent.glob("ggml-model-*"))
