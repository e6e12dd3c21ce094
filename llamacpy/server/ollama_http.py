"""The HTTP rules of Ollama's routes (/api/*): its error shape, its CORS origins and its
Host-header check against DNS rebinding (ollama server/routes.go: GenerateRoutes,
allowedHostsMiddleware; envconfig.AllowedOrigins).

The guard sits in front of the whole application but acts on /api/* only, so the OpenAI and
llama.cpp routes keep llama.cpp's rules (any origin, no Host check).
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
import socket

from starlette.responses import JSONResponse, Response

OLLAMA_PREFIX = "/api/"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "0.0.0.0")
LOCAL_SCHEMES = ("app", "file", "tauri", "vscode-webview", "vscode-file")
LOCAL_TLDS = (".localhost", ".local", ".internal")
ALLOW_HEADERS = ("Authorization, Content-Type, User-Agent, Accept, X-Requested-With, "
                 "OpenAI-Beta, x-stainless-arch, x-stainless-async, x-stainless-lang, "
                 "x-stainless-os, x-stainless-package-version, x-stainless-retry-count, "
                 "x-stainless-runtime, x-stainless-runtime-version, x-stainless-timeout")
ALLOW_METHODS = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
PUBLIC = {"/api/tags"}  # as llama.cpp's server: listing the model needs no API key (router: it does)


def ollama_error(message: str, status: int) -> JSONResponse:
    """Ollama's error body: {"error": "..."}."""
    return JSONResponse({"error": message}, status_code=status)


def allowed_origins(env: str | None = None) -> list[str]:
    """OLLAMA_ORIGINS (comma separated, `*` wildcards), then Ollama's defaults: localhost,
    127.0.0.1 and 0.0.0.0 on any port, and the app://, file://, tauri://, vscode-webview://
    schemes."""
    env = os.environ.get("OLLAMA_ORIGINS", "") if env is None else env
    origins = [o.strip() for o in env.split(",") if o.strip()]
    for host in LOCAL_HOSTS:
        origins += [f"http://{host}", f"https://{host}", f"http://{host}:*",
                    f"https://{host}:*"]
    return origins + [f"{scheme}://*" for scheme in LOCAL_SCHEMES]


def origin_allowed(origin: str, patterns: list[str]) -> bool:
    return any(p == "*" or fnmatch.fnmatchcase(origin.lower(), p.lower()) for p in patterns)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def host_allowed(header: str) -> bool:
    """Whether a Host header names this machine (Ollama's allowedHost): an IP that is
    loopback, private, unspecified or one of ours; localhost, this host's name, or a name
    under .localhost, .local or .internal."""
    host = header.lower()
    if host.startswith("["):  # [::1]:11434
        host = host[1:].split("]", 1)[0]
    elif host.count(":") == 1:
        host = host.split(":", 1)[0]
    if host in ("", "localhost") or host == socket.gethostname().lower():
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return host.endswith(LOCAL_TLDS)
    return ip.is_loopback or ip.is_private or ip.is_unspecified or host in own_addresses()


def own_addresses() -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(socket.gethostname(), None)}
    except OSError:
        return set()


class OllamaGuard:
    """ASGI middleware for /api/*: the Host check when bound to loopback (403), CORS with
    Ollama's origins (preflights answered 204), the API key and the loading state in
    Ollama's error shape; other paths pass through untouched."""

    def __init__(self, app, api_keys, bound_host: str, ready=lambda: True, public=PUBLIC,
                 routes=()):
        self.app, self.api_keys, self.ready, self.public = app, api_keys, ready, public
        self.methods = {path: set(methods) for path, _, methods in routes}
        self.check_host = is_loopback(bound_host)
        self.origins = allowed_origins()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(OLLAMA_PREFIX):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope["headers"]}
        if self.check_host and not host_allowed(headers.get("host", "")):
            return await Response(status_code=403)(scope, receive, send)
        cors = self.cors_headers(headers.get("origin"))
        if scope["method"] == "OPTIONS":
            status = 204 if cors or "origin" not in headers else 403
            return await Response(status_code=status, headers=cors)(scope, receive, send)
        refusal = self.refusal(scope["path"], headers) or \
            self.unrouted(scope["path"], scope["method"])
        if refusal is not None:
            refusal.headers.update(cors)
            return await refusal(scope, receive, send)
        await self.app(scope, receive, with_headers(send, cors))

    def cors_headers(self, origin: str | None) -> dict:
        if not origin or not origin_allowed(origin, self.origins):
            return {}
        return {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
                "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Allow-Methods": ALLOW_METHODS,
                "Access-Control-Max-Age": "43200"}

    def unrouted(self, path: str, method: str) -> Response | None:
        """Gin's 404 and 405 for /api/* paths and methods Ollama's API lacks, in its shape."""
        if path not in self.methods:
            return ollama_error("404 page not found", 404)
        if method not in self.methods[path]:
            response = ollama_error("405 method not allowed", 405)
            response.headers["Allow"] = ", ".join(sorted(self.methods[path]))
            return response
        return None

    def refusal(self, path: str, headers: dict) -> Response | None:
        if self.api_keys and path not in self.public:
            key = headers.get("authorization") or headers.get("x-api-key") or ""
            if key.removeprefix("Bearer ") not in self.api_keys:
                return ollama_error("Invalid API Key", 401)
        if not self.ready():
            return ollama_error("Loading model", 503)
        return None


def with_headers(send, extra: dict):
    """`send` that puts Ollama's CORS headers on the response start, in place of any
    Access-Control-* header the app set (an origin Ollama refuses gets none)."""
    added = [(k.encode(), v.encode()) for k, v in extra.items()]

    async def wrapped(message):
        if message["type"] == "http.response.start":
            kept = [(k, v) for k, v in message.get("headers", [])
                    if not k.lower().startswith(b"access-control-") and k.lower() != b"vary"]
            message = {**message, "headers": kept + added}
        await send(message)
    return wrapped
