"""llama-server's embedding routes: POST /v1/embeddings (OpenAI's shape), /embedding and
/embeddings (llama.cpp's native shape), /rerank and /v1/rerank (Jina's shape; TEI's with
`texts`). Requests and messages follow server-context.cpp (handle_embeddings_impl,
post_rerank) and server-common.cpp (format_embeddings_response_oaicompat,
format_response_rerank, format_prompt_rerank); the vectors come from the embedding worker
(engine/embedding.py), which batches every queued request's inputs together.
"""

from __future__ import annotations

import asyncio
import base64

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..engine.embedding import POOLING, EmbeddingError, normalize
from ..tokenizer import NULL
from .app import cors, error, longest_piece, read_json
from .params import RequestError
from .state import ServerState

NO_EMBEDDINGS = "This server does not support embeddings. Start it with `--embeddings`"
NO_RERANK = "This server does not support reranking. Start it with `--reranking`"
NOT_OAI = "Pooling type 'none' is not OAI compatible. Please use a different pooling type"
BAD_FORMAT = "The format to return the embeddings in. Can be either float or base64"


def not_supported(message: str) -> JSONResponse:
    """llama.cpp answers a disabled endpoint with 501 not_supported_error."""
    return error(message, "not_supported_error", 501)


async def embeddings_oai(request: Request) -> Response:
    """POST /v1/embeddings: {"data": [{"object": "embedding", "index", "embedding"}], ...}."""
    return await handle_embeddings(request, oai=True)


async def embeddings_native(request: Request) -> Response:
    """POST /embedding, /embeddings: [{"index", "embedding": [[...]]}] (one row per token with
    pooling none, else the one pooled vector)."""
    return await handle_embeddings(request, oai=False)


async def handle_embeddings(request: Request, oai: bool) -> Response:
    state: ServerState = request.app.state.server
    if state.embeddings is None:
        return not_supported(NO_EMBEDDINGS)
    pooling = state.embeddings.embedder.pooling
    if oai and pooling == POOLING["none"]:
        raise RequestError(NOT_OAI)
    data = await read_json(request)
    if "input" in data:
        prompt = data["input"]
    elif "content" in data:
        prompt, oai = data["content"], False  # "content" is not OpenAI's field
    else:
        raise RequestError('"input" or "content" must be provided')
    use_base64 = encoding_format(data)
    embd_normalize = data.get("embd_normalize", state.cfg.embd_normalize)
    if not isinstance(embd_normalize, int) or isinstance(embd_normalize, bool):
        raise RequestError("'embd_normalize' must be an integer")
    dims = dimensions(data, state.embeddings.embedder.n_embd, pooling)
    seqs = await asyncio.to_thread(tokenize_inputs, state, prompt)
    vectors = await embed(state, seqs)
    if pooling != POOLING["none"]:
        vectors = [normalize(v[:dims], embd_normalize) for v in vectors]
    if not oai:
        rows = [v.reshape(-1, v.shape[-1]).tolist() for v in vectors]
        return JSONResponse([{"index": i, "embedding": r} for i, r in enumerate(rows)],
                            headers=cors())
    return JSONResponse(oai_body(data, state.alias, vectors, seqs, use_base64), headers=cors())


def dimensions(data: dict, n_embd: int, pooling: int) -> int | None:
    """OpenAI's `dimensions`: the first N values of each vector, normalised after the cut (as
    OpenAI shortens its embeddings); llama.cpp has no such field."""
    dims = data.get("dimensions")
    if dims is None:
        return None
    if not isinstance(dims, int) or isinstance(dims, bool) or not 1 <= dims <= n_embd:
        raise RequestError(f"'dimensions' must be an integer from 1 to {n_embd}")
    if pooling == POOLING["none"]:
        raise RequestError("'dimensions' needs pooled embeddings (not --pooling none)",
                           "not_supported_error")
    return dims


def encoding_format(data: dict) -> bool:
    """True for "base64", False for "float" (the default); anything else is a 400."""
    fmt = data.get("encoding_format", "float")
    if fmt not in ("float", "base64"):
        raise RequestError(BAD_FORMAT)
    return fmt == "base64"


def oai_body(data: dict, alias: str, vectors: list[np.ndarray], seqs: list[list[int]],
             use_base64: bool) -> dict:
    """format_embeddings_response_oaicompat: usage counts every token, [CLS] and [SEP] too;
    base64 is the little-endian float32 bytes."""
    items = []
    for i, v in enumerate(vectors):
        if use_base64:
            raw = base64.b64encode(np.asarray(v, "<f4").tobytes()).decode("ascii")
            items.append({"embedding": raw, "index": i, "object": "embedding",
                          "encoding_format": "base64"})
        else:
            items.append({"embedding": v.tolist(), "index": i, "object": "embedding"})
    n = sum(map(len, seqs))
    model = data.get("model") if isinstance(data.get("model"), str) else alias
    return {"model": model, "object": "list",
            "usage": {"prompt_tokens": n, "total_tokens": n}, "data": items}


def tokenize_inputs(state: ServerState, prompt) -> list[list[int]]:
    """tokenize_input_prompts' shapes: a string, a token list, or a list of strings / token
    lists / mixed lists, each one input (special tokens added and parsed)."""
    if isinstance(prompt, list) and prompt and not all(isinstance(p, int) and
                                                       not isinstance(p, bool) for p in prompt):
        parts = prompt
    else:
        parts = [prompt]
    if not parts or prompt == []:
        raise RequestError('"input" must not be empty')
    limit = state.embeddings.embedder.n_ubatch
    seqs = []
    for p in parts:
        if isinstance(p, dict):
            raise RequestError("multimodal content in embedding inputs is not supported",
                               "not_supported_error")
        if not isinstance(p, (str, list)) or isinstance(p, list) and not all(
                isinstance(t, (int, str)) and not isinstance(t, bool) for t in p):
            raise RequestError("each input must be a string, a list of token ids, or a list "
                               "of token ids and strings")
        too_long(state, p, limit)
        seqs.append(state.prompt_tokens(p))
    return seqs


def too_long(state: ServerState, part, limit: int) -> None:
    """Refuse a text that cannot fit one ubatch before tokenizing it (megabytes take long):
    llama.cpp's message with a lower bound on its tokens."""
    texts = [part] if isinstance(part, str) else [t for t in part if isinstance(t, str)]
    n_chars = sum(map(len, texts))
    if n_chars <= limit:
        return
    at_least = n_chars // (2 * (longest_piece(state.tokenizer) + 1))
    if at_least > limit:
        raise RequestError(f"input ({at_least} tokens) is too large to process. increase the "
                           f"physical batch size (current batch size: {limit})",
                           "server_error", 500)


async def embed(state: ServerState, seqs: list[list[int]]) -> list[np.ndarray]:
    """The raw vectors of `seqs` from the worker; llama.cpp's refusals keep its types."""
    try:
        future = state.embeddings.submit(seqs)
    except EmbeddingError as e:  # llama.cpp sends a too-long input as a server error
        raise RequestError(str(e), e.kind, 500 if e.kind == "server_error" else 400) from None
    return await asyncio.wrap_future(future)


async def embed_texts(state: ServerState, texts: list[str],
                      embd_normalize: int = 2) -> tuple[list[list[float]], int]:
    """Pooled, normalised vectors of `texts` and the tokens they took (for other front ends,
    e.g. Ollama's /api/embed)."""
    if state.embeddings is None:
        raise RequestError(NO_EMBEDDINGS, "not_supported_error", 501)
    seqs = await asyncio.to_thread(tokenize_inputs, state, list(texts))
    vectors = await embed(state, seqs)
    if state.embeddings.embedder.pooling == POOLING["none"]:
        raise RequestError(NOT_OAI)
    return [normalize(v, embd_normalize).tolist() for v in vectors], sum(map(len, seqs))


# -- rerank ---------------------------------------------------------------------------------

async def rerank(request: Request) -> Response:
    """POST /rerank, /v1/rerank: {"query", "documents" | "texts", "top_n"} -> results sorted
    by relevance_score (TEI's `texts`: a bare list with `score`)."""
    state: ServerState = request.app.state.server
    if state.embeddings is None or state.embeddings.embedder.pooling != POOLING["rank"]:
        return not_supported(NO_RERANK)
    data = await read_json(request)
    tei = "texts" in data
    query = data.get("query")
    if "query" not in data:
        raise RequestError('"query" must be provided')
    if not isinstance(query, str):
        raise RequestError('"query" must be a string')
    docs = data.get("documents", data.get("texts"))
    if not isinstance(docs, list) or not docs or not all(isinstance(d, str) for d in docs):
        raise RequestError('"documents" must be a non-empty string array')
    top_n = data.get("top_n", len(docs))
    if not isinstance(top_n, int) or isinstance(top_n, bool):
        raise RequestError("'top_n' must be an integer")
    seqs = await asyncio.to_thread(lambda: [rerank_tokens(state, query, d) for d in docs])
    scores = [float(v[0]) for v in await embed(state, seqs)]
    label = "score" if tei else "relevance_score"
    results = [{"index": i, label: s} for i, s in enumerate(scores)]
    if tei and data.get("return_text") is True:
        for r in results:
            r["text"] = docs[r["index"]]
    results = sorted(results, key=lambda r: -r[label])[:max(top_n, 0)]
    if tei:
        return JSONResponse(results, headers=cors())
    n = sum(map(len, seqs))
    model = data.get("model") if isinstance(data.get("model"), str) else state.alias
    return JSONResponse({"model": model, "object": "list", "usage": {
        "prompt_tokens": n, "total_tokens": n}, "results": results}, headers=cors())


def rerank_tokens(state: ServerState, query: str, doc: str) -> list[int]:
    """format_prompt_rerank: the model's "rerank" chat template if it has one, else
    [BOS] query [EOS] [SEP] doc [EOS] as the vocabulary adds them (EOS falls back to SEP)."""
    tok = state.tokenizer
    template = state.gguf.get("tokenizer.chat_template.rerank")
    if isinstance(template, str):
        text = template.replace("{query}", query).replace("{document}", doc)
        return tok.tokenize(text, add_special=False, parse_special=True)
    q = tok.tokenize(query, add_special=False, parse_special=False)
    d = tok.tokenize(doc, add_special=False, parse_special=False)
    eos = tok.eos if tok.eos != NULL else tok.sep
    v = tok.vocab
    return ([tok.bos] if v.add_bos else []) + q + ([eos] if v.add_eos else []) + \
        ([tok.sep] if v.add_sep else []) + d + ([eos] if v.add_eos else [])


ROUTES = [
    ("/v1/embeddings", embeddings_oai, ["POST"]),
    ("/embedding", embeddings_native, ["POST"]), ("/embeddings", embeddings_native, ["POST"]),
    ("/rerank", rerank, ["POST"]), ("/v1/rerank", rerank, ["POST"]),
    ("/reranking", rerank, ["POST"]), ("/v1/reranking", rerank, ["POST"]),
]
