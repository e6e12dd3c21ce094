"""Ollama's API on llama-server (ollama docs/api.md): /api/generate, /api/chat, /api/tags,
/api/show, /api/ps, /api/version, /api/embed, /api/embeddings, /api/pull.

An Ollama request becomes the body /v1/chat/completions or /v1/completions would get (options
as llama.cpp's sampling fields, `format` as response_format, `think` as enable_thinking), and
runs through the same validation, template, grammar and tool-call parsing (app.chat_run,
app.text_run); only the answer's shape is Ollama's: NDJSON lines, durations in nanoseconds,
tool-call arguments as objects, errors as {"error": "..."}.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..engine.scheduler import EngineError
from . import app as oai
from . import ollama_models as models
from .ollama_http import ollama_error
from .params import (Limits, RequestError, any_of, array, boolean, check, completion_fields,
                     integer, number, obj, string)

# the Ollama release whose API this follows: clients compare it before using newer fields
OLLAMA_VERSION = "0.12.0"
NDJSON = "application/x-ndjson"

# Ollama option -> the llama.cpp request field that carries it
OPTIONS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p", "min_p": "min_p",
           "typical_p": "typical_p", "seed": "seed", "repeat_penalty": "repeat_penalty",
           "repeat_last_n": "repeat_last_n", "presence_penalty": "presence_penalty",
           "frequency_penalty": "frequency_penalty", "mirostat": "mirostat",
           "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta",
           "num_predict": "n_predict", "stop": "stop", "num_keep": "n_keep"}
# options Ollama applies when it loads a model: here the server's flags set them
LOAD_OPTIONS = {"numa": "--numa", "num_batch": "-b", "num_gpu": "-ngl", "main_gpu": "-mg",
                "low_vram": None, "f16_kv": "-ctk / -ctv", "logits_all": None,
                "vocab_only": None, "use_mmap": "--no-mmap", "use_mlock": "--mlock",
                "embedding_only": "--embedding", "num_thread": "-t"}
DROPPED = ("tfs_z", "penalize_newline")  # Ollama's own engine no longer has them
THINK_LEVELS = ("high", "medium", "low")
DURATION = re.compile(r"(-?\d+(?:\.\d*)?)(ns|us|µs|ms|s|m|h)")
UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class OllamaError(Exception):
    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def ollama_errors(fn):
    """Every failure in Ollama's shape; a request never takes the server down."""
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except OllamaError as e:
            return ollama_error(str(e), e.status)
        except RequestError as e:
            return ollama_error(str(e), e.status)
        except EngineError as e:
            return ollama_error(str(e), engine_status(e.kind))
        except Exception as e:  # noqa: BLE001
            return ollama_error(f"{type(e).__name__}: {e}", 500)
    return wrapped


def engine_status(kind: str) -> int:
    return {"exceed_context_size_error": 400, "invalid_request_error": 400,
            "not_supported_error": 400, "unavailable_error": 503}.get(kind, 500)


# -- requests ---------------------------------------------------------------------------------

IMAGES = array(string(doc="base64"))
MESSAGE = obj({"role": string(), "content": string(), "images": IMAGES, "thinking": string(),
               "tool_name": string(), "tool_calls": array(obj())}, required=["role"])
COMMON = {"model": string(), "stream": boolean(), "format": any_of(string(), obj()),
          "options": obj(), "keep_alive": any_of(number(), string()),
          "think": any_of(boolean(), string(enum=list(THINK_LEVELS))),
          "logprobs": boolean(), "top_logprobs": integer(0, 20), "truncate": boolean(),
          "shift": boolean()}
GENERATE = obj({**COMMON, "prompt": string(), "suffix": string(), "system": string(),
                "template": string(), "context": array(integer(0)), "raw": boolean(),
                "images": IMAGES})
CHAT = obj({**COMMON, "messages": array(MESSAGE), "tools": array(obj())})


async def read_request(request: Request, schema: dict) -> dict:
    try:
        data = await oai.read_json(request, any_type=True)
    except RequestError as e:
        raise OllamaError(str(e), e.status) from None
    check(data, schema, "")
    if not data.get("model"):
        raise OllamaError("model is required")
    return data


def keep_alive_seconds(value) -> float | None:
    """keep_alive as seconds (a number, or a Go duration like "5m", "1h30m", "-1"); None when
    absent, negative for ever."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    text = value.strip()
    if re.fullmatch(r"-?\d+(\.\d*)?", text):
        return float(text)
    parts = DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise OllamaError(f"keep_alive: {value!r} is not a duration (e.g. \"5m\", \"1h\", 300)")
    return sum(float(n) * UNIT_S[u] for n, u in parts)


def sampling_fields(options: dict | None) -> tuple[dict, int | None]:
    """Ollama's options as llama.cpp's request fields, and num_ctx; load-time options and
    unknown ones are refused (the server's flags set those)."""
    out, num_ctx = {}, None
    check(options or {}, option_schema(), "options")
    for key, value in (options or {}).items():
        if value is None:
            continue
        if key in OPTIONS:
            out[OPTIONS[key]] = value
        elif key == "num_ctx":
            num_ctx = check(value, integer(1), "options.num_ctx")
        elif key in LOAD_OPTIONS:
            flag = LOAD_OPTIONS[key]
            hint = f" (llama-server's {flag})" if flag else ""
            raise OllamaError(f"options.{key} is set when the model loads: this server's "
                              f"command line sets it{hint}")
        elif key in DROPPED:
            raise OllamaError(f"options.{key} is not supported (Ollama dropped it too)")
        else:
            raise OllamaError(f"options.{key} is not an Ollama option")
    if out.get("n_predict") == -2:  # Ollama: fill the context
        out["n_predict"] = -1
    return out, num_ctx


@functools.cache
def option_schema() -> dict:
    """Ollama's runtime options, each checked as the llama.cpp field it becomes."""
    fields = completion_fields(Limits())
    return obj({name: fields[field] for name, field in OPTIONS.items()})


def response_format(fmt) -> dict | None:
    """`format` as response_format: "json" any JSON object, an object a JSON schema."""
    if fmt is None or fmt == "":
        return None
    if fmt == "json":
        return {"type": "json_object"}
    if isinstance(fmt, dict):
        return {"type": "json_schema", "json_schema": {"schema": fmt}}
    raise OllamaError(f'invalid format: {fmt!r}: expected "json" or a JSON schema object')


def think_kwargs(think, state, model: str) -> dict:
    """`think` as chat-template variables (enable_thinking, or a GPT-OSS reasoning_effort)."""
    source = state.template.source
    if think is None:
        return {}
    if think is False:
        return {"enable_thinking": False}
    if not models.thinks(source) and "reasoning_effort" not in source:
        raise OllamaError(f'"{model}" does not support thinking')
    if think is True:
        return {"enable_thinking": True}
    if "reasoning_effort" not in source:
        raise OllamaError(f'"{model}" does not take a thinking level ("{think}"): use '
                          f'think: true')
    return {"reasoning_effort": think}


def base_body(data: dict, state) -> tuple[dict, int | None]:
    """The llama.cpp fields shared by both routes, and options.num_ctx."""
    if data.get("truncate") is True:
        raise OllamaError("truncate: this server refuses prompts longer than the context "
                          "instead of truncating them (send truncate: false or leave it out)")
    if "shift" in data and data["shift"] != state.cfg.context_shift:
        raise OllamaError(f"shift: {data['shift']} differs from this server's context shift "
                          f"(--context-shift is {'on' if state.cfg.context_shift else 'off'})")
    body, num_ctx = sampling_fields(data.get("options"))
    fmt = response_format(data.get("format"))
    if fmt is not None:
        body["response_format"] = fmt
    if data.get("logprobs"):
        body["logprobs"], body["top_logprobs"] = True, data.get("top_logprobs") or 0
    return body, num_ctx


def image_parts(images: list[str] | None) -> list[dict]:
    return [{"type": "image_url", "image_url": {"url": b64}} for b64 in images or []]


def chat_message(m: dict) -> dict:
    """An Ollama message as an OpenAI one: images as parts, thinking as reasoning_content,
    tool-call arguments kept as objects, tool_name as the tool message's name."""
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("images"):
        out["content"] = image_parts(m["images"]) + [{"type": "text", "text": out["content"]}]
    if m.get("thinking"):
        out["reasoning_content"] = m["thinking"]
    if m.get("tool_name"):
        out["name"] = m["tool_name"]
    if m.get("tool_calls"):
        out["tool_calls"] = [oai_tool_call(c, i) for i, c in enumerate(m["tool_calls"])]
    return out


def oai_tool_call(call: dict, i: int) -> dict:
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    if not isinstance(fn.get("name"), str):
        raise OllamaError(f"tool_calls[{i}].function.name must be a string")
    return {"id": call.get("id") or f"call_{i}", "type": "function",
            "function": {"name": fn["name"], "arguments": fn.get("arguments") or {}}}


def chat_body(data: dict, state) -> tuple[dict, int | None]:
    body, num_ctx = base_body(data, state)
    body["messages"] = [chat_message(m) for m in data["messages"]]
    if data.get("tools"):
        body["tools"] = data["tools"]
    kwargs = think_kwargs(data.get("think"), state, data["model"])
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    return body, num_ctx


def generate_body(data: dict, state) -> tuple[dict, int | None, str]:
    """/api/generate as a chat of one user message (after `system`), or with raw a text
    completion; the third value is the detokenized `context` that goes first."""
    if data.get("suffix"):
        raise OllamaError(f'"{data["model"]}" does not support insert (suffix): this server '
                          f"has no fill-in-the-middle")
    if data.get("template"):
        raise OllamaError("template: Ollama's Go templates are not supported; the model's "
                          "chat template (or llama-server's --chat-template) applies")
    body, num_ctx = base_body(data, state)
    prefix = ""
    if data.get("raw"):
        if data.get("system") or data.get("context"):
            raise OllamaError("raw mode does not support template, system, or context")
        if data.get("images"):
            raise OllamaError("raw mode does not support images")
        if data.get("think"):
            raise OllamaError("raw mode does not support think")
        body["prompt"] = data["prompt"]
        return body, num_ctx, prefix
    messages = [{"role": "system", "content": data["system"]}] if data.get("system") else []
    user = {"role": "user", "content": data["prompt"], "images": data.get("images")}
    body["messages"] = messages + [chat_message(user)]
    kwargs = think_kwargs(data.get("think"), state, data["model"])
    if kwargs:
        body["chat_template_kwargs"] = kwargs
    if data.get("context"):
        tokens = data["context"]
        if max(tokens) >= state.tokenizer.n_vocab:
            raise OllamaError("context holds a token id outside the vocabulary")
        prefix = state.tokenizer.detokenize(tokens).decode("utf-8", errors="replace")
    return body, num_ctx, prefix


def fit_context(run, num_ctx: int | None) -> None:
    """options.num_ctx, at most the slot's context: prompt and answer stay within it."""
    if num_ctx is None:
        return
    n_slot = run.state.engine.n_ctx_slot
    if num_ctx > n_slot:
        raise OllamaError(f"options.num_ctx {num_ctx} is more than this server's context per "
                          f"slot ({n_slot} tokens; llama-server's -c and -np set it)")
    room = num_ctx - len(run.generation.prompt)
    if room <= 0:
        raise OllamaError(f"the prompt ({len(run.generation.prompt)} tokens) does not fit "
                          f"options.num_ctx ({num_ctx})")
    n = run.generation.n_predict
    run.generation.n_predict = room if n < 0 else min(n, room)


# -- answers ----------------------------------------------------------------------------------

class Reply:
    """One Ollama answer being built from engine events: "generate" or "chat" lines."""

    def __init__(self, run, route: str, model: str, t0: int):
        self.run, self.route, self.model, self.t0 = run, route, model, t0

    def line(self, content: str, thinking: str, done: bool) -> dict:
        out = {"model": self.model, "created_at": models.now()}
        if self.route == "generate":
            out["response"] = content
            if thinking:
                out["thinking"] = thinking
        else:
            message = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            out["message"] = message
        out["done"] = done
        return out

    def final(self, done: dict, content: str = "", thinking: str = "") -> dict:
        out = self.line(content, thinking, True)
        calls = tool_calls(self.run)
        if calls:
            (out["message"] if self.route == "chat" else out)["tool_calls"] = calls
        out["done_reason"] = "stop" if done["stop_type"] in ("eos", "word") else "length"
        if self.route == "generate" and self.run.kind == "chat":
            out["context"] = self.run.generation.prompt.text_tokens + self.run.tokens
        t = done["timings"]
        out.update(total_duration=time.perf_counter_ns() - self.t0,
                   load_duration=0,  # the model was loaded before the request (single mode)
                   prompt_eval_count=done["n_prompt"],  # as Ollama: cached ones too
                   prompt_eval_duration=int(t["prompt_ms"] * 1e6),
                   eval_count=done["n_decoded"], eval_duration=int(t["predicted_ms"] * 1e6))
        return out

    def logprobs(self, last: bool) -> list[dict] | None:
        if not self.run.c.logprobs or not self.run.probs:
            return None
        entries = oai.oai_logprobs(self.run)["content"]
        return [ollama_logprob(e) for e in (entries[-1:] if last else entries)]


def ollama_logprob(entry: dict) -> dict:
    """An OpenAI logprobs entry in Ollama's shape (token, logprob, bytes; no ids)."""
    out = {k: entry[k] for k in ("token", "logprob", "bytes")}
    out["top_logprobs"] = [{k: t[k] for k in ("token", "logprob", "bytes")}
                           for t in entry["top_logprobs"]]
    return out


def tool_calls(run) -> list[dict]:
    """The parsed tool calls with their arguments as JSON objects (Ollama's shape)."""
    out = []
    for i, call in enumerate(run.tool_calls):
        fn = call["function"]
        try:
            arguments = json.loads(fn["arguments"]) if isinstance(fn["arguments"], str) \
                else fn["arguments"]
        except json.JSONDecodeError:
            arguments = None
        if not isinstance(arguments, dict):
            raise EngineError(f"the model's call of {fn['name']} has arguments that are not a "
                              f"JSON object: {fn['arguments']!r}", "server_error")
        out.append({"id": call.get("id", ""),
                    "function": {"index": i, "name": fn["name"], "arguments": arguments}})
    return out


async def answer(reply: Reply, stream: bool) -> Response:
    """Submit the run and answer: NDJSON lines, or one JSON object. The stream starts (200)
    only once the first engine event is in, so a prompt that fails gets its status."""
    run = reply.run
    try:
        run.seq = run.state.engine.submit(run.generation, run.emit)
    except EngineError as e:
        return ollama_error(str(e), engine_status(e.kind))
    events = run.events()
    first = await anext(events, None)
    if first is None:
        return Response(status_code=499)  # the client went away
    if first["type"] == "error":
        await events.aclose()
        return ollama_error(first["message"], engine_status(first["kind"]))
    events = oai.resumed(first, events)
    if stream:
        return StreamingResponse(ndjson(reply, events), media_type=NDJSON)
    async for ev in events:
        if ev["type"] == "error":
            return ollama_error(ev["message"], engine_status(ev["kind"]))
        run.absorb(ev)
        if ev["type"] == "done":
            body = reply.final(ev, run.content, run.reasoning_text)
            if reply.logprobs(last=False) is not None:
                body["logprobs"] = reply.logprobs(last=False)
            return JSONResponse(body)
    return Response(status_code=499)


async def ndjson(reply: Reply, events: AsyncIterator[dict]) -> AsyncIterator[str]:
    """One JSON object a line; an error after the first line is an {"error"} line."""
    async for ev in events:
        if ev["type"] == "error":
            yield json.dumps({"error": ev["message"]}) + "\n"
            return
        reasoning, content = reply.run.absorb(ev)
        try:
            if ev["type"] == "done":
                line = reply.final(ev, content, reasoning)
            elif content or reasoning:
                line = reply.line(content, reasoning, False)
            else:
                continue
        except Exception as e:  # noqa: BLE001 - the stream has started: an error line
            yield json.dumps({"error": f"{e}"}) + "\n"
            return
        probs = reply.logprobs(last=True) if ev["type"] == "token" else None
        if probs:
            line["logprobs"] = probs
        yield json.dumps(line, ensure_ascii=False) + "\n"


def loaded(data: dict, route: str) -> Response:
    """An empty prompt / no messages: the model is loaded (done_reason "load"); keep_alive 0
    would unload it, which a single-model server cannot do."""
    if keep_alive_seconds(data.get("keep_alive")) == 0:
        raise OllamaError("keep_alive 0 unloads a model: this llama-server serves one model "
                          "(-m) for as long as it runs; router mode (no -m) can unload", 400)
    body = {"model": data["model"], "created_at": models.now()}
    if route == "generate":
        body["response"] = ""
    else:
        body["message"] = {"role": "assistant", "content": ""}
    return JSONResponse({**body, "done": True, "done_reason": "load"})


# -- routes -----------------------------------------------------------------------------------

async def generate(request: Request) -> Response:
    return await inference(request, "generate")


async def chat(request: Request) -> Response:
    return await inference(request, "chat")


async def inference(request: Request, route: str) -> Response:
    """/api/generate or /api/chat: an empty request loads, anything else runs."""
    t0 = time.perf_counter_ns()
    data = await read_request(request, GENERATE if route == "generate" else CHAT)
    keep_alive_seconds(data.get("keep_alive"))
    sampling_fields(data.get("options"))  # checked even when the request only loads
    if not data.get("prompt" if route == "generate" else "messages"):
        return loaded(data, route)
    run, num_ctx = await (generate_run if route == "generate" else chat_run)(request, data)
    fit_context(run, num_ctx)
    return await answer(Reply(run, route, data["model"], t0), data.get("stream") is not False)


async def generate_run(request: Request, data: dict):
    state = request.app.state.server
    body, num_ctx, prefix = await asyncio.to_thread(generate_body, data, state)
    if data.get("raw"):
        c = await oai.completion_for(state, body, "completions")
        return await oai.text_run(request, body, c), num_ctx
    c = await oai.completion_for(state, body, "chat")
    return await oai.chat_run(request, body, c, prefix), num_ctx


async def chat_run(request: Request, data: dict):
    state = request.app.state.server
    body, num_ctx = chat_body(data, state)
    c = await oai.completion_for(state, body, "chat")
    return await oai.chat_run(request, body, c), num_ctx


async def tags(request: Request) -> Response:
    state = request.app.state.server
    entry = await models.entry(state.cfg.model_path, state.alias, state.gguf)
    return JSONResponse({"models": [entry]})


async def ps(request: Request) -> Response:
    state = request.app.state.server
    return JSONResponse({"models": [await models.running(state, state.alias)]})


async def show(request: Request) -> Response:
    state = request.app.state.server
    data = await oai.read_json(request, any_type=True)
    check(data, obj({"model": string(), "name": string(), "verbose": boolean()}), "")
    if not (data.get("model") or data.get("name")):
        raise OllamaError("model is required")
    return JSONResponse(await models.show(state, data.get("verbose") is True))


async def version(request: Request) -> Response:
    return JSONResponse({"version": OLLAMA_VERSION})


EMBED = obj({"model": string(), "input": any_of(string(), array(string())),
             "truncate": boolean(), "options": obj(), "keep_alive": any_of(number(), string()),
             "dimensions": integer(1)})
EMBEDDINGS = obj({"model": string(), "prompt": string(), "options": obj(),
                  "keep_alive": any_of(number(), string())})


async def embed_texts(state, model: str, texts: list[str]) -> tuple[list[list[float]], int]:
    """The texts' L2-normalized embeddings (as Ollama's) and the tokens they took, from the
    embedding worker (issue 14: --embeddings, server/embeddings.py)."""
    if getattr(state, "embeddings", None) is None:
        raise OllamaError(f'"{model}" does not support embeddings: start llama-server with an '
                          f"embedding model and --embeddings, or in router mode name one")
    if not texts:
        return [], 0  # Ollama: an empty input only loads the model
    from .embeddings import embed_texts as vectors_of

    return await vectors_of(state, texts)


async def embed(request: Request) -> Response:
    """POST /api/embed: {"embeddings": [[...], ...]} for `input` (a string or a list)."""
    t0 = time.perf_counter_ns()
    data = await read_request(request, EMBED)
    texts = data.get("input") if isinstance(data.get("input"), list) else \
        [data["input"]] if data.get("input") else []
    vectors, n_tokens = await embed_texts(request.app.state.server, data["model"], texts)
    if data.get("dimensions"):
        vectors = [models_normalized(v[:data["dimensions"]]) for v in vectors]
    return JSONResponse({"model": data["model"], "embeddings": vectors,
                         "total_duration": time.perf_counter_ns() - t0, "load_duration": 0,
                         "prompt_eval_count": n_tokens})


def models_normalized(v: list[float]) -> list[float]:
    norm = max(sum(x * x for x in v) ** 0.5, 1e-12)
    return [x / norm for x in v]


async def embeddings(request: Request) -> Response:
    """POST /api/embeddings (Ollama's older route): {"embedding": [...]} for `prompt`."""
    data = await read_request(request, EMBEDDINGS)
    if not data.get("prompt"):
        return JSONResponse({"embedding": []})  # Ollama: an empty prompt only loads
    vectors, _ = await embed_texts(request.app.state.server, data["model"], [data["prompt"]])
    return JSONResponse({"embedding": vectors[0]})


async def pull(request: Request) -> Response:
    """POST /api/pull: a catalogue model into the cache (`llamacpy pull`), with progress."""
    data = await oai.read_json(request, any_type=True)
    check(data, obj({"model": string(), "name": string(), "insecure": boolean(),
                     "stream": boolean()}), "")
    asked = data.get("model") or data.get("name")
    if not asked:
        raise OllamaError("model is required")
    name = models.catalogue_name(asked)
    if name is None:
        raise OllamaError(f"model '{asked}' not found: llamacpy pulls its catalogue "
                          f"({', '.join(models.catalog.CATALOG)})", 404)
    progress = models.pull_progress(name)
    if data.get("stream") is not False:
        return StreamingResponse((json.dumps(p) + "\n" async for p in progress),
                                 media_type=NDJSON)
    last = {}
    async for p in progress:
        if "error" in p:
            return ollama_error(p["error"], 500)
        last = p
    return JSONResponse(last)


def refused(what: str):
    async def handler(request: Request) -> Response:
        raise OllamaError(f"{what} is not supported by llamacpy: models come from GGUF files "
                          f"and the catalogue (llamacpy pull, /api/pull)", 501)
    return handler


ROUTES = [
    ("/api/generate", generate, ["POST"]), ("/api/chat", chat, ["POST"]),
    ("/api/tags", tags, ["GET", "HEAD"]), ("/api/show", show, ["POST"]),
    ("/api/ps", ps, ["GET"]), ("/api/version", version, ["GET", "HEAD"]),
    ("/api/embed", embed, ["POST"]), ("/api/embeddings", embeddings, ["POST"]),
    ("/api/pull", pull, ["POST"]),
    ("/api/delete", refused("/api/delete"), ["DELETE"]),
    ("/api/copy", refused("/api/copy"), ["POST"]),
    ("/api/create", refused("/api/create"), ["POST"]),
    ("/api/push", refused("/api/push"), ["POST"]),
]
