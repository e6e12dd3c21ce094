"""The OpenAPI 3.1 document served at GET /openapi.json: every route of llama-server, its request
body (the very schemas params.py validates with, bounds included: token ids within this model's
vocabulary, id_slot within its slots), its response shapes, and llama.cpp's error object.
"""

from __future__ import annotations

from .. import __version__
from .params import Limits, any_of, array, boolean, integer, number, obj, request_fields, string

ERROR_KINDS = ["invalid_request_error", "not_supported_error", "exceed_context_size_error",
               "authentication_error", "permission_error", "not_found_error", "server_error",
               "unavailable_error"]
ERROR = obj({"error": obj({"code": integer(400, 599, "the HTTP status"), "message": string(),
                           "type": string(enum=ERROR_KINDS),
                           "n_prompt_tokens": integer(0), "n_ctx": integer(0)},
                          required=["code", "message", "type"])},
            required=["error"], doc="llama.cpp's error object (format_error_response)")
REF_ERROR = {"$ref": "#/components/schemas/Error"}

TIMINGS = obj({k: number() for k in ("prompt_ms", "prompt_per_token_ms", "prompt_per_second",
                                     "predicted_ms", "predicted_per_token_ms",
                                     "predicted_per_second", "image_ms")}
              | {k: integer(0) for k in ("cache_n", "prompt_n", "predicted_n")})
USAGE = obj({"completion_tokens": integer(0), "prompt_tokens": integer(0),
             "total_tokens": integer(0),
             "prompt_tokens_details": obj({"cached_tokens": integer(0)})},
            required=["completion_tokens", "prompt_tokens", "total_tokens"])
TOKEN_LOGPROB = obj({"id": integer(0), "token": string(), "bytes": array(integer(0, 255)),
                     "logprob": number()}, required=["id", "token", "logprob"])
LOGPROBS = obj({"content": array(obj({**TOKEN_LOGPROB["properties"],
                                      "top_logprobs": array(TOKEN_LOGPROB)},
                                     required=["id", "token", "logprob", "top_logprobs"]))},
               required=["content"])
FINISH = string(enum=["stop", "length"])
OAI_BASE = {"id": string(), "created": integer(0, 2**63 - 1), "model": string(),
            "system_fingerprint": string(), "usage": USAGE, "timings": TIMINGS}
OAI_REQUIRED = ["id", "object", "created", "model", "choices"]

NATIVE = obj({"content": string(), "tokens": array(integer(0)), "id_slot": integer(-1),
              "stop": boolean(), "model": string(), "tokens_predicted": integer(0),
              "tokens_evaluated": integer(0), "generation_settings": obj(),
              "has_new_line": boolean(), "truncated": boolean(),
              "stop_type": string(enum=["none", "eos", "limit", "word"]),
              "stopping_word": string(), "tokens_cached": integer(0), "timings": TIMINGS,
              "completion_probabilities": array(obj())},
             required=["content", "stop", "tokens_predicted", "tokens_evaluated", "stop_type"])
TEXT = obj({**OAI_BASE, "object": string(enum=["text_completion"]),
            "choices": array(obj({"text": string(), "index": integer(0),
                                  "logprobs": any_of(LOGPROBS, {"type": "null"}),
                                  "finish_reason": FINISH},
                                 required=["text", "index", "finish_reason"]))},
           required=OAI_REQUIRED)
CHAT = obj({**OAI_BASE, "object": string(enum=["chat.completion"]),
            "choices": array(obj({"index": integer(0), "finish_reason": FINISH,
                                  "message": obj({"role": string(enum=["assistant"]),
                                                  "content": string(),
                                                  "reasoning_content": string()},
                                                 required=["role", "content"]),
                                  "logprobs": LOGPROBS},
                                 required=["index", "finish_reason", "message"]))},
           required=OAI_REQUIRED)
SSE = {"text/event-stream": {"schema": string(doc="server-sent events: 'data: <chunk JSON>' "
                                                   "lines; OpenAI routes end with 'data: [DONE]'")}}
TOKENIZED = obj({"tokens": array(any_of(
    integer(0), obj({"id": integer(0), "piece": any_of(string(), array(integer(0, 255)))},
                    required=["id", "piece"])))}, required=["tokens"])
MODELS = obj({"object": string(enum=["list"]),
              "data": array(obj({"id": string(), "object": string(), "created": integer(0),
                                 "owned_by": string(), "meta": obj()}, required=["id"])),
              "models": array(obj())}, required=["object", "data"])

# path -> (summary, request route in params.request_fields or None for GET, 200 schema, streams)
POSTS = {
    "/completion": ("llama.cpp's native completion", "completion", NATIVE, True),
    "/completions": ("alias of /completion", "completion", NATIVE, True),
    "/v1/completions": ("OpenAI text completion", "completions", TEXT, True),
    "/v1/chat/completions": ("OpenAI chat completion", "chat", CHAT, True),
    "/chat/completions": ("alias of /v1/chat/completions", "chat", CHAT, True),
    "/tokenize": ("text to token ids", "tokenize", TOKENIZED, False),
    "/detokenize": ("token ids to text", "detokenize", obj({"content": string()},
                                                           required=["content"]), False),
    "/apply-template": ("the chat template applied to messages", "apply-template",
                        obj({"prompt": string()}, required=["prompt"]), False),
}
HEALTH = obj({"status": string(enum=["ok"])}, required=["status"])
GETS = {
    "/health": ("ready: 200; loading, or the engine stopped: 503", HEALTH),
    "/v1/health": ("alias of /health", HEALTH),
    "/v1/models": ("the loaded model", MODELS),
    "/models": ("alias of /v1/models", MODELS),
    "/props": ("server properties and default generation settings", obj()),
    "/slots": ("each slot's state (400 not_supported_error with --no-slots)", array(obj())),
    "/metrics": ("Prometheus metrics (400 not_supported_error without --metrics)", None),
    "/": ("the web chat page", None),
    "/openapi.json": ("this document", obj()),
}


def nullable(schema: dict) -> dict:
    """A top-level field may be null: llama.cpp takes a null as the default."""
    return {"anyOf": [schema, {"type": "null"}]}


def errors(*statuses: int) -> dict:
    return {str(s): {"description": "llama.cpp's error object",
                     "content": {"application/json": {"schema": REF_ERROR}}} for s in statuses}


def post(summary: str, route: str, ok: dict, streams: bool, limits: Limits) -> dict:
    fields, required = request_fields(route, limits)
    body = obj({k: v if k in required else nullable(v) for k, v in fields.items()}, required,
               doc="fields not listed are ignored; a null field takes its default")
    content = {"application/json": {"schema": ok}} | (SSE if streams else {})
    return {"post": {
        "summary": summary,
        "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
        "responses": {"200": {"description": "the result" + (" (stream: true gives server-sent "
                                                              "events)" if streams else ""),
                              "content": content},
                      **errors(400, 401, 404, 413, 500, 503)}}}


def get(summary: str, ok: dict | None) -> dict:
    content = {"application/json": {"schema": ok}} if ok is not None else \
        {"text/plain": {"schema": string()}, "text/html": {"schema": string()}}
    return {"get": {"summary": summary,
                    "responses": {"200": {"description": "the result", "content": content},
                                  **errors(400, 401, 404, 503)}}}


def document(limits: Limits, model: str = "") -> dict:
    """The OpenAPI 3.1 document for a server with these limits (vocabulary, slots, context)."""
    paths = {p: post(s, route, ok, streams, limits) for p, (s, route, ok, streams)
             in POSTS.items()}
    paths |= {p: get(summary, ok) for p, (summary, ok) in GETS.items()}
    for path, item in paths.items():
        for method, op in item.items():
            name = "".join(c if c.isalnum() else "_" for c in path.strip("/")) or "index"
            op["operationId"] = f"{method}_{name}"
    return {
        "openapi": "3.1.0",
        "info": {"title": "llamacpy llama-server", "version": __version__,
                 "description": f"llama.cpp's HTTP API as llamacpy serves it (model: {model}). "
                                "Every refusal is a 4xx whose error.code equals the status; a "
                                "field that asks for something not implemented is 400 "
                                "not_supported_error."},
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer",
                                           "description": "with --api-key: every route but "
                                                          "/health, /models, / and this one"}}},
    }
