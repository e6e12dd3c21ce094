"""BERT and pooled embeddings against transformers and llama.cpp.

Tiny random BERT models (tests/golden/tiny_bert, made by tests/reference/tiny_bert/
make_tiny_bert.py with transformers and llama.cpp's converter; no torch needed here) check
tokens, every hidden state, batching and rank pooling; the real all-MiniLM-L6-v2 checks the
pooled vectors against sentence-transformers (slow, needs torch) and llama-cpp-python.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamacpy.engine.embedding import POOLING, Embedder, normalize, pack
from llamacpy.format import open_gguf
from llamacpy.memory.batch import Batch
from llamacpy.models import load_model
from llamacpy.tokenizer import Tokenizer

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tiny_bert"
# |ours - transformers| per hidden value (LayerNorm outputs O(1)), float32 weights: the GELU is
# ggml_gelu's tanh form, as llama.cpp's bert graph runs it, where transformers' "gelu" is erf:
# 5.5e-4 at most here. A wrong mask, position or norm moves values by 0.05 to 2.
TOL = 2e-3


def split(flat: np.ndarray, lengths: np.ndarray) -> list:
    return np.split(flat, np.cumsum(lengths)[:-1])


@pytest.fixture(scope="module")
def tiny():
    g = open_gguf(GOLDEN / "bert.gguf")
    ref = np.load(GOLDEN / "bert.npz")
    yield load_model(g), Tokenizer.from_gguf(g), ref
    g.close()


@pytest.fixture(scope="module")
def tiny_rank():
    g = open_gguf(GOLDEN / "bert-rank.gguf")
    yield load_model(g), np.load(GOLDEN / "bert-rank.npz")
    g.close()


def test_wordpiece_tokens_match_transformers(tiny):
    _, tok, ref = tiny
    want = [s.tolist() for s in split(ref["tokens"], ref["lengths"])]
    assert [tok.tokenize(str(t)) for t in ref["texts"]] == want


def test_hidden_states_match_transformers_in_one_batch(tiny):
    """All sequences in one forward, each seeing only itself (a wrong mask mixes them)."""
    model, _, ref = tiny
    seqs = split(ref["tokens"], ref["lengths"])
    batch = Batch(ref["tokens"], np.concatenate([np.arange(len(s)) for s in seqs]).astype(np.int32),
                  np.repeat(np.arange(len(seqs)), ref["lengths"]).astype(np.int32),
                  np.ones(len(ref["tokens"]), bool))
    hidden = model.forward(batch)
    assert hidden.dtype == np.float32 and hidden.shape == ref["hidden"].shape
    assert np.abs(hidden - ref["hidden"]).max() < TOL


def test_rows_in_any_order(tiny):
    """The batch's rows shuffled (sequences interleaved): each row still attends within its own
    sequence (grouped by seq id), positions index the table."""
    model, _, ref = tiny
    seqs = split(ref["tokens"], ref["lengths"])
    positions = np.concatenate([np.arange(len(s)) for s in seqs]).astype(np.int32)
    seq_ids = np.repeat(np.arange(len(seqs)), ref["lengths"]).astype(np.int32)
    order = np.random.default_rng(0).permutation(len(positions))
    batch = Batch(ref["tokens"][order], positions[order], seq_ids[order],
                  np.ones(len(order), bool))
    assert np.abs(model.forward(batch) - ref["hidden"][order]).max() < TOL


def test_mean_pooling_as_sentence_transformers(tiny):
    """The GGUF says pooling mean (the converter read 1_Pooling); vectors are the mean over every
    token, [CLS] and [SEP] included, as sentence-transformers' Pooling computes it."""
    model, _, ref = tiny
    emb = Embedder(model)
    assert emb.pooling == POOLING["mean"]
    seqs = [s.tolist() for s in split(ref["tokens"], ref["lengths"])]
    want = [h.mean(axis=0) for h in split(ref["hidden"], ref["lengths"])]
    got = emb.embed(seqs)
    assert all(np.abs(g - w).max() < TOL for g, w in zip(got, want))


@pytest.mark.parametrize("pooling", ["cls", "last", "none"])
def test_other_poolings(tiny, pooling):
    model, _, ref = tiny
    seqs = [s.tolist() for s in split(ref["tokens"], ref["lengths"])]
    rows = split(ref["hidden"], ref["lengths"])
    got = Embedder(model, pooling).embed(seqs)
    pick = {"cls": lambda h: h[0], "last": lambda h: h[-1], "none": lambda h: h}[pooling]
    for g, h in zip(got, rows):
        assert g.shape == pick(h).shape and np.abs(g - pick(h)).max() < TOL


def test_small_ubatches_give_the_same_vectors(tiny):
    """Packed two sequences at a time (n_seq_max) or by tokens, results do not change."""
    model, _, ref = tiny
    seqs = [s.tolist() for s in split(ref["tokens"], ref["lengths"])]
    whole = Embedder(model).embed(seqs)
    for emb in (Embedder(model, n_seq_max=2), Embedder(model, n_ubatch=int(ref["lengths"].max()))):
        assert all(np.abs(a - b).max() < 1e-5 for a, b in zip(emb.embed(seqs), whole))


def test_each_sequence_batched_as_alone(tiny):
    """Long and short sequences in one forward (attention buckets them by length) give each
    sequence's hidden states as a forward of it alone."""
    model, _, ref = tiny
    seqs = [s.tolist() for s in split(ref["tokens"], ref["lengths"])]
    seqs = [seqs[1] * 4, seqs[2], seqs[0], seqs[2], seqs[1] * 3]  # 4 x 12 + ... tokens
    together = Embedder(model, "none").embed(seqs)
    for s, t in zip(seqs, together):
        assert np.abs(Embedder(model, "none").embed([s])[0] - t).max() < 1e-5


def test_pack_limits():
    assert pack([3, 3, 3, 1], 6, 8) == [[0, 1], [2, 3]]
    assert pack([1, 1, 1], 100, 2) == [[0, 1], [2]]


def test_too_long_and_empty_inputs_are_refused(tiny):
    model, _, _ = tiny
    emb = Embedder(model, n_ubatch=8)
    with pytest.raises(ValueError, match="too large to process"):
        emb.embed([[2] * 9])
    with pytest.raises(ValueError, match="cannot be empty"):
        emb.embed([[]])


def test_rank_pooling_matches_transformers(tiny_rank):
    """cls.output on the [CLS] hidden state (what llama.cpp's converter keeps of the
    classifier), pair tokens [CLS] query [SEP] doc [SEP] from transformers' tokenizer."""
    model, ref = tiny_rank
    seqs = [s.tolist() for s in split(ref["tokens"], ref["lengths"])]
    scores = [float(v[0]) for v in Embedder(model, "rank").embed(seqs)]
    assert np.allclose(scores, ref["scores"], atol=TOL)


def test_rank_needs_a_classifier(tiny):
    with pytest.raises(ValueError, match="classifier"):
        Embedder(tiny[0], "rank")


def test_normalize_is_common_embd_normalize():
    v = np.array([3.0, -4.0], np.float32)
    assert np.allclose(normalize(v, 2), [0.6, -0.8])
    assert np.allclose(normalize(v, 1), [3 / 7, -4 / 7])
    assert np.allclose(normalize(v, 0), v * 32760 / 4)
    assert np.allclose(normalize(v, -1), v)
    assert np.allclose(normalize(v, 3), v / np.cbrt(27 + 64))
    assert not normalize(np.zeros(2, np.float32), 2).any()


# -- the real all-MiniLM-L6-v2 -------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    from tests.reference.minilm import minilm

    return minilm()


SENTENCES = [
    "A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
    "A man is riding a horse.", "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.", "A monkey is playing drums.",
    "Someone in a gorilla costume is playing a set of drums.", "Hello, world!",
    "naïve café résumé", "東京は日本の首都です", "",
    "Semantic search ranks documents by the cosine of their vectors. " * 8,
]
# not here: a word of over 100 characters, which transformers' WordPiece makes one [UNK] and
# llama.cpp's WPM tokenizer (so ours) splits into pieces


@pytest.mark.slow
def test_minilm_matches_sentence_transformers(minilm):
    """Cosine >= 0.9999 for every sentence (mean pooling over f16 weights)."""
    st = pytest.importorskip("sentence_transformers")
    ref = st.SentenceTransformer(str(minilm.checkpoint), device="cpu").encode(SENTENCES)
    g = open_gguf(minilm.gguf)
    tok = Tokenizer.from_gguf(g)
    got = Embedder(load_model(g)).embed([tok.tokenize(s) for s in SENTENCES])
    cos = [float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(got, ref)]
    assert min(cos) >= 0.9999, cos


@pytest.mark.llamacpp
def test_minilm_matches_llama_cpp(minilm):
    """llama-cpp-python's Llama(embedding=True).embed and ours on the same file: the same
    token counts, vectors within cosine 0.99999 and 1e-3 relative length."""
    from tests.reference.llamacpp import available, load_llama

    if not available():
        pytest.skip("llama-cpp-python is not installed")
    from llamacpy import Llama

    ref, n_ref = load_llama(minilm.gguf, embedding=True).embed(SENTENCES, return_count=True)
    ours, n = Llama(str(minilm.gguf), embedding=True, verbose=False).embed(SENTENCES,
                                                                          return_count=True)
    assert n == n_ref
    for a, b in zip(map(np.array, ours), map(np.array, ref)):
        assert a @ b / np.linalg.norm(a) / np.linalg.norm(b) > 0.99999
        assert abs(np.linalg.norm(a) / np.linalg.norm(b) - 1) < 1e-3
