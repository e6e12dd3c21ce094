"""llama-server's router mode: started without -m, it serves every model of the cache,
--models-dir and --models-preset, one child llama-server per loaded model (router_models.py),
and proxies each request to the model it names (llama.cpp's server_models_routes).

POST requests route by the body's "model", GET requests (/props, /slots, /metrics) by
?model=; the answer streams back as the child writes it. The router checks the API key before
it proxies: only /health and the web page are public (llama.cpp since #26347 also asks for the
key on /models and /v1/models).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from types import SimpleNamespace

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .. import __version__
from ..cli.args import FLAGS, SWITCH, fail, verbosity
from ..hub.models_dir import ROUTER_DESTS, PresetError
from . import app as single
from . import static
from .app import Gate, error, read_body
from .audio import SPEECH_FLAGS
from .params import parse_body
from .router_models import CHILD_HOST, RUNNING, Instance, Models, RouterConfig, RouterError

TOOL = "llama-server"
ROUTER_ONLY = ("models_dir", "models_preset", "models_max", "models_autoload",
               "sleep_idle_seconds")
NEEDS_MODEL = ("mmproj", "alias")  # per-model settings: a folder or a preset gives them
AUDIO_ROUTES = ("/v1/audio/transcriptions", "/v1/audio/translations")  # whisper models'
STOP_GRACE = 5  # seconds a stream may go on after SIGTERM
HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive",
               "upgrade", "proxy-connection", "te", "trailer"}


class RouterGate(Gate):
    public = {"/health", "/v1/health", "/"}


# -- command line -----------------------------------------------------------------------------

def flag_names(dest: str) -> str:
    return " / ".join(f.names[-1] for f in FLAGS if f.dest == dest and "server" in f.tools)


def refuse_router_flags(args: argparse.Namespace) -> None:
    """With -m there is no router: its flags would do nothing, so they end the tool."""
    for dest in ROUTER_ONLY:
        if dest in args.given:
            fail(TOOL, f"{flag_names(dest)} only applies in router mode (llama-server "
                       f"without -m)")


def child_flags(argv: list[str], drop: set[str] = ROUTER_DESTS) -> list[str]:
    """The router's command line without what the router keeps or sets per child (its
    address, API keys, --models-*, --log-file), for every child (llama.cpp's base preset);
    serve-ray drops -m as well (`drop`)."""
    by_name = {n: f for f in FLAGS if "server" in f.tools for n in f.names}
    out, i = [], 0
    while i < len(argv):
        name, eq, _ = argv[i].partition("=")
        flag = by_name.get(name)
        n = 2 if flag is not None and flag.type is not SWITCH and not eq else 1
        if flag is None or flag.dest not in drop:
            out += argv[i:i + n]
        i += n
    return out


def child_env() -> dict[str, str]:
    """The router's environment, less the variables of the flags it keeps or sets itself."""
    drop = {f.env for f in FLAGS if f.env and f.dest in ROUTER_DESTS | {"model", *NEEDS_MODEL}}
    return {k: v for k, v in os.environ.items() if k not in drop}


def check_child_flags(args: argparse.Namespace) -> None:
    """The flags every child gets must be ones a child accepts: checked now, as llama.cpp
    parses them at start, rather than by every child at its load."""
    from ..cli.server import server_config

    for dest in NEEDS_MODEL:
        if dest in args.given:
            fail(TOOL, f"{flag_names(dest)} needs -m: in router mode each model's comes from "
                       f"its folder or its --models-preset section")
    trial = argparse.Namespace(**vars(args))
    trial.model = os.devnull  # any existing path: nothing is loaded
    server_config(trial)


def router_config(args: argparse.Namespace, argv: list[str]) -> RouterConfig:
    quiet = verbosity(args) < 3

    def log(message: str) -> None:
        if not quiet:
            print(f"{TOOL}: router: {message}", file=sys.stderr, flush=True)

    not_speech = {f.dest for f in FLAGS if "server" in f.tools} - SPEECH_FLAGS
    return RouterConfig(args.models_dir, args.models_preset, args.models_max,
                        args.models_autoload, args.sleep_idle_seconds, child_flags(argv),
                        child_env(), log, args.host,
                        child_flags(argv, ROUTER_DESTS | not_speech))


# -- routes -----------------------------------------------------------------------------------

def router_errors(fn):
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except RouterError as e:
            return error(str(e), e.kind, e.status)
    return single.handle_errors(wrapped)


def models_of(request: Request) -> Models:
    return request.app.state.models


def autoload(request: Request) -> bool:
    """--models-autoload, or the request's ?autoload=true|false."""
    value = request.query_params.get("autoload", "")
    return request.app.state.autoload if not value else value in ("true", "1")


async def routed(request: Request, name, touch: bool) -> Instance:
    """The model a request names, ready to take it (router_validate_model, then
    ensure_model_ready when autoloading; a sleeping model always wakes). The model counts as
    busy from here, so no other load evicts it before the request reaches it."""
    if not isinstance(name, str) or not name:
        raise RouterError("model name is missing from the request")
    models = models_of(request)
    inst = models.get(name)
    if inst is None:
        raise RouterError(f"model '{name}' not found")
    load = autoload(request)
    if not load and inst.status not in RUNNING:
        raise RouterError("model is not loaded")
    models.begin(inst, touch)
    try:
        if load or inst.status == "sleeping":
            await models.ensure_ready(inst)
        if inst.proc is None:
            raise RouterError(f"model name={inst.name} is not running")
    except BaseException:
        models.end(inst, touch)
        raise
    return inst


async def proxy(request: Request, inst: Instance, body: bytes | None, touch: bool) -> Response:
    """Forward the request to the model's child (routed() counted it in) and relay its answer
    as it comes (a stream is never buffered); the model is busy until it has been relayed."""
    models, client = models_of(request), request.app.state.client
    url = f"http://{CHILD_HOST}:{inst.port}{request.url.path}"
    if request.url.query:
        url += "?" + request.url.query
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
    try:
        upstream = await client.send(client.build_request(request.method, url, headers=headers,
                                                          content=body), stream=True)
    except httpx.HTTPError as e:
        models.end(inst, touch)
        return error(f"model '{inst.name}' did not answer: {e}", "unavailable_error")

    async def relay():
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError:
            pass  # the child went away mid-answer: the answer ends where it stopped
        finally:
            await upstream.aclose()
            models.end(inst, touch)

    out = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP_HEADERS}
    return StreamingResponse(relay(), status_code=upstream.status_code, headers=out)


async def proxy_post(request: Request) -> Response:
    raw = await read_body(request)
    name = parse_body(raw).get("model")
    inst = await routed(request, name, touch=True)  # POSTs count as use (LRU, idle)
    return await proxy(request, inst, raw, touch=True)


async def proxy_form(request: Request) -> Response:
    """A multipart POST (the audio routes), routed by its form's 'model' field."""
    raw = await read_body(request, any_type=True)

    async def replay():
        return {"type": "http.request", "body": raw, "more_body": False}
    try:
        name = (await Request(request.scope, replay).form()).get("model")
    except Exception:  # noqa: BLE001 - a malformed form names no model
        name = None
    inst = await routed(request, name if isinstance(name, str) else None, touch=True)
    return await proxy(request, inst, raw, touch=True)


async def proxy_get(request: Request) -> Response:
    inst = await routed(request, request.query_params.get("model", ""), touch=False)
    return await proxy(request, inst, None, touch=False)


async def props(request: Request) -> Response:
    """/props?model=NAME is that model's; without it, the router's own (llama.cpp's keys)."""
    if request.query_params.get("model"):
        return await proxy_get(request)
    cfg = models_of(request).cfg
    return JSONResponse({
        "role": "router", "max_instances": cfg.models_max, "models_autoload": cfg.autoload,
        "model_alias": "llama-server", "model_path": "none",
        "default_generation_settings": {"params": {}, "n_ctx": 0}, "ui_settings": {},
        "build_info": f"llamacpy {__version__}", "cors_proxy_enabled": False,
        "webui": request.app.state.webui, "api_key_required": request.app.state.api_key,
        "sleep_idle_seconds": cfg.sleep_idle_seconds})


def model_json(models: Models, inst: Instance, created: int) -> dict:
    """One model in GET /models (server_models_routes::get_router_models)."""
    status = {"value": inst.status, "args": inst.args or models.child_argv(inst, 0)}
    if inst.status == "unloaded" and inst.failed:
        status["exit_code"], status["failed"] = inst.exit_code, True
    modalities = ["text", "image"] if inst.spec.mmproj else ["text"]
    entry = {"id": inst.name, "aliases": inst.spec.aliases, "tags": [], "object": "model",
             "owned_by": "llamacpp", "created": created, "status": status,
             "architecture": {"input_modalities": modalities, "output_modalities": ["text"]},
             "source": inst.spec.source}
    if inst.status in RUNNING:
        entry.update({k: v for k, v in inst.loaded_info.items() if k not in entry})
    return entry


async def list_models(request: Request) -> Response:
    models = models_of(request)
    if request.query_params.get("reload"):
        try:
            await models.reload()
        except PresetError as e:
            raise RouterError(f"cannot reload the models: {e}", "server_error") from None
    now = int(time.time())
    return JSONResponse({"data": [model_json(models, inst, now)
                                  for inst in models.table.values()], "object": "list"})


async def model_named(request: Request, unknown: RouterError) -> Instance:
    name = (await single.read_json(request)).get("model")
    inst = models_of(request).get(name) if isinstance(name, str) else None
    if inst is None:
        raise unknown
    return inst


async def load_model(request: Request) -> Response:
    inst = await model_named(request, RouterError("model is not found", "not_found_error"))
    if inst.status in RUNNING:
        raise RouterError("model is already running")
    await models_of(request).load(inst)
    return JSONResponse({"success": True})


async def unload_model(request: Request) -> Response:
    inst = await model_named(request, RouterError("model is not found"))
    if inst.status not in RUNNING:
        raise RouterError("model is not running")
    await models_of(request).stop(inst)
    return JSONResponse({"success": True})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


OWN = [("/health", health, ["GET"]), ("/v1/health", health, ["GET"]),
       ("/models", list_models, ["GET"]), ("/v1/models", list_models, ["GET"]),
       ("/models/load", load_model, ["POST"]), ("/models/unload", unload_model, ["POST"]),
       ("/props", props, ["GET"]), ("/", single.index, ["GET"])]


def routes() -> list[tuple]:
    """The router's own routes, then every route of a single-model server, proxied."""
    from .embeddings import ROUTES as EMBEDDINGS
    from .ollama_router import ROUTES as OLLAMA  # Ollama's /api/* (it builds on this module)

    own = {path for path, _, _ in OWN + OLLAMA}
    proxied = [(path, proxy_post if "POST" in methods else proxy_get, methods)
               for path, _, methods in single.ROUTES + EMBEDDINGS if path not in own]
    audio = [(path, proxy_form, ["POST"]) for path in AUDIO_ROUTES]
    return OWN + OLLAMA + proxied + audio


async def method_not_allowed(request: Request, exc) -> Response:
    allowed = next((m for p, _, m in routes() if p == request.url.path), [])
    response = error(f"{request.method} is not allowed on {request.url.path}: use "
                     f"{' or '.join(allowed)}", "invalid_request_error", 405)
    response.headers["Allow"] = ", ".join(allowed)
    return response


def build_router_app(models: Models, api_keys: list[str], webui: bool, timeout: int,
                     static_path: str = ""):
    @contextlib.asynccontextmanager
    async def lifespan(app):
        app.state.client = httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=10.0))
        if models.cfg.sleep_idle_seconds >= 0:
            models.sleeper = models.background(models.sleep_idle())
        for inst in models.table.values():
            if inst.spec.load_on_startup:
                await models.load(inst)
        try:
            yield
        finally:
            await models.stop_all()
            await app.state.client.aclose()

    app = Starlette(routes=[Route(p, router_errors(fn), methods=m) for p, fn, m in routes()],
                    exception_handlers={404: single.not_found, 405: method_not_allowed,
                                        Exception: single.internal_error}, lifespan=lifespan)
    app.state.models, app.state.autoload, app.state.webui = models, models.cfg.autoload, webui
    app.state.api_key = bool(api_keys)
    app.state.static = (webui, static_path)
    from .ollama_http import OllamaGuard
    from .ollama_router import ROUTES as OLLAMA

    # Ollama's CORS origins, Host check and error shape on /api/*; the key guards every route
    return OllamaGuard(RouterGate(app, SimpleNamespace(api_keys=api_keys, ready=True)),
                       api_keys, models.cfg.host, public=set(), routes=OLLAMA)


def main(args: argparse.Namespace, argv: list[str]) -> int:
    """Serve in router mode until SIGINT / SIGTERM; every child stops with the router."""
    import uvicorn

    from ..cli.server import api_keys, install_signal_handlers, uvicorn_settings

    try:
        check_child_flags(args)
        static.check_folder(args.static_path)
        cfg = router_config(args, argv)
        models = Models(cfg)
        keys = api_keys(args)
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    startup = [i for i in models.table.values() if i.spec.load_on_startup]
    if 0 < args.models_max < len(startup):
        print(f"{TOOL}: error: number of models to load on startup ({len(startup)}) exceeds "
              f"models_max ({args.models_max})", file=sys.stderr)
        return 1
    cfg.log(f"available models ({len(models.table)}): " + ", ".join(
        f"[{i.spec.source}] {name}" for name, i in models.table.items()))
    settings = uvicorn_settings(args, SimpleNamespace(verbosity=verbosity(args)))
    # on SIGTERM open streams get STOP_GRACE seconds, then the children stop (llama.cpp's
    # router stops its HTTP server at once)
    server = uvicorn.Server(uvicorn.Config(
        build_router_app(models, keys, args.webui, args.timeout, args.static_path),
        timeout_graceful_shutdown=STOP_GRACE, **settings))
    install_signal_handlers(server)
    cfg.log(f"starting on http://{args.host}:{args.port} (router mode: models load on "
            f"demand)")
    try:
        server.run()
    finally:
        models.kill_all()
    return 0 if server.started else 1
