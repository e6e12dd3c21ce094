"""Llama(embedding=True): embed() and create_embedding() in llama-cpp-python's shapes, against
transformers' outputs (tiny BERT and tiny Qwen3 golden data) and llama-cpp-python itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy import Llama
from llamacpy.engine.embedding import Embedder
from llamacpy.format import open_gguf
from llamacpy.models import load_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
BERT = GOLDEN / "tiny_bert" / "bert.gguf"
TOL = 2e-3  # ggml_gelu's tanh form against transformers' erf GELU (tests/models/test_bert.py)


def bert_reference():
    ref = np.load(GOLDEN / "tiny_bert" / "bert.npz")
    cut = np.cumsum(ref["lengths"])[:-1]
    return [str(t) for t in ref["texts"]], [h.mean(axis=0) for h in np.split(ref["hidden"], cut)]


@pytest.fixture(scope="module")
def llm():
    return Llama(str(BERT), embedding=True, verbose=False)


def test_create_embedding_is_llama_cpp_pythons_dict(llm):
    """Not normalised (llama-cpp-python's create_embedding), mean pooling from the file;
    usage counts [CLS] and [SEP]."""
    texts, means = bert_reference()
    out = llm.create_embedding(texts)
    assert set(out) == {"object", "data", "model", "usage"} and out["object"] == "list"
    assert out["model"] == str(BERT)
    n = sum(len(llm.tokenize(t.encode())) for t in texts)
    assert out["usage"] == {"prompt_tokens": n, "total_tokens": n}
    for i, (d, want) in enumerate(zip(out["data"], means)):
        assert d["object"] == "embedding" and d["index"] == i
        assert all(isinstance(x, float) for x in d["embedding"])
        assert np.abs(np.array(d["embedding"]) - want).max() < TOL
    assert llm.create_embedding(texts[0], model="m")["model"] == "m"


def test_embed_shapes_and_normalize(llm):
    texts, _ = bert_reference()
    one = llm.embed(texts[0])
    assert isinstance(one, list) and len(one) == llm.n_embd()
    unit = np.array(llm.embed(texts[0], normalize=True))
    assert np.isclose(np.linalg.norm(unit), 1) and np.allclose(unit, one / np.linalg.norm(one))
    vectors, count = llm.embed(texts[:2], return_count=True)
    assert len(vectors) == 2 and count == sum(len(llm.tokenize(t.encode())) for t in texts[:2])
    assert llm.pooling_type() == 1


def test_pooling_none_gives_token_rows():
    texts, _ = bert_reference()
    llm = Llama(str(BERT), embedding=True, pooling_type=0, verbose=False)
    rows = llm.embed(texts[1])
    assert len(rows) == len(llm.tokenize(texts[1].encode())) and len(rows[0]) == llm.n_embd()


def test_embedding_needs_the_flag_and_an_encoder_cannot_complete():
    with pytest.raises(RuntimeError, match="embedding=True"):
        Llama(str(BERT), verbose=False).embed("a")
    with pytest.raises(RuntimeError, match="logits"):
        Llama(str(BERT), verbose=False)("a", max_tokens=2)


def test_unsupported_architecture_is_refused():
    with pytest.raises(ValueError, match="gemma3"):
        Llama(str(GOLDEN / "tiny_hf" / "gemma3.gguf"), embedding=True, verbose=False)


def test_last_token_pooling_on_a_decoder_is_its_final_hidden_state():
    """Qwen3 with pooling last: the vector is the normed hidden state of the last token, so
    the output head on it gives transformers' last-position logits (fp16 KV reference, as the
    scratch cache is f16)."""
    g = open_gguf(GOLDEN / "tiny_hf" / "qwen3.gguf")
    ref = np.load(GOLDEN / "tiny_hf" / "qwen3.npz")
    model = load_model(g)
    tokens = ref["tokens"].tolist()
    (v,), (w,) = Embedder(model, "last").embed([tokens]), Embedder(model, "last").embed(
        [tokens[:5]])
    assert np.abs(model.output(v[None])[0] - ref["logits_kv_f16"][-1]).max() < 1e-2
    assert np.abs(model.output(w[None])[0] - ref["logits_kv_f16"][4]).max() < 1e-2
    both = Embedder(model, "last").embed([tokens[:5], tokens])  # one batch, causal per sequence
    assert np.abs(both[0] - w).max() < 1e-4 and np.abs(both[1] - v).max() < 1e-4


@pytest.mark.llamacpp
@pytest.mark.parametrize("pooling", [1, 3])
def test_decoder_pooling_matches_llama_cpp(pooling):
    from tests.reference.llamacpp import available, load_llama

    if not available():
        pytest.skip("llama-cpp-python is not installed")
    path = GOLDEN / "tiny_hf" / "qwen3.gguf"
    texts = ["hello world", "the quick brown fox", "a"]
    ref = load_llama(path, embedding=True, pooling_type=pooling).embed(texts)
    ours = Llama(str(path), embedding=True, pooling_type=pooling, verbose=False).embed(texts)
    for a, b in zip(map(np.array, ours), map(np.array, ref)):
        assert np.abs(a - b).max() < 1e-2 * np.abs(b).max()
