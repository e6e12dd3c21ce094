"""The ingress deployment: llama-server's HTTP contract in front of the model replicas.

Every route of llama-server (OpenAI, native, Ollama) is forwarded whole to a model replica,
which answers it with llama-server's own app, so validation, templates, streaming and error
shapes are the server's; the ingress only picks the model (the body's "model", or ?model= on
a GET, as router mode does; with -m, the one model), checks the API key (the server's Gate),
and relays the answer as it comes. What needs every replica it answers itself: /health,
/models, /metrics (summed over the replicas), /props and Ollama's /api/tags and /api/ps.
A replica that dies mid-request fails that request with a 503 (or an error event in a stream
already started); Serve starts a new replica for the next ones.
"""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

import ray
from ray import serve
from starlette._utils import get_route_path
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..server import app as single
from ..server import ollama, ollama_router, router
from ..server.app import Gate, error, read_body, sse
from ..server.embeddings import ROUTES as EMBEDDINGS
from ..server.ollama import OllamaError, ollama_errors
from ..server.ollama_http import OLLAMA_PREFIX, OllamaGuard, ollama_error
from ..server.params import parse_body
from ..server.router_models import RouterError
from .asgi import HOP_HEADERS
from .board import BEAT, board
from .config import INGRESS_MAX_ONGOING, SERVE_ENV, AppConfig
from .prometheus import aggregate

SCRAPE_WAIT = 2 * BEAT + 1.0  # seconds /metrics waits for every live replica's post


def ingress_of(request: Request) -> Ingress:
    return request.app.state.ingress


def is_ollama(request: Request) -> bool:
    return request.url.path.startswith(OLLAMA_PREFIX)


def model_for(request: Request, name) -> str:
    """The served model a request names (an id, an alias, either with Ollama's :latest)."""
    ing = ingress_of(request)
    if ing.cfg.single:
        return ing.cfg.default_model()
    if not isinstance(name, str) or not name:
        raise OllamaError("model is required") if is_ollama(request) else \
            RouterError("model name is missing from the request")
    found = ing.names.get(name) or ing.names.get(name.removesuffix(":latest"))
    if found is None:
        raise OllamaError(f"model '{name}' not found", 404) if is_ollama(request) else \
            RouterError(f"model '{name}' not found")
    return found


def failed(request: Request, message: str) -> Response:
    if is_ollama(request):
        return ollama_error(message, 503)
    return error(message, "unavailable_error")


async def forward(request: Request, name: str, body: bytes) -> Response:
    """Send the request to a replica holding `name` (Serve loads it on one if none does) and
    stream its answer back; the client leaving cancels the replica's generation."""
    req = {"method": request.method, "path": request.url.path, "query": request.url.query,
           "body": body, "client": list(request.client or ("127.0.0.1", 0)),
           "headers": [(k, v) for k, v in request.headers.items() if k not in HOP_HEADERS]}
    handle = ingress_of(request).models.options(stream=True, multiplexed_model_id=name)
    parts = handle.forward.remote(req)
    try:
        head = await parts.__anext__()
    except (ray.exceptions.RayError, StopAsyncIteration) as e:
        parts.cancel()
        return failed(request, f"the replica serving model '{name}' failed: {reason(e)}")
    except asyncio.CancelledError:  # the client left before the answer started
        parts.cancel()
        raise
    kind = dict(head["headers"]).get("content-type", "")
    return StreamingResponse(relay(parts, name, kind), status_code=head["status"],
                             headers=dict(head["headers"]))


async def relay(parts, name: str, kind: str):
    """The replica's body; if the replica dies mid-answer, a stream ends with an error event
    in its own format (SSE or Ollama's NDJSON) instead of stopping without a word."""
    try:
        async for chunk in parts:
            yield chunk
    except ray.exceptions.RayError as e:
        message = f"the replica serving model '{name}' failed: {reason(e)}"
        if kind.startswith("text/event-stream"):
            yield sse({"error": {"code": 503, "message": message, "type": "unavailable_error"}})
        elif kind.startswith("application/x-ndjson"):
            yield json.dumps({"error": message}) + "\n"
    finally:
        parts.cancel()  # a no-op once done; when the client left, stops the generation


def reason(e: BaseException) -> str:
    """What went wrong, in one line: a replica's own exception (a model that fails to load)
    rather than Ray's wrapper around it."""
    cause = getattr(e, "cause", None) if isinstance(e, ray.exceptions.RayTaskError) else None
    e = cause or e
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


async def forward_post(request: Request) -> Response:
    raw = await read_body(request, any_type=is_ollama(request))
    data = parse_body(raw) if not ingress_of(request).cfg.single else {}
    name = model_for(request, data.get("model") or (data.get("name") if is_ollama(request)
                                                     else None))
    return await forward(request, name, raw)


async def forward_get(request: Request) -> Response:
    return await forward(request, model_for(request, request.query_params.get("model")), b"")


# -- the ingress's own answers ------------------------------------------------------------------

async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def list_models(request: Request) -> Response:
    """With -m, the replica's own list (llama-server's); else every model, as router mode lists
    them, each "loaded" while a replica holds it."""
    ing = ingress_of(request)
    if ing.cfg.single:
        return await forward_get(request)
    holders: dict[str, int] = {}
    for models in (await ing.board.live.remote()).values():
        for m in models:
            holders[m] = holders.get(m, 0) + 1
    now = int(time.time())
    data = [{"id": name, "aliases": spec.aliases, "tags": [], "object": "model",
             "owned_by": "llamacpp", "created": now, "source": spec.source,
             "status": {"value": "loaded" if holders.get(name) else "unloaded",
                        "replicas": holders.get(name, 0)}}
            for name, spec in ing.cfg.models.items()]
    return JSONResponse({"data": data, "object": "list"})


async def metrics(request: Request) -> Response:
    """Every replica's /metrics, summed (?model=NAME: that model's replicas only); without
    --metrics, a replica's own refusal."""
    ing = ingress_of(request)
    if not ing.cfg.metrics:
        return await forward_get(request)
    model = request.query_params.get("model")
    if model is not None:
        model = model_for(request, model)
    epoch, expected = await ing.board.scrape.remote()
    deadline = time.monotonic() + SCRAPE_WAIT
    while True:
        got = await ing.board.collected.remote(epoch)
        if all(key in got for key in expected) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    texts = [text for _, texts in sorted(got.items()) for name, text in sorted(texts.items())
             if model in (None, name)]
    return PlainTextResponse(aggregate(texts), media_type="text/plain; version=0.0.4")


async def props(request: Request) -> Response:
    """A model's /props (?model=, or the one model); without ?model= several models answer
    as llama.cpp's router does."""
    ing = ingress_of(request)
    if ing.cfg.single or request.query_params.get("model"):
        return await forward_get(request)
    return await router.props(request)


async def tags(request: Request) -> Response:
    """Ollama's model list: every served model's file (with -m, the replica's own)."""
    ing = ingress_of(request)
    if ing.cfg.single:
        return await forward_get(request)
    entries = []
    for name, spec in ing.cfg.models.items():
        try:
            entries.append(await ollama_router.file_entry(SimpleNamespace(spec=spec, name=name)))
        except (OSError, ValueError, KeyError):
            continue  # not a readable GGUF file: no model to list (a request for it says why)
    return JSONResponse({"models": entries})


async def ps(request: Request) -> Response:
    """The loaded models, each as a replica holding it describes itself."""
    ing = ingress_of(request)
    if ing.cfg.single:
        return await forward_get(request)
    loaded = sorted({m for models in (await ing.board.live.remote()).values() for m in models})
    out = []
    for name in loaded:
        answer = await forward(request, name, b"")
        if not isinstance(answer, StreamingResponse) or answer.status_code != 200:
            continue  # unloading, or its replica just died: not a loaded model
        body = b"".join([chunk async for chunk in answer.body_iterator])
        for entry in json.loads(body).get("models", [])[:1]:
            out.append({**entry, "name": name, "model": name})
    return JSONResponse({"models": out})


async def pull(request: Request) -> Response:
    raise OllamaError("pulling through serve-ray is not supported: run `llamacpy pull NAME` "
                      "on every node (the model must be on each node that may load it)")


OWN = [("/health", health, ["GET"]), ("/v1/health", health, ["GET"]),
       ("/models", list_models, ["GET"]), ("/v1/models", list_models, ["GET"]),
       ("/metrics", metrics, ["GET"]), ("/props", props, ["GET"]),
       ("/", single.index, ["GET"])]
OLLAMA_OWN = [("/api/tags", tags, ["GET", "HEAD"]), ("/api/ps", ps, ["GET"]),
              ("/api/version", ollama.version, ["GET"]), ("/api/pull", pull, ["POST"])]


def routes() -> list[Route]:
    """The ingress's own routes, then every other route of llama-server, forwarded."""
    own = {p for p, _, _ in OWN + OLLAMA_OWN}
    out = [Route(p, router.router_errors(fn), methods=m) for p, fn, m in OWN]
    out += [Route(p, ollama_errors(fn), methods=m) for p, fn, m in OLLAMA_OWN]
    for path, _, methods in single.ROUTES + EMBEDDINGS + ollama.ROUTES:
        if path in own:
            continue
        fn = forward_post if "POST" in methods else forward_get
        wrap = ollama_errors if path.startswith(OLLAMA_PREFIX) else router.router_errors
        out.append(Route(path, wrap(fn), methods=methods))
    return out


def build_ingress_app(ing: Ingress):
    """The Starlette app, behind the server's API-key Gate and Ollama's guard."""
    cfg = ing.cfg
    app = Starlette(routes=routes(), exception_handlers={
        404: single.not_found, 405: single.method_not_allowed, Exception: single.internal_error})
    app.state.ingress, app.state.static = ing, (cfg.webui, cfg.static_path)
    # router.props reads these: the router's own /props document
    app.state.models = SimpleNamespace(cfg=SimpleNamespace(
        models_max=cfg.models_max, autoload=True, sleep_idle_seconds=-1))
    app.state.webui, app.state.api_key = cfg.webui, bool(cfg.api_keys)
    keys = set(cfg.api_keys)
    gate = Gate if cfg.single else router.RouterGate  # several models: only /health is public
    guarded = gate(app, SimpleNamespace(api_keys=keys, ready=True))
    ollama_routes = [(p, None, m) for p, _, m in ollama.ROUTES]
    return without_prefix(OllamaGuard(guarded, keys, cfg.host, routes=ollama_routes,
                                      **({} if cfg.single else {"public": set()})))


def without_prefix(app):
    """Under a route_prefix (`serve run` with several applications) the routes, the key
    check and the replicas see llama-server's own paths."""
    async def wrapped(scope, receive, send):
        if scope["type"] == "http" and scope.get("root_path"):
            scope = {**scope, "path": get_route_path(scope) or "/", "root_path": ""}
        await app(scope, receive, send)
    return wrapped


@serve.deployment(name="Ingress", max_ongoing_requests=INGRESS_MAX_ONGOING,
                  ray_actor_options={"num_cpus": 0, "runtime_env": {"env_vars": SERVE_ENV}})
@serve.ingress()
class Ingress:
    """The HTTP front: llama-server's routes over the model deployment's replicas."""

    def __init__(self, models, cfg: AppConfig):
        self.models, self.cfg = models, cfg
        self.names = {name: name for name in cfg.models}
        self.names.update({a: name for name, spec in cfg.models.items() for a in spec.aliases})
        self.board = board(serve.get_replica_context().app_name)

    def __serve_build_asgi_app__(self):
        return build_ingress_app(self)
