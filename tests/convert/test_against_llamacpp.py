"""Our converter against llama.cpp's convert_hf_to_gguf.py (the 0.3.36 sdist with its own
gguf-py, under torch + transformers) on the same tiny checkpoints: the two GGUF files must be
byte-identical -- same metadata keys, value types and values in the same order, the same tensor
names, types, shapes and bytes. A difference is reported key by key and tensor by tensor."""

from __future__ import annotations

from pathlib import Path

import pytest

from llamacpy.convert import Options, convert

TEXT = ["llama", "llama-rope-llama3", "qwen2", "qwen3", "gemma3", "llama-spm", "gemma3-spm"]


def assert_same_gguf(ours: Path, ref: Path) -> None:
    if ours.read_bytes() == ref.read_bytes():
        return
    from tests.convert.checkpoints import gguf_summary

    (m1, t1), (m2, t2) = gguf_summary(ours), gguf_summary(ref)
    assert [k for k, *_ in m1] == [k for k, *_ in m2], "metadata keys or their order differ"
    for a, b in zip(m1, m2):
        assert a == b, (f"metadata differs: ours {a[:2]} {str(a[2])[:200]} "
                        f"vs llama.cpp {b[:2]} {str(b[2])[:200]}")
    for a, b in zip(t1, t2):
        assert a == b, f"tensor differs: ours {a} vs llama.cpp {b}"
    assert t1 == t2
    pytest.fail("files differ outside metadata and tensors (header or padding)")


# every architecture at f16; f32 and q8_0 (whose rules differ: F16 fallback rows) on a few, so
# the reference conversions (~5 s each, torch's import) stay few
TEXT_CASES = [(name, "f16") for name in TEXT] + [
    pytest.param(n, t, marks=pytest.mark.slow) for n, t in (
        ("llama", "f32"), ("gemma3", "f32"), ("qwen2", "q8_0"), ("gemma3", "q8_0"),
        ("llama-rope-llama3", "q8_0"), ("llama-spm", "q8_0"))]


@pytest.mark.parametrize("name,outtype", TEXT_CASES)
def test_text_models_match(name, outtype, checkpoint, reference_gguf, tmp_path):
    ours = convert(checkpoint(name), Options(outfile=tmp_path / "ours.gguf", outtype=outtype))
    assert_same_gguf(ours, reference_gguf(name, outtype))


@pytest.mark.slow
@pytest.mark.parametrize("name,outtype", [("qwen2-bf16", "auto"), ("qwen2-bf16", "f16"),
                                          ("llama-f16", "auto"), ("llama-f16", "q8_0")])
def test_half_precision_sources_match(name, outtype, checkpoint, reference_gguf, tmp_path):
    """BF16 and F16 checkpoints; --outtype auto keeps their 16-bit type, as llama.cpp's does."""
    ours = convert(checkpoint(name), Options(outfile=tmp_path / "ours.gguf", outtype=outtype))
    assert_same_gguf(ours, reference_gguf(name, outtype))


@pytest.mark.parametrize("name,no_mtp,outtype", [
    ("qwen35", True, "f32"), ("qwen35-mtp", False, "f32"), ("qwen35-mtp", True, "f32"),
    pytest.param("qwen35-mtp", False, "q8_0", marks=pytest.mark.slow)])
def test_qwen35_matches(name, no_mtp, outtype, checkpoint, reference_gguf, tmp_path):
    """Qwen3.5 with and without its MTP block, and an MTP checkpoint converted --no-mtp.
    ssm_a = -exp(A_log) is computed in float64 here and with torch's exp there: equal on these
    checkpoints; in general the two may differ by one ulp in ~1% of values."""
    flags = ("--no-mtp",) if no_mtp else ()
    ours = convert(checkpoint(name), Options(outfile=tmp_path / "ours.gguf", outtype=outtype,
                                             no_mtp=no_mtp))
    assert_same_gguf(ours, reference_gguf(name, outtype, *flags))


def test_qwen35_without_mtp_needs_no_mtp(checkpoint):
    from llamacpy.convert import ConvertError

    with pytest.raises(ConvertError, match="--no-mtp"):
        convert(checkpoint("qwen35"), Options(dry_run=True))


@pytest.mark.parametrize("outtype", ["f16", pytest.param("q8_0", marks=pytest.mark.slow)])
def test_gemma3_mmproj_matches(outtype, checkpoint, reference_gguf, tmp_path):
    """--mmproj on Gemma3ForConditionalGeneration: the SigLIP tower and the projector, with
    llama.cpp's forced types (input projection F16, embeddings F32) at every outtype."""
    ours = convert(checkpoint("gemma3-vision"), Options(outfile=tmp_path / "ours.gguf",
                                                        outtype=outtype, mmproj=True))
    assert_same_gguf(ours, reference_gguf("gemma3-vision", outtype, "--mmproj"))


def test_gemma3_multimodal_text_part_matches(checkpoint, reference_gguf, tmp_path):
    ours = convert(checkpoint("gemma3-vision"), Options(outfile=tmp_path / "t.gguf",
                                                        outtype="f16"))
    assert_same_gguf(ours, reference_gguf("gemma3-vision", "f16"))


def test_default_mmproj_name(checkpoint, tmp_path):
    import shutil

    folder = Path(shutil.copytree(checkpoint("gemma3-vision"), tmp_path / "gemma-3-vision-tiny"))
    out = convert(folder, Options(outtype="f16", mmproj=True))
    assert out.name == "mmproj-gemma-3-vision-tiny-F16.gguf", out.name


@pytest.mark.parametrize("outtype", ["f16", pytest.param("f32", marks=pytest.mark.slow)])
def test_qwen35_mmproj_matches(outtype, checkpoint, reference_gguf, tmp_path):
    """--mmproj on Qwen3_5ForConditionalGeneration: qwen3vl_merger, the Conv3D patch embedding
    as v.patch_embd.weight and .weight.1, the merger as mm.0 / mm.2 / v.post_ln."""
    ours = convert(checkpoint("qwen35-vision"), Options(outfile=tmp_path / "ours.gguf",
                                                        outtype=outtype, mmproj=True))
    assert_same_gguf(ours, reference_gguf("qwen35-vision", outtype, "--mmproj"))


def test_qwen35_multimodal_text_part_matches(checkpoint, reference_gguf, tmp_path):
    ours = convert(checkpoint("qwen35-vision"), Options(outfile=tmp_path / "t.gguf",
                                                        outtype="f16", no_mtp=True))
    assert_same_gguf(ours, reference_gguf("qwen35-vision", "f16", "--no-mtp"))


@pytest.mark.parametrize("layout", ["top-level-rope-theta", "rope-scaling-linear"])
def test_older_config_layouts_match(layout, checkpoint, tmp_path):
    """config.json in the older layout (top-level rope_theta, rope_scaling with 'type', no
    head_dim / num_key_value_heads) reads as transformers normalizes it, as llama.cpp's does."""
    import json
    import shutil

    from tests.convert.checkpoints import reference_convert

    folder = Path(shutil.copytree(checkpoint("llama"), tmp_path / f"Old-Llama-{layout}"))
    cfg = json.loads((folder / "config.json").read_text())
    theta = cfg.pop("rope_parameters")["rope_theta"]
    cfg.pop("head_dim")
    cfg.pop("num_key_value_heads")  # both then write head_count_kv = head_count
    cfg["rope_theta"] = theta
    if layout == "rope-scaling-linear":
        cfg["rope_scaling"] = {"type": "linear", "factor": 2.0}
    (folder / "config.json").write_text(json.dumps(cfg))
    ref = tmp_path / "ref.gguf"
    r = reference_convert(folder, ref, "--outtype", "f16")
    assert r.returncode == 0, r.stderr[-2000:]
    ours = convert(folder, Options(outfile=tmp_path / "ours.gguf", outtype="f16"))
    assert_same_gguf(ours, ref)


CARD = """---
license: apache-2.0
language:
- en
- "no"
tags:
- text-generation
- tiny
pipeline_tag: text-generation
base_model: Qwen/Qwen2.5-Coder-0.5B
datasets:
- https://huggingface.co/datasets/bigcode/the-stack
- HuggingFaceFW/fineweb-edu
model_creator: Someone
---
# A tiny test model
"""


def test_model_card_metadata_matches(checkpoint, tmp_path):
    """general.license/tags/languages/base_model.*/dataset.*/author from the README front
    matter, and general.sampling.* from generation_config.json, as llama.cpp derives them."""
    import shutil

    from tests.convert.checkpoints import reference_convert

    folder = Path(shutil.copytree(checkpoint("qwen2"),
                                  tmp_path / "Tiny-Qwen2.5-Coder-1.5B-Instruct-v2"))
    (folder / "README.md").write_text(CARD)
    ref = tmp_path / "ref.gguf"
    r = reference_convert(folder, ref, "--outtype", "f16")
    assert r.returncode == 0, r.stderr[-2000:]
    ours = convert(folder, Options(outfile=tmp_path / "ours.gguf", outtype="f16"))
    assert_same_gguf(ours, ref)
    from llamacpy.format import open_gguf

    with open_gguf(ours) as g:
        assert g.metadata["general.license"] == "apache-2.0"
        assert g.metadata["general.base_model.0.organization"] == "Qwen"
        assert g.metadata["general.sampling.top_k"] == 20


def test_q8_0_leaves_rows_it_cannot_block_in_f16(checkpoint, reference_gguf, tmp_path):
    """Hidden size 48: every matrix whose rows are 48 or 80 long stays F16 under q8_0."""
    from llamacpy.format import open_gguf

    ours = convert(checkpoint("llama-48"), Options(outfile=tmp_path / "o.gguf", outtype="q8_0"))
    assert_same_gguf(ours, reference_gguf("llama-48", "q8_0"))
    with open_gguf(ours) as g:
        types = {t.name: (t.ggml_type.name, t.ne[0]) for t in g.tensors.values()}
    assert types["blk.0.attn_q.weight"] == ("F16", 48)
    assert types["blk.0.ffn_down.weight"] == ("F16", 80)
    assert types["blk.0.attn_output.weight"] == ("Q8_0", 64)  # 4 heads x 16: a whole block
