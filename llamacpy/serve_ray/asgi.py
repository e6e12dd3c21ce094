"""One HTTP request through an ASGI app in this process, its answer as a stream of parts: how a
model replica runs llama-server's own Starlette app (server/app.py) on a request the ingress
forwarded, so validation, templates, SSE and error shapes are the server's, unchanged.

A request is a plain dict (it crosses Ray): method, path, query, headers, body. The answer is
a head {"status", "headers"} followed by body bytes; parts that are ready together go as one,
so a busy stream costs fewer Ray messages. Closing the stream is the client leaving: the app
sees http.disconnect and its task is cancelled, which cancels the generation (app.Run.events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "keep-alive",
               "upgrade", "proxy-connection", "te", "trailer"}
DONE = object()  # the app returned


def scope_of(req: dict) -> dict:
    """The ASGI HTTP scope of a forwarded request."""
    path = req["path"]
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1", "method": req["method"], "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": req.get("query", "").encode("latin-1"),
            "root_path": "", "server": ("127.0.0.1", 80),
            "client": tuple(req.get("client") or ("127.0.0.1", 0)),
            "headers": [(k.lower().encode("latin-1"), v.encode("latin-1"))
                        for k, v in req["headers"]], "state": {}}


async def call(app, req: dict) -> AsyncIterator[dict | bytes]:
    """Run `req` through `app`: the response head, then its body in chunks."""
    out: asyncio.Queue = asyncio.Queue()
    gone, sent = asyncio.Event(), [False]

    async def receive() -> dict:
        if not sent[0]:
            sent[0] = True
            return {"type": "http.request", "body": req.get("body", b""), "more_body": False}
        await gone.wait()  # a client that leaves, or the answer already read
        return {"type": "http.disconnect"}

    async def run() -> None:
        try:
            await app(scope_of(req), receive, out.put)
        finally:
            out.put_nowait(DONE)

    task = asyncio.create_task(run())
    try:
        async for part in parts(out):
            yield part
        await task  # an exception that escaped the app's own handlers
    finally:
        gone.set()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


async def parts(out: asyncio.Queue) -> AsyncIterator[dict | bytes]:
    """The ASGI messages as a head and body chunks, the chunks queued together joined."""
    while True:
        msg = await out.get()
        if msg is DONE:
            return
        if msg["type"] == "http.response.start":
            headers = [(k.decode("latin-1"), v.decode("latin-1"))
                       for k, v in msg.get("headers", []) if k.decode("latin-1") not in HOP_HEADERS]
            yield {"status": msg["status"], "headers": headers}
            continue
        body, more = bytearray(msg.get("body", b"")), msg.get("more_body", False)
        while more and not out.empty():
            nxt = out.get_nowait()
            if nxt is DONE:
                out.put_nowait(DONE)
                break
            body += nxt.get("body", b"")
            more = nxt.get("more_body", False)
        if body:
            yield bytes(body)
        if not more:
            return
