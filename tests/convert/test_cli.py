"""convert-hf-to-gguf's usage against llama.cpp's: the default output name and folder, a
sharded checkpoint, --vocab-only, --dry-run, and --outtype Q4_K_M (convert, then our
llama-quantize, the F16 intermediate removed unless --keep-intermediate)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamacpy.convert import Options, convert


def ours_cli(*args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "llamacpy.cli.convert", *args],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return r


def copy_of(folder: Path, dest: Path) -> Path:
    return Path(shutil.copytree(folder, dest / folder.name))


def ggufs(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.gguf"))


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_default_output_name_is_llamacpps(name, checkpoint, tmp_path):
    """No --outfile: both write <basename>-<size>-<finetune>-<version>-<TYPE>.gguf into the
    model folder, derived from the folder name, config.json and the parameter count."""
    pytest.importorskip("torch")
    from tests.convert.checkpoints import reference_convert

    mine, theirs = copy_of(checkpoint(name), tmp_path / "a"), copy_of(checkpoint(name),
                                                                         tmp_path / "b")
    ours_cli(str(mine), "--outtype", "f16")
    r = reference_convert(theirs, theirs, "--outtype", "f16")  # --outfile a folder: its default
    assert r.returncode == 0, r.stderr[-2000:]
    assert [p.name for p in ggufs(mine)] == [p.name for p in ggufs(theirs)] != []
    assert ggufs(mine)[0].read_bytes() == ggufs(theirs)[0].read_bytes()


def test_sharded_checkpoint_matches(checkpoint, reference_gguf, tmp_path):
    folder = checkpoint("qwen3-sharded")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("model-*-of-*.safetensors"))) > 1
    ours = convert(folder, Options(outfile=tmp_path / "o.gguf", outtype="f16"))
    assert ours.read_bytes() == reference_gguf("qwen3-sharded", "f16").read_bytes()


def test_vocab_only_matches(checkpoint, tmp_path):
    pytest.importorskip("torch")
    from tests.convert.checkpoints import reference_convert

    folder = checkpoint("qwen2")
    ref = tmp_path / "ref-vocab.gguf"
    r = reference_convert(folder, ref, "--vocab-only")
    assert r.returncode == 0, r.stderr[-2000:]
    ours_cli(str(folder), "--vocab-only", "--outfile", str(tmp_path / "ours-vocab.gguf"))
    assert (tmp_path / "ours-vocab.gguf").read_bytes() == ref.read_bytes()


def test_dry_run_writes_nothing(checkpoint, tmp_path):
    folder = copy_of(checkpoint("qwen3"), tmp_path)
    r = ours_cli(str(folder), "--dry-run", "--outtype", "q8_0")
    assert ggufs(folder) == []
    assert "blk.0.attn_q.weight" in r.stdout and "Q8_0" in r.stdout


def test_one_command_q4_k_m_equals_convert_then_quantize(checkpoint, reference_gguf, tmp_path):
    """--outtype Q4_K_M gives what llama-quantize Q4_K_M gives on llama.cpp's F16 conversion."""
    from llamacpy.quants.model_quantize import quantize_model
    from llamacpy.quants.recipe import QuantizeParams, parse_file_type

    out = tmp_path / "q.gguf"
    ours_cli(str(checkpoint("qwen2")), "--outtype", "Q4_K_M", "--outfile", str(out))
    want = tmp_path / "want.gguf"
    quantize_model(reference_gguf("qwen2", "f16"), want,
                   QuantizeParams(ftype=parse_file_type("Q4_K_M")))
    assert out.read_bytes() == want.read_bytes()
    assert ggufs(tmp_path) == [out, want]  # the F16 intermediate is gone


def test_keep_intermediate(checkpoint, tmp_path):
    folder = copy_of(checkpoint("qwen3"), tmp_path)
    ours_cli(str(folder), "--outtype", "Q4_0", "--keep-intermediate")
    names = [p.name for p in ggufs(folder)]
    assert len(names) == 2 and any(n.endswith("-F16.gguf") for n in names), names
    assert any(n.endswith("-Q4_0.gguf") for n in names), names


@pytest.mark.parametrize("size", ["300K", "100M"])
def test_split_max_size_matches(size, checkpoint, tmp_path):
    """Shards named <stem>-0000i-of-0000n.gguf, split.* keys last in the first and alone in the
    others; a limit the model fits in gives one unsplit file, as llama.cpp's writer does."""
    pytest.importorskip("torch")
    from tests.convert.checkpoints import reference_convert

    folder = checkpoint("qwen3")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    r = reference_convert(folder, tmp_path / "a" / "m.gguf", "--outtype", "f32",
                          "--split-max-size", size)
    assert r.returncode == 0, r.stderr[-2000:]
    ours_cli(str(folder), "--outtype", "f32", "--split-max-size", size,
             "--outfile", str(tmp_path / "b" / "m.gguf"))
    theirs, mine = ggufs(tmp_path / "a"), ggufs(tmp_path / "b")
    assert [p.name for p in mine] == [p.name for p in theirs]
    assert (len(mine) > 1) == (size == "300K")
    for a, b in zip(mine, theirs):
        assert a.read_bytes() == b.read_bytes(), a.name


NO_TORCH = """
import sys
for name in ("torch", "transformers", "sentencepiece", "safetensors"):
    sys.modules[name] = None  # importing any of them now fails
from llamacpy.cli.convert import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("name", ["qwen35-mtp", "llama-spm"])
def test_converter_runs_without_torch(name, checkpoint, reference_gguf, tmp_path):
    """torch, transformers, sentencepiece and safetensors made unimportable: the same bytes."""
    out = tmp_path / "o.gguf"
    r = subprocess.run([sys.executable, "-c", NO_TORCH, str(checkpoint(name)), "--outtype", "f16",
                        "--outfile", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == reference_gguf(name, "f16").read_bytes()
