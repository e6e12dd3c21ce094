"""llama-server's embedding and rerank routes against transformers' outputs (the tiny BERT
golden data), sentence-transformers and the official openai client (all-MiniLM-L6-v2), and
llama.cpp's shapes and messages (tools/server/server-context.cpp, server-common.cpp)."""

from __future__ import annotations

import base64
import concurrent.futures
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.server.conftest import start_server, stop_server

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "tiny_bert"
TOL = 2e-3  # ggml_gelu's tanh form against transformers' erf GELU (tests/models/test_bert.py)
NO_EMBEDDINGS = {"error": {"code": 501, "message": "This server does not support embeddings. "
                           "Start it with `--embeddings`", "type": "not_supported_error"}}


def reference():
    """(texts, their token ids, transformers' mean-pooled vectors) of the tiny BERT."""
    ref = np.load(GOLDEN / "bert.npz")
    cut = np.cumsum(ref["lengths"])[:-1]
    ids = [s.tolist() for s in np.split(ref["tokens"], cut)]
    means = [h.mean(axis=0) for h in np.split(ref["hidden"], cut)]
    return [str(t) for t in ref["texts"]], ids, means


def unit(v) -> np.ndarray:
    v = np.asarray(v, np.float64)
    return v / np.linalg.norm(v)


def serve(tmp_path_factory, *args: str):
    log = tmp_path_factory.mktemp("srv") / "server.log"
    return start_server([*args, "-t", "1"], str(log))


@pytest.fixture(scope="module")
def bert_server(tmp_path_factory):
    server = serve(tmp_path_factory, "-m", str(GOLDEN / "bert.gguf"), "--embedding")
    yield server
    stop_server(server)


def post(server, path: str, body: dict) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, timeout=60)


def test_v1_embeddings_match_transformers(bert_server):
    """OpenAI's shape; each vector is transformers' mean pooling, L2-normalised (the server's
    default --embd-normalize 2); usage counts [CLS] and [SEP]."""
    texts, ids, means = reference()
    r = post(bert_server, "/v1/embeddings", {"input": texts, "model": "mine"})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and body["model"] == "mine"
    n = sum(map(len, ids))
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}
    assert [d["index"] for d in body["data"]] == list(range(len(texts)))
    for d, want in zip(body["data"], means):
        assert d["object"] == "embedding"
        assert np.abs(np.array(d["embedding"]) - unit(want)).max() < TOL


def test_inputs_as_token_ids_and_raw_vectors(bert_server):
    """A token list is one input, a list of them several; embd_normalize -1 gives the raw mean."""
    texts, ids, means = reference()
    one = post(bert_server, "/v1/embeddings", {"input": ids[0], "embd_normalize": -1}).json()
    assert len(one["data"]) == 1
    assert np.abs(np.array(one["data"][0]["embedding"]) - means[0]).max() < TOL
    many = post(bert_server, "/v1/embeddings", {"input": ids[:3]}).json()
    by_text = post(bert_server, "/v1/embeddings", {"input": texts[:3]}).json()
    assert [d["embedding"] for d in many["data"]] == [d["embedding"] for d in by_text["data"]]


def test_base64_is_little_endian_float32(bert_server):
    texts, _, _ = reference()
    floats = post(bert_server, "/v1/embeddings", {"input": texts[1]}).json()["data"][0]
    b64 = post(bert_server, "/v1/embeddings", {"input": texts[1],
                                               "encoding_format": "base64"}).json()["data"][0]
    assert b64["encoding_format"] == "base64"
    decoded = np.frombuffer(base64.b64decode(b64["embedding"]), "<f4")
    assert decoded.tolist() == np.float32(floats["embedding"]).tolist()


def test_dimensions_cut_then_normalise(bert_server):
    """OpenAI's `dimensions`: the first N values of the pooled vector, normalised again."""
    texts, _, means = reference()
    d = post(bert_server, "/v1/embeddings", {"input": texts[0], "dimensions": 8}).json()
    assert np.abs(np.array(d["data"][0]["embedding"]) - unit(means[0][:8])).max() < TOL
    for bad in (0, 33, "8", True):
        assert post(bert_server, "/v1/embeddings", {"input": "a", "dimensions": bad}
                    ).status_code == 400


def test_native_embedding_route(bert_server):
    """/embedding and /embeddings: [{"index", "embedding": [[...]]}], also for `content`."""
    texts, _, means = reference()
    for path in ("/embedding", "/embeddings"):
        body = post(bert_server, path, {"content": texts[0]}).json()
        assert len(body) == 1 and body[0]["index"] == 0 and len(body[0]["embedding"]) == 1
        assert np.abs(np.array(body[0]["embedding"][0]) - unit(means[0])).max() < TOL


def test_concurrent_requests_get_their_own_vectors(bert_server):
    """Requests arriving together share the worker's batches; each still gets its vectors."""
    texts, _, means = reference()
    with concurrent.futures.ThreadPoolExecutor(len(texts)) as pool:
        answers = list(pool.map(lambda t: post(bert_server, "/v1/embeddings", {"input": t}),
                                texts))
    for r, want in zip(answers, means):
        assert np.abs(np.array(r.json()["data"][0]["embedding"]) - unit(want)).max() < TOL


@pytest.mark.parametrize("body, status, message", [
    ({}, 400, '"input" or "content" must be provided'),
    ({"input": []}, 400, '"input" must not be empty'),
    ({"input": "a", "encoding_format": "hex"}, 400, "Can be either float or base64"),
    ({"input": [2, 99999]}, 400, "invalid token id"),
    ({"input": "hello " * 70}, 500, "is larger than the max context size (64 tokens)"),
    ({"input": "hello " * 5000}, 500, "is too large to process"),
    ({"input": [{"content": [{"type": "image_url"}]}]}, 400, "not supported"),
])
def test_bad_inputs(bert_server, body, status, message):
    r = post(bert_server, "/v1/embeddings", body)
    assert r.status_code == status and message in r.json()["error"]["message"]
    assert post(bert_server, "/v1/embeddings", {"input": "a"}).status_code == 200


def test_completion_routes_refuse_in_embedding_mode(bert_server):
    for path, body in (("/v1/completions", {"prompt": "a"}), ("/completion", {"prompt": "a"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}]})):
        r = post(bert_server, path, body)
        assert r.status_code == 500
        assert r.json()["error"] == {"code": 500, "type": "server_error", "message":
                                     "the current context does not support logits computation."
                                     " skipping"}


def test_rerank_needs_rank_pooling(bert_server):
    r = post(bert_server, "/rerank", {"query": "a", "documents": ["b"]})
    assert r.status_code == 501
    assert r.json()["error"]["message"] == ("This server does not support reranking. Start it "
                                            "with `--reranking`")


def test_pooling_none_gives_token_vectors(tmp_path_factory):
    """--pooling none: /embedding answers a vector per token (not normalised), /v1/embeddings
    refuses (llama.cpp: not OAI compatible)."""
    texts, ids, _ = reference()
    hidden = np.split(np.load(GOLDEN / "bert.npz")["hidden"], np.cumsum([len(i) for i in ids]))
    server = serve(tmp_path_factory, "-m", str(GOLDEN / "bert.gguf"), "--embedding",
                   "--pooling", "none")
    try:
        body = post(server, "/embedding", {"content": texts[1]}).json()
        assert np.abs(np.array(body[0]["embedding"]) - hidden[1]).max() < TOL
        r = post(server, "/v1/embeddings", {"input": "a"})
        assert r.status_code == 400 and "not OAI compatible" in r.json()["error"]["message"]
    finally:
        stop_server(server)


def test_without_embedding_mode_the_routes_answer_501(tmp_path_factory):
    server = serve(tmp_path_factory, "-m", str(GOLDEN / "bert.gguf"))
    try:
        for path in ("/v1/embeddings", "/embedding", "/embeddings"):
            r = post(server, path, {"input": "a"})
            assert r.status_code == 501 and r.json() == NO_EMBEDDINGS
        assert post(server, "/v1/rerank", {"query": "a", "documents": ["b"]}).status_code == 501
    finally:
        stop_server(server)


def test_rerank_matches_transformers(tmp_path_factory):
    """--rerank: results sorted by relevance_score, which is the classifier on [CLS] of
    [CLS] query [SEP] doc [SEP] (scores recorded with transformers); top_n; TEI's `texts`."""
    ref = np.load(GOLDEN / "bert-rank.npz")
    docs, scores = [str(d) for d in ref["docs"]], ref["scores"]
    server = serve(tmp_path_factory, "-m", str(GOLDEN / "bert-rank.gguf"), "--rerank")
    try:
        body = post(server, "/v1/rerank", {"query": str(ref["query"]), "documents": docs}).json()
        got = body["results"]
        assert [r["index"] for r in got] == list(np.argsort(-scores))
        assert np.allclose([r["relevance_score"] for r in got], np.sort(scores)[::-1], atol=TOL)
        assert body["usage"]["prompt_tokens"] == int(ref["lengths"].sum())
        top = post(server, "/rerank", {"query": str(ref["query"]), "documents": docs,
                                       "top_n": 2}).json()["results"]
        assert top == got[:2]
        tei = post(server, "/rerank", {"query": str(ref["query"]), "texts": docs,
                                       "return_text": True}).json()
        assert [(t["index"], t["text"]) for t in tei] == [(r["index"], docs[r["index"]])
                                                           for r in got]
        for bad in ({"documents": docs}, {"query": 1, "documents": docs},
                    {"query": "a", "documents": []}, {"query": "a", "documents": [1]}):
            assert post(server, "/rerank", bad).status_code == 400
    finally:
        stop_server(server)


# -- all-MiniLM-L6-v2 --------------------------------------------------------------------------

SENTENCES = ["A man is eating food.", "A man is riding a horse.", "A woman is playing violin.",
             "Two men pushed carts through the woods.", "Hello, world!", "naïve café",
             "Semantic search ranks documents by the cosine of their vectors."]


@pytest.mark.slow
def test_minilm_through_the_openai_client_matches_sentence_transformers(tmp_path_factory):
    """The official client's embeddings.create (it asks for base64 and decodes it), and the
    vectors against sentence-transformers on the same checkpoint: cosine >= 0.9999."""
    openai = pytest.importorskip("openai")
    st = pytest.importorskip("sentence_transformers")
    from tests.reference.minilm import minilm

    m = minilm()
    want = st.SentenceTransformer(str(m.checkpoint), device="cpu").encode(SENTENCES)
    server = serve(tmp_path_factory, "-m", str(m.gguf), "--embeddings")
    try:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none")
        res = client.embeddings.create(model="all-minilm", input=SENTENCES)
        assert len(res.data) == len(SENTENCES) and res.usage.prompt_tokens > 2 * len(SENTENCES)
        for d, w in zip(res.data, want):
            assert float(unit(d.embedding) @ unit(w)) >= 0.9999
        # base64 decodes to the floats the float encoding sends for the same batch
        flt = client.embeddings.create(model="all-minilm", input=SENTENCES,
                                       encoding_format="float")
        for d, f in zip(res.data, flt.data):
            assert np.allclose(d.embedding, f.embedding, atol=1e-7)
        # alone, a sentence may take another path: on AVX-512 VNNI the batch's F16 matmuls go
        # through the integer GEMM (weights and activations per block of 32, kernels/vnni.py,
        # ~2e-5 here) where a few tokens take the float few-token kernels
        one = client.embeddings.create(model="all-minilm", input=SENTENCES[0],
                                       encoding_format="float")
        assert np.allclose(one.data[0].embedding, res.data[0].embedding, atol=1e-4)
    finally:
        stop_server(server)


def test_decoder_embeds_with_pooling_last(tmp_path_factory):
    """A Qwen3 model with --pooling last: the vector is the engine's last-token hidden state
    (tests/api/test_embeddings_api.py checks that one against transformers' logits), normalised;
    --pooling rank on it is refused at start with the reason."""
    from llamacpy.engine.embedding import Embedder
    from llamacpy.format import open_gguf
    from llamacpy.models import load_model

    path = GOLDEN.parent / "tiny_hf" / "qwen3.gguf"
    tokens = np.load(GOLDEN.parent / "tiny_hf" / "qwen3.npz")["tokens"].tolist()
    want = unit(Embedder(load_model(open_gguf(path)), "last").embed([tokens])[0])
    server = serve(tmp_path_factory, "-m", str(path), "--embeddings", "--pooling", "last")
    try:
        got = post(server, "/v1/embeddings", {"input": [tokens, tokens[:3]]}).json()["data"]
        assert np.abs(np.array(got[0]["embedding"]) - want).max() < 1e-5
    finally:
        stop_server(server)
    with pytest.raises(RuntimeError, match="rank pooling needs a reranker"):
        serve(tmp_path_factory, "-m", str(path), "--embeddings", "--pooling", "rank")


def test_router_mode_proxies_the_embedding_routes(tmp_path_factory):
    """llama-server --models-dir DIR --embeddings: the child gets --embeddings, the router
    forwards /v1/embeddings to it by `model`, and a GET there is a 405 naming POST."""
    texts, _, means = reference()
    folder = tmp_path_factory.mktemp("models")
    (folder / "bert.gguf").write_bytes((GOLDEN / "bert.gguf").read_bytes())
    server = serve(tmp_path_factory, "--models-dir", str(folder), "--embeddings")
    try:
        r = post(server, "/v1/embeddings", {"model": "bert", "input": texts[0]})
        assert r.status_code == 200
        assert np.abs(np.array(r.json()["data"][0]["embedding"]) - unit(means[0])).max() < TOL
        assert httpx.get(f"{server.url}/v1/embeddings").status_code == 405
    finally:
        stop_server(server)
