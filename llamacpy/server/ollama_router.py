"""Ollama's routes in router mode: names route as `"model"` does on the OpenAI routes (an id,
a preset alias, or either with Ollama's `:latest` tag), an unknown name is Ollama's 404
{"error": "model 'X' not found"}, /api/tags lists every model the router can start, /api/ps the
running ones, and `keep_alive` maps onto unloading the model's child (0: at once; a duration:
once idle that long; negative: never)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..format import open_gguf
from . import ollama
from . import ollama_models as describe
from .app import read_body
from .ollama import OllamaError, engine_status, keep_alive_seconds, ollama_errors
from .params import parse_body
from .router import models_of, proxy, routed
from .router_models import CHILD_HOST, RUNNING, Instance, RouterError

EMPTY_KEY = {"/api/generate": "prompt", "/api/chat": "messages"}  # empty: load or unload


def find(request: Request, name) -> Instance:
    if not isinstance(name, str) or not name:
        raise OllamaError("model is required")
    models = models_of(request)
    inst = models.get(name) or (models.get(name.removesuffix(":latest"))
                                if name.endswith(":latest") else None)
    if inst is None:
        raise OllamaError(f"model '{name}' not found", 404)
    return inst


async def forward(request: Request, inst: Instance, raw: bytes | None) -> Response:
    """Load the model if need be (the router's rules) and proxy the request to its child; the
    time a load took goes into the answer's load_duration (the child never saw it)."""
    touch = raw is not None and request.url.path != "/api/show"
    t0, was_loaded = time.perf_counter_ns(), is_loaded(inst)
    try:
        inst = await routed(request, inst.name, touch)
    except RouterError as e:
        raise OllamaError(str(e), e.status or engine_status(e.kind)) from None
    load_ns = 0 if was_loaded else time.perf_counter_ns() - t0
    response = await proxy(request, inst, raw, touch)
    if load_ns and isinstance(response, StreamingResponse):
        response.body_iterator = with_load_time(response.body_iterator, load_ns)
    return response


def is_loaded(inst: Instance) -> bool:
    """Loaded and staying so (a model being stopped still shows "loaded" until it exits)."""
    return inst.status == "loaded" and not inst.stop_as


async def with_load_time(body: AsyncIterator[bytes], load_ns: int) -> AsyncIterator[bytes]:
    """The child's answer, line by line, with the load added to its final object's
    load_duration and total_duration."""
    buffer = b""
    async for chunk in body:
        *lines, buffer = (buffer + chunk).split(b"\n")
        for line in lines:
            yield add_load(line, load_ns) + b"\n"
    if buffer:
        yield add_load(buffer, load_ns)


def add_load(line: bytes, load_ns: int) -> bytes:
    if b'"done"' not in line:
        return line
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    if not isinstance(obj, dict) or obj.get("done") is not True or "load_duration" not in obj:
        return line
    obj["load_duration"] += load_ns
    obj["total_duration"] = obj.get("total_duration", 0) + load_ns
    return json.dumps(obj, ensure_ascii=False).encode()


async def inference(request: Request) -> Response:
    """/api/generate, /api/chat, /api/embed, /api/embeddings and /api/show, by name."""
    raw = await read_body(request, any_type=True)
    data = parse_body(raw)
    inst = find(request, data.get("model") or data.get("name"))
    seconds = keep_alive_seconds(data.get("keep_alive"))
    key = EMPTY_KEY.get(request.url.path)
    if key and not data.get(key) and seconds == 0:
        return await unload(request, inst, data["model"], key)
    keep = request.app.state.__dict__.setdefault("keep_alive", {})
    if seconds is None:
        keep.pop(inst.name, None)  # back to the router's own rule (--sleep-idle-seconds)
    elif request.url.path != "/api/show":
        keep[inst.name] = seconds
        start_watch(request)
    return await forward(request, inst, raw)


async def unload(request: Request, inst: Instance, model: str, key: str) -> Response:
    """keep_alive 0 with nothing to generate: the model's child stops (Ollama's "unload")."""
    if inst.status in RUNNING:
        await models_of(request).stop(inst, wait=True)
    body = {"model": model, "created_at": describe.now()}
    body.update({"response": ""} if key == "prompt" else
                {"message": {"role": "assistant", "content": ""}})
    return JSONResponse({**body, "done": True, "done_reason": "unload"})


def start_watch(request: Request) -> None:
    state = request.app.state
    if getattr(state, "keep_alive_task", None) is None:
        state.keep_alive_task = asyncio.ensure_future(watch(models_of(request), state.keep_alive))


async def watch(models, keep: dict[str, float]) -> None:
    """Stop each model idle longer than its last request's keep_alive."""
    while True:
        now = time.monotonic()
        for name, seconds in list(keep.items()):
            inst = models.table.get(name)
            if inst is not None and inst.status == "loaded" and inst.req_count == 0 \
                    and not inst.stop_as and 0 <= seconds <= now - inst.last_used:
                models.cfg.log(f"model name={name} kept alive {seconds:g} s: unloading")
                await models.stop(inst)
        await asyncio.sleep(0.25)


def expires_at(request: Request, inst: Instance) -> str:
    seconds = getattr(request.app.state, "keep_alive", {}).get(inst.name)
    if seconds is None or seconds < 0:
        return describe.rfc3339(describe.FOREVER)
    left = max(0.0, inst.last_used + seconds - time.monotonic())
    return describe.rfc3339(time.time() + left)


async def file_entry(inst: Instance) -> dict:
    gguf = await asyncio.to_thread(open_gguf, inst.spec.path)
    try:
        return await describe.entry(inst.spec.path, inst.name, gguf)
    finally:
        gguf.close()


async def tags(request: Request) -> Response:
    """Every model the router can start, rescanned first (as Ollama lists what is on disk:
    a model `/api/pull` just fetched shows)."""
    models = models_of(request)
    await models.reload()
    return JSONResponse({"models": [await file_entry(i) for i in models.table.values()]})


async def ps(request: Request) -> Response:
    """The loaded models, each as its child describes itself, under the router's name (asked
    directly: listing never loads a model)."""
    out = []
    for inst in models_of(request).running():
        try:
            r = await request.app.state.client.get(f"http://{CHILD_HOST}:{inst.port}/api/ps")
            entry = r.json()["models"][0]
        except (httpx.HTTPError, ValueError, LookupError):
            continue  # stopping or not ready: not a loaded model
        if not is_loaded(inst):
            continue
        entry.update(name=inst.name, model=inst.name, expires_at=expires_at(request, inst))
        out.append(entry)
    return JSONResponse({"models": out})


ROUTES = [(path, ollama_errors(fn), methods) for path, fn, methods in [
    ("/api/generate", inference, ["POST"]), ("/api/chat", inference, ["POST"]),
    ("/api/embed", inference, ["POST"]), ("/api/embeddings", inference, ["POST"]),
    ("/api/show", inference, ["POST"]), ("/api/tags", tags, ["GET", "HEAD"]),
    ("/api/ps", ps, ["GET"])]]
# the rest need no model: the router answers them as a single-model server does
ROUTES += [(path, ollama_errors(fn), methods) for path, fn, methods in ollama.ROUTES
           if path not in {p for p, _, _ in ROUTES}]
