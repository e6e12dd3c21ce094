"""/api/embed and /api/embeddings on an embedding server (--embeddings, issue 14) with the tiny
random BERT the embedding tests build: the official client's vectors equal /v1/embeddings'
(L2-normalized, as Ollama's), `dimensions` truncates and normalizes again, /api/show says
"embedding"."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import ollama
import pytest

from tests.server.conftest import start_server, stop_server

BERT = Path(__file__).resolve().parents[1] / "golden" / "tiny_bert" / "bert.gguf"
pytestmark = pytest.mark.skipif(not BERT.exists(), reason="the tiny BERT of issue 14 is absent")
TEXTS = ["hello world", "a lighthouse by the sea"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    pytest.importorskip("llamacpy.server.embeddings")
    log = tmp_path_factory.mktemp("ollama-embed") / "server.log"
    srv = start_server(["-m", str(BERT), "--embeddings", "-t", "1"], str(log))
    yield srv
    stop_server(srv)


def test_embed_equals_the_openai_route(server):
    client = ollama.Client(host=server.url)
    r = client.embed(model="nomic-embed-text", input=TEXTS)
    v1 = httpx.post(server.url + "/v1/embeddings", json={"input": TEXTS}).json()
    reference = [d["embedding"] for d in v1["data"]]
    np.testing.assert_allclose(r.embeddings, reference, rtol=0, atol=1e-7)
    assert np.allclose(np.linalg.norm(r.embeddings, axis=1), 1)
    assert r.prompt_eval_count == v1["usage"]["prompt_tokens"] and r.total_duration > 0
    one = client.embeddings(model="x", prompt=TEXTS[0])
    np.testing.assert_allclose(one.embedding, reference[0], rtol=0, atol=1e-7)
    assert client.embed(model="x", input=[]).embeddings == []


def test_dimensions_truncate_and_normalize(server):
    r = httpx.post(server.url + "/api/embed", json={"model": "x", "input": TEXTS[1],
                                                    "dimensions": 8}).json()
    full = httpx.post(server.url + "/v1/embeddings", json={"input": TEXTS[1]}).json()
    head = np.array(full["data"][0]["embedding"][:8])
    np.testing.assert_allclose(r["embeddings"][0], head / np.linalg.norm(head), atol=1e-7)


def test_show_says_embedding(server):
    assert ollama.Client(host=server.url).show("x").capabilities == ["embedding"]
