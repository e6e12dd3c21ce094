"""llama-server's HTTP routes (Starlette): llama.cpp's endpoints, JSON shapes and error objects.

Request handlers only parse, validate (params.py), tokenize and format; generation happens in
the engine thread, which sends each token back through a per-request asyncio queue. A body is
read with a size cap and parsed strictly, every field is checked before the task is queued,
tokenization runs off the event loop, and a stream only starts (200) once its first engine
event is in, so a request that fails at its prompt gets an error status instead.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from ..chat import ChatTemplateError
from ..chat.reasoning import ReasoningParser, prompt_opens_thinking
from ..engine.prompt import Prompt
from ..engine.scheduler import EngineError
from ..engine.sequence import Request as SequenceRequest
from ..engine.sequence import Sequence
from ..grammar import Grammar, GrammarError, LazyGrammarMask, trigger_finder
from . import static
from .openapi import document
from .params import (Completion, Limits, NotSupported, RequestError, completion_from, parse_body,
                     trigger_words, validate)
from .state import ServerState

PUBLIC_PATHS = {"/health", "/v1/health", "/models", "/v1/models", "/", "/openapi.json",
                "/api/tags"}  # /api/tags: public in llama.cpp too (Ollama clients list models)
ALLOWED_WHILE_LOADING = {"/health", "/v1/health", "/models", "/v1/models", "/"}


def error(message: str, kind: str = "invalid_request_error", code: int | None = None,
          **extra) -> JSONResponse:
    """llama.cpp's error object (format_error_response)."""
    # llama.cpp answers not_supported_error with 501; here it is a 400, as a request field
    # asking for something not implemented is the client's to drop (code == status, always)
    codes = {"invalid_request_error": 400, "authentication_error": 401, "not_found_error": 404,
             "server_error": 500, "permission_error": 403, "not_supported_error": 400,
             "unavailable_error": 503, "exceed_context_size_error": 400}
    status = code or codes.get(kind, 500)
    return JSONResponse({"error": {"code": status, "message": message, "type": kind, **extra}},
                        status_code=status)


LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


class Gate:
    """ASGI middleware: API keys, then the loading state, then llama.cpp's 404 shape."""

    public = PUBLIC_PATHS  # paths that need no API key

    def __init__(self, app, state: ServerState):
        self.app, self.state = app, state

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        if scope["method"] == "OPTIONS":
            return await PlainTextResponse("", headers=cors())(scope, receive, send)
        if self.state.api_keys and path not in self.public and not self._key_ok(scope):
            return await error("Invalid API Key", "authentication_error")(scope, receive, send)
        if not self.state.ready and path not in ALLOWED_WHILE_LOADING:
            return await JSONResponse(LOADING, 503)(scope, receive, send)
        await self.app(scope, receive, send)

    def _key_ok(self, scope) -> bool:
        headers = dict(scope["headers"])
        key = headers.get(b"authorization") or headers.get(b"x-api-key") or b""
        key = key.decode("latin-1")  # any bytes: a wrong key is a 401, never a 500
        key = key[len("Bearer "):] if key.startswith("Bearer ") else key
        return key in self.state.api_keys


def cors() -> dict:
    return {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "*",
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS"}


# -- request bodies -------------------------------------------------------------------------------

MAX_BODY = 32 << 20  # bytes of a request body (base64 images take several MB)
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


async def read_json(request: Request, any_type: bool = False) -> dict:
    """The body as a JSON object (params.parse_body); a large one is parsed off the event
    loop. any_type: whatever the Content-Type says (Ollama's routes: `curl -d` sends a form's)."""
    raw = await read_body(request, any_type)
    if len(raw) > 1 << 20:
        return await asyncio.to_thread(parse_body, raw)
    return parse_body(raw)


async def read_body(request: Request, any_type: bool = False) -> bytes:
    """The raw body: not a form (unless any_type), at most MAX_BODY bytes (else 413)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind in FORM_TYPES and not any_type:
        raise RequestError(f"the request body must be JSON, not {kind}")
    too_large = RequestError(f"the request body is larger than {MAX_BODY >> 20} MiB", status=413)
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > MAX_BODY:
        raise too_large
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise too_large
    return bytes(raw)


def limits(state: ServerState) -> Limits:
    return Limits(state.tokenizer.n_vocab, state.cfg.n_parallel, state.engine.n_ctx_slot)


@functools.cache
def longest_piece(tokenizer) -> int:
    """Bytes in the longest token piece: n tokens never cover more text than n times this."""
    return max(len(tokenizer.token_to_piece(t, special=True)) for t in range(tokenizer.n_vocab))


async def check_size(state: ServerState, prompt, n_ctx: int) -> None:
    """Refuse, before tokenizing it, a prompt that cannot fit n_ctx tokens (texts and token ids;
    tokenizing megabytes takes long). Normalizers may shrink text, hence the margin of 2."""
    parts = prompt if isinstance(prompt, list) else [prompt]
    texts = [p.get("prompt_string") if isinstance(p, dict) else p for p in parts
             if isinstance(p, (str, dict))]
    n_chars = sum(len(t) for t in texts if isinstance(t, str))
    n_ids = len(parts) - len(texts)  # not yet validated: whatever else, counted as one token
    if n_ids <= n_ctx and n_chars <= n_ctx:
        return
    per_token = 2 * (await asyncio.to_thread(longest_piece, state.tokenizer) + 1)
    at_least = n_ids + n_chars // per_token
    if at_least > n_ctx:
        raise EngineError(f"request (at least {at_least} tokens) exceeds the available context "
                          f"size ({n_ctx} tokens), try increasing it",
                          "exceed_context_size_error", n_prompt_tokens=at_least, n_ctx=n_ctx)


async def render(state: ServerState, data: dict):
    """The chat prompt (state.render_chat) off the event loop; a template that fails on these
    messages is the request's fault, a 400."""
    try:
        return await asyncio.to_thread(state.render_chat, data)
    except RequestError:
        raise
    except (ChatTemplateError, TypeError, ValueError, LookupError, AttributeError,
            RecursionError) as e:
        raise RequestError(f"the chat template failed on these messages: {e}") from None


def tokenize_text(state: ServerState):
    """llama.cpp's tokenization of logit_bias texts (no special tokens)."""
    return lambda text: state.tokenizer.tokenize(text, add_special=False, parse_special=False)


async def request_completion(request: Request, route: str) -> tuple[dict, Completion]:
    """The body and its validated Completion (off the loop: logit_bias texts get tokenized)."""
    data = await read_json(request)
    return data, await completion_for(request.app.state.server, data, route)


async def completion_for(state: ServerState, data: dict, route: str) -> Completion:
    """A parsed body's validated Completion (also what the Ollama routes build theirs with)."""
    if state.embeddings is not None or getattr(getattr(state, "model", None), "encoder", False):
        # llama.cpp's refusal on an embedding (memory-less) context
        raise EngineError("the current context does not support logits computation. skipping",
                          "server_error")
    if route != "chat":  # before validating millions of token ids
        await check_size(state, data.get("prompt"), state.engine.n_ctx_slot)
    c = await asyncio.to_thread(completion_from, data, state.sampling_defaults,
                                state.cfg.n_predict, route, limits(state), tokenize_text(state),
                                ignore_eos=state.cfg.ignore_eos)
    if c.grammar is None and state.grammar is not None:  # --grammar / --json-schema
        c.grammar, c.grammar_source = state.grammar, state.cfg.grammar_source
    if c.speculative is not None and state.cfg.speculative is None:
        raise NotSupported("speculative.n_max / n_min / p_min need a server started with "
                           "speculative decoding (--spec-type or -md)")
    return c


async def token_mask(state: ServerState, grammar: Grammar | None,
                     triggers: list[dict] | None = None):
    """The grammar bound to this model's vocabulary (its first use builds the vocabulary's
    index, about half a second), off the event loop; a token it names that the vocabulary
    lacks is a 400. With grammar_triggers, it starts where they first match."""
    if grammar is None:
        return None
    tok = state.tokenizer
    try:
        if triggers:
            text = lambda t: tok.token_to_piece(t, special=True).decode(errors="replace")  # noqa
            find = trigger_finder(trigger_words(triggers, text))
            return await asyncio.to_thread(LazyGrammarMask, grammar, tok, find)
        return await asyncio.to_thread(grammar.mask, tok)
    except GrammarError as e:
        raise RequestError(f"invalid grammar: {e}") from None


# -- simple endpoints -------------------------------------------------------------------------

async def health(request: Request) -> Response:
    state: ServerState = request.app.state.server
    if not state.ready:
        return JSONResponse(LOADING, 503)
    failure = state.engine_failure
    if failure is not None:
        return error(f"the engine has stopped: {failure}", "unavailable_error")
    return JSONResponse({"status": "ok"})


async def models(request: Request) -> Response:
    state: ServerState = request.app.state.server
    meta = state.model_meta()
    entry = {"id": state.alias, "object": "model", "created": int(state.t_start),
             "owned_by": "llamacpp", "meta": meta}
    legacy = {"name": state.alias, "model": state.alias, "modified_at": "", "size": "",
              "digest": "", "type": "model", "description": "", "tags": [""],
              "capabilities": ["completion", "multimodal"] if state.mtmd else ["completion"],
              "parameters": "", "details": {}}
    return JSONResponse({"models": [legacy], "object": "list", "data": [entry]})


async def props(request: Request) -> Response:
    return JSONResponse(request.app.state.server.props())


async def slots(request: Request) -> Response:
    state: ServerState = request.app.state.server
    if not state.cfg.slots:
        return error("This server does not support slots endpoint. Start it with `--slots`",
                     "not_supported_error")
    return JSONResponse(state.engine.slots_info())


async def metrics(request: Request) -> Response:
    state: ServerState = request.app.state.server
    if not state.cfg.metrics:
        return error("This server does not support metrics endpoint. Start it with `--metrics`",
                     "not_supported_error")
    return PlainTextResponse(state.prometheus(), media_type="text/plain; version=0.0.4",
                             headers={"Process-Start-Time-Unix": str(int(state.t_start))})


async def tokenize(request: Request) -> Response:
    state: ServerState = request.app.state.server
    data = await read_json(request)
    validate(data, "tokenize", limits(state))
    content = data.get("content") or ""
    # as long as every slot's context together (at least 8192 tokens): bounds the time it takes
    await check_size(state, content, max(8192, state.engine.n_ctx_slot * state.cfg.n_parallel))
    ids = await asyncio.to_thread(state.tokenizer.tokenize, content,
                                  data.get("add_special") is True,
                                  data.get("parse_special") is not False)
    if data.get("with_pieces") is not True:
        return JSONResponse({"tokens": ids})
    pieces = []
    for t in ids:
        raw = state.tokenizer.token_to_piece(t, special=True)
        try:
            piece = raw.decode("utf-8")
        except UnicodeDecodeError:
            piece = list(raw)
        pieces.append({"id": t, "piece": piece})
    return JSONResponse({"tokens": pieces})


async def detokenize(request: Request) -> Response:
    state: ServerState = request.app.state.server
    data = await read_json(request)
    validate(data, "detokenize", limits(state))  # token ids within the vocabulary
    raw = await asyncio.to_thread(state.tokenizer.detokenize, data.get("tokens") or [])
    return JSONResponse({"content": raw.decode("utf-8", errors="replace")})


async def apply_template(request: Request) -> Response:
    state: ServerState = request.app.state.server
    data = await read_json(request)
    validate(data, "apply-template", limits(state))
    return JSONResponse({"prompt": (await render(state, data))[0]})


async def index(request: Request) -> Response:
    """The web page (server/static.py); app.state.static is (enabled, --path folder)."""
    return static.index(request, *request.app.state.static) or \
        error("File Not Found", "not_found_error")


# -- completions --------------------------------------------------------------------------------

class EventPoster:
    """Hands engine events to a loop's queues with one loop wake-up per burst: the engine thread
    emits one event per sequence and step, and call_soon_threadsafe per event (a lock and a
    self-pipe write each) was half of the engine's per-step work outside the forward pass at
    8 streams (py-spy, bench/server_throughput.py -np 8)."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop, self.lock = loop, threading.Lock()
        self.pending: list[tuple[asyncio.Queue, dict]] = []

    def post(self, queue: asyncio.Queue, ev: dict) -> None:
        with self.lock:
            self.pending.append((queue, ev))
            if len(self.pending) > 1:  # a drain is already scheduled
                return
        self.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self.lock:
            items, self.pending = self.pending, []
        for queue, ev in items:
            queue.put_nowait(ev)


_POSTERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def event_poster(loop: asyncio.AbstractEventLoop) -> EventPoster:
    poster = _POSTERS.get(loop)
    if poster is None:
        poster = _POSTERS[loop] = EventPoster(loop)
    return poster


class Run:
    """One request in flight: its task, event queue and response shape ("native", "text",
    "chat")."""

    def __init__(self, state: ServerState, request: Request, kind: str, c: Completion,
                 prompt: list[int] | Prompt, opens_thinking: bool = False, mask=None):
        self.state, self.request, self.kind, self.c = state, request, kind, c
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model = state.alias
        self.queue: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        prompt = prompt if isinstance(prompt, Prompt) else Prompt([int(t) for t in prompt])
        self.generation = SequenceRequest(
            prompt=prompt, params=c.params, n_predict=c.n_predict, stop=c.stop,
            ignore_eos=c.ignore_eos, n_probs=c.n_probs, post_sampling_probs=c.post_sampling_probs,
            id_slot=c.id_slot, cache_prompt=c.cache_prompt, starts_in_thinking=opens_thinking,
            reasoning_budget=state.cfg.reasoning_budget, think_end_tokens=state.think_end_tokens,
            timings_per_token=c.timings_per_token, token_mask=mask, speculative=c.speculative,
            n_keep=state.cfg.n_keep if c.n_keep is None else c.n_keep)
        poster = event_poster(loop)
        self.emit = lambda ev: poster.post(self.queue, ev)
        self.seq: Sequence | None = None
        self.reasoning = ReasoningParser(c.reasoning_format or state.cfg.reasoning_format,
                                         opens_thinking) \
            if kind == "chat" else ReasoningParser("none")
        self.content = self.reasoning_text = ""
        self.tool_parser = None  # chat with tools: content in, content and tool-call deltas out
        self.tool_deltas: list[dict] = []  # the tool-call deltas of the last event
        self.tokens: list[int] = []
        self.probs: list[dict] = []

    async def events(self) -> AsyncIterator[dict]:
        """Engine events of the submitted task until done; cancelled if the client goes away."""
        try:
            while True:
                try:
                    ev = await asyncio.wait_for(self.queue.get(), timeout=0.5)
                except asyncio.TimeoutError:
                    if await self.request.is_disconnected():
                        return
                    continue
                yield ev
                if ev["type"] in ("done", "error"):
                    return
        finally:
            if self.seq is not None and not self.seq.finished:
                self.state.engine.cancel(self.seq)

    def absorb(self, ev: dict) -> tuple[str, str]:
        """Record a token/done event; returns the (reasoning, content) text it adds."""
        if ev.get("token") is not None:
            self.tokens.append(ev["token"])
        if ev.get("probs") and ev["type"] == "token":
            self.probs.append(self.prob_entry(ev))
        done = ev["type"] == "done"
        split = self.reasoning.feed(ev.get("text", ""), final=done)
        self.reasoning_text += split.reasoning
        if self.tool_parser is None:
            self.content += split.content
            return split.reasoning, split.content
        deltas = self.tool_parser.feed(split.content) + (self.tool_parser.finish() if done
                                                         else [])
        self.content = self.tool_parser.content
        self.tool_deltas = [d for d in deltas if "tool_calls" in d]
        return split.reasoning, "".join(d.get("content", "") for d in deltas)

    @property
    def tool_calls(self) -> list[dict]:
        return self.tool_parser.tool_calls if self.tool_parser is not None else []

    def prob_entry(self, ev: dict) -> dict:
        tok, post = self.state.tokenizer, self.c.post_sampling_probs
        key = "prob" if post else "logprob"

        def value(p: float) -> float:
            # llama.cpp: log(0) would become null in JSON, so it reports the lowest float
            return p if post else (math.log(p) if p > 0 else -3.4028234663852886e38)

        def piece(t: int) -> tuple[str, list[int]]:
            raw = tok.token_to_piece(t, special=True)
            return raw.decode("utf-8", errors="replace"), list(raw)

        text, raw = piece(ev["token"])
        top = [{"id": t, "token": piece(t)[0], "bytes": piece(t)[1], key: value(p)}
               for t, p in ev["probs"]["top"]]
        return {"id": ev["token"], "token": text, "bytes": raw, key: value(ev["probs"]["p"]),
                ("top_probs" if post else "top_logprobs"): top}


def finish_reason(done: dict, run: Run | None = None) -> str:
    if done["stop_type"] not in ("eos", "word"):
        return "length"
    return "tool_calls" if run is not None and run.tool_calls else "stop"


def usage(done: dict) -> dict:
    return {"completion_tokens": done["n_decoded"], "prompt_tokens": done["n_prompt"],
            "total_tokens": done["n_decoded"] + done["n_prompt"],
            "prompt_tokens_details": {"cached_tokens": done["n_cached"]}}


def oai_logprobs(run: Run) -> dict | None:
    """OpenAI's logprobs.content; with `logprobs`, top_logprobs shows as many as asked (the
    engine reports one at least, for the chosen token's own logprob)."""
    if not run.probs:
        return None
    shown = run.c.top_logprobs if run.c.logprobs else None
    content = [{"id": p["id"], "token": p["token"], "bytes": p["bytes"],
                "logprob": p.get("logprob", p.get("prob")),
                "top_logprobs": [{"id": t["id"], "token": t["token"], "bytes": t["bytes"],
                                  "logprob": t.get("logprob", t.get("prob"))}
                                 for t in p.get("top_logprobs", p.get("top_probs", []))][:shown]}
               for p in run.probs]
    return {"content": content}


def final_json(run: Run, done: dict) -> dict:
    """The non-streamed response body."""
    if run.kind == "native":
        body = {"index": 0, "content": run.content, "tokens": run.tokens if run.c.return_tokens
                else [], "id_slot": done["id_slot"], "stop": True, "model": run.model,
                "tokens_predicted": done["n_decoded"], "tokens_evaluated": done["n_prompt"],
                "generation_settings": run.state.generation_settings(run.c),
                "has_new_line": "\n" in run.content, "truncated": done["truncated"],
                "stop_type": done["stop_type"], "stopping_word": done["stopping_word"],
                "tokens_cached": done["n_prompt"] + done["n_decoded"],
                "timings": done["timings"]}
        if run.probs:
            body["completion_probabilities"] = run.probs
        return body
    base = {"created": run.created, "model": run.model, "system_fingerprint": "llamacpy",
            "usage": usage(done), "id": run.id, "timings": done["timings"]}
    if run.kind == "text":
        choice = {"text": run.content, "index": 0, "logprobs": oai_logprobs(run),
                  "finish_reason": finish_reason(done)}
        return {"choices": [choice], "object": "text_completion", **base}
    message = {"role": "assistant", "content": run.content}
    if run.reasoning_text:
        message["reasoning_content"] = run.reasoning_text
    if run.tool_calls:
        message["tool_calls"] = run.tool_calls
    choice = {"finish_reason": finish_reason(done, run), "index": 0, "message": message}
    if run.probs:
        choice["logprobs"] = oai_logprobs(run)
    return {"choices": [choice], "object": "chat.completion", **base}


def sse(data: dict | str) -> str:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n"


async def stream_body(run: Run, events: AsyncIterator[dict]) -> AsyncIterator[str]:
    """Server-sent events in llama.cpp's chunk shapes. The stream starts after the first engine
    event (respond), so an error here came after tokens were sent: llama.cpp's error event, as
    the status can no longer say it."""
    base = {"created": run.created, "id": run.id, "model": run.model,
            "system_fingerprint": "llamacpy"}
    if run.kind == "chat":
        yield sse({"choices": [{"finish_reason": None, "index": 0,
                                "delta": {"role": "assistant", "content": None}}],
                   "object": "chat.completion.chunk", **base})
    async for ev in events:
        if ev["type"] == "error":
            yield sse({"error": {"code": 500, "message": ev["message"], "type": ev["kind"]}})
            return
        reasoning, content = run.absorb(ev)
        for chunk in stream_chunks(run, ev, reasoning, content, base):
            yield sse(chunk)
        if ev["type"] == "done" and run.kind != "native":
            yield sse("[DONE]")


def stream_chunks(run: Run, ev: dict, reasoning: str, content: str, base: dict) -> list[dict]:
    chunks = event_chunks(run, ev, reasoning, content, base)
    if "timings" in ev and ev["type"] == "token":  # timings_per_token
        for chunk in chunks:
            chunk["timings"] = ev["timings"]
    return chunks


def event_chunks(run: Run, ev: dict, reasoning: str, content: str, base: dict) -> list[dict]:
    done = ev["type"] == "done"
    if run.kind == "native":
        chunk = {"index": 0, "content": content, "tokens": [ev["token"]] if ev.get("token")
                 is not None else [], "stop": done, "id_slot": ev.get("id_slot", -1),
                 "tokens_predicted": len(run.tokens),
                 "tokens_evaluated": len(run.generation.prompt)}
        if ev.get("probs") and not done:
            chunk["completion_probabilities"] = [run.probs[-1]]
        if done:
            chunk.update(final_json(run, ev))
            chunk["content"] = content
        return [chunk]
    out = []
    if run.kind == "text":
        if content or reasoning:
            out.append({"choices": [{"text": content, "index": 0, "logprobs": None,
                                     "finish_reason": None}], "object": "text_completion",
                        **base})
        if done:
            out.append({"choices": [{"text": "", "index": 0, "logprobs": None,
                                     "finish_reason": finish_reason(ev)}],
                        "object": "text_completion", "usage": usage(ev),
                        "timings": ev["timings"], **base})
        return out
    delta = {}
    if reasoning:
        delta["reasoning_content"] = reasoning
    if content:
        delta["content"] = content
    if delta:
        choice = {"finish_reason": None, "index": 0, "delta": delta}
        if run.c.logprobs and ev.get("probs"):
            choice["logprobs"] = {"content": oai_logprobs(run)["content"][-1:]}
        out.append({"choices": [choice], "object": "chat.completion.chunk", **base})
    for tool_delta in run.tool_deltas:
        out.append({"choices": [{"finish_reason": None, "index": 0, "delta": tool_delta}],
                    "object": "chat.completion.chunk", **base})
    run.tool_deltas = []
    if done:
        final = {"choices": [{"finish_reason": finish_reason(ev, run), "index": 0, "delta": {}}],
                 "object": "chat.completion.chunk", **base}
        if run.c.include_usage:
            out.append(final)
            final = {"choices": [], "object": "chat.completion.chunk", "usage": usage(ev),
                     **base}
        final["timings"] = ev["timings"]
        out.append(final)
    return out


async def respond(run: Run) -> Response:
    """Wait for the first engine event: a request that fails at its prompt gets its error status,
    and only then does a stream commit to 200."""
    events = run.events()
    first = await anext(events, None)
    if first is None:  # the client went away
        return Response(status_code=499)
    if first["type"] == "error":
        await events.aclose()
        return error(first["message"], first["kind"])
    events = resumed(first, events)
    if run.c.stream:
        return StreamingResponse(stream_body(run, events), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", **cors()})
    done = None
    async for ev in events:
        if ev["type"] == "error":
            return error(ev["message"], ev["kind"])
        run.absorb(ev)
        if ev["type"] == "done":
            done = ev
    if done is None:  # the client went away
        return Response(status_code=499)
    return JSONResponse(final_json(run, done), headers=cors())


async def resumed(first: dict, events: AsyncIterator[dict]) -> AsyncIterator[dict]:
    """The events again, from the one already taken; closing it closes them."""
    try:
        yield first
        async for ev in events:
            yield ev
    finally:
        await events.aclose()


async def completion(request: Request) -> Response:
    """POST /completion (llama.cpp's native API)."""
    state: ServerState = request.app.state.server
    data, c = await request_completion(request, "completion")
    # tokenized (images decoded and resized) off the event loop
    prompt = await asyncio.to_thread(state.completion_prompt, data["prompt"])
    mask = await token_mask(state, c.grammar, c.grammar_triggers)
    return await start(Run(state, request, "native", c, prompt, mask=mask))


async def completions_oai(request: Request) -> Response:
    """POST /v1/completions (OpenAI text completions)."""
    data, c = await request_completion(request, "completions")
    return await start(await text_run(request, data, c))


async def text_run(request: Request, data: dict, c: Completion) -> Run:
    """The Run of a /v1/completions body (the Ollama routes' raw prompts too), not submitted."""
    state: ServerState = request.app.state.server
    prompt = data["prompt"]
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    tokens = await asyncio.to_thread(state.prompt_tokens, prompt)
    mask = await token_mask(state, c.grammar, c.grammar_triggers)
    return Run(state, request, "text", c, tokens, mask=mask)


async def chat_completions(request: Request) -> Response:
    """POST /v1/chat/completions (OpenAI chat)."""
    data, c = await request_completion(request, "chat")
    return await start(await chat_run(request, data, c))


async def chat_run(request: Request, data: dict, c: Completion, prefix: str = "") -> Run:
    """The Run of a chat body (the Ollama routes' too), not submitted; `prefix` goes before
    the rendered prompt (Ollama's `context`)."""
    state: ServerState = request.app.state.server
    text, _, files, plan = await render(state, data)
    text = prefix + text
    await check_size(state, text, state.engine.n_ctx_slot)
    prompt = await asyncio.to_thread(state.chat_prompt, text, files)
    if plan is not None:
        c.stop = c.stop + [s for s in plan.grammar.stops if s not in c.stop]
        mask = await tool_mask(state, plan)
    else:
        mask = await token_mask(state, c.grammar, c.grammar_triggers)
    run = Run(state, request, "chat", c, prompt, prompt_opens_thinking(text), mask=mask)
    run.tool_parser = plan.parser() if plan is not None else None
    return run


async def tool_mask(state: ServerState, plan):
    """The tool-call grammar: from the first token ("required", a named function, the
    generic format), else lazily, from where the model starts a call."""
    grammar = Grammar.from_lark(plan.grammar.lark)
    if not plan.grammar.lazy:
        return await token_mask(state, grammar)
    return await asyncio.to_thread(LazyGrammarMask, grammar, state.tokenizer,
                                   plan.grammar.find_trigger)


async def start(run: Run) -> Response:
    """Queue the task (a refusal, e.g. a prompt too long, is a plain JSON error) and answer."""
    try:
        run.seq = run.state.engine.submit(run.generation, run.emit)
    except EngineError as e:
        return error(str(e), e.kind, **e.extra)
    return await respond(run)


# -- the application -----------------------------------------------------------------------------

def handle_errors(fn):
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except RequestError as e:
            return error(str(e), e.kind, e.status)
        except EngineError as e:
            return error(str(e), e.kind, **e.extra)
        except Exception as e:  # noqa: BLE001 - a bad request never takes the server down
            return error(f"{type(e).__name__}: {e}", "server_error")
    return wrapped


async def openapi(request: Request) -> Response:
    """GET /openapi.json: this server's API as an OpenAPI 3.1 document (openapi.py)."""
    state: ServerState = request.app.state.server
    return JSONResponse(document(limits(state), state.alias), headers=cors())


ROUTES = [
    ("/health", health, ["GET"]), ("/v1/health", health, ["GET"]),
    ("/models", models, ["GET"]), ("/v1/models", models, ["GET"]),
    ("/props", props, ["GET"]), ("/slots", slots, ["GET"]), ("/metrics", metrics, ["GET"]),
    ("/completion", completion, ["POST"]), ("/completions", completion, ["POST"]),
    ("/v1/completions", completions_oai, ["POST"]),
    ("/chat/completions", chat_completions, ["POST"]),
    ("/v1/chat/completions", chat_completions, ["POST"]),
    ("/tokenize", tokenize, ["POST"]), ("/detokenize", detokenize, ["POST"]),
    ("/apply-template", apply_template, ["POST"]), ("/", index, ["GET"]),
    ("/openapi.json", openapi, ["GET"]),
]


async def not_found(request: Request, exc) -> Response:
    served = static.folder_file(request, *getattr(request.app.state, "static", (False, "")))
    return served or error("File Not Found", "not_found_error")


async def method_not_allowed(request: Request, exc) -> Response:
    from .embeddings import ROUTES as EMBEDDINGS

    allowed = next((m for p, _, m in ROUTES + EMBEDDINGS if p == request.url.path), [])
    response = error(f"{request.method} is not allowed on {request.url.path}: use "
                     f"{' or '.join(allowed)}", "invalid_request_error", 405)
    response.headers["Allow"] = ", ".join(allowed)
    return response


async def internal_error(request: Request, exc: Exception) -> Response:
    """Whatever escaped a handler: still llama.cpp's error shape."""
    return error(f"{type(exc).__name__}: {exc}", "server_error")


def build_app(state: ServerState):
    from . import ollama, ollama_http  # they build on this module
    from . import embeddings

    routes = [Route(p, handle_errors(fn), methods=m) for p, fn, m in ROUTES + embeddings.ROUTES]
    routes += [Route(p, ollama.ollama_errors(fn), methods=m) for p, fn, m in ollama.ROUTES]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: method_not_allowed,
                                                       Exception: internal_error})
    app.state.server = state
    app.state.static = (state.cfg.webui, state.cfg.static_path)
    # Ollama's routes (/api/*) get its CORS origins, Host check and error shape
    return ollama_http.OllamaGuard(Gate(app, state), state.api_keys, state.cfg.host,
                                   lambda: state.ready, routes=ollama.ROUTES)
