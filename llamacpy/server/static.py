"""The web chat page: the built single-file app (webui/index.html, source in webui-src/) at "/",
gzip-compressed for browsers that accept it; with --path DIR, the files of DIR instead (llama.cpp
mounts that folder at "/"). --no-webui turns both off: 404, as llama.cpp does."""

from __future__ import annotations

import functools
import gzip
import hashlib
import mimetypes
from pathlib import Path

from starlette.requests import Request
from starlette.responses import Response

WEBUI = Path(__file__).with_name("webui") / "index.html"
COMPRESSIBLE = ("text/", "application/javascript", "application/json", "image/svg+xml")


def check_folder(path: str) -> str:
    """--path DIR as given, or a ValueError when it is no folder (llama.cpp stops at start:
    "static assets path not found")."""
    if path and not Path(path).is_dir():
        raise ValueError(f"static assets path not found: {path}")
    return path


@functools.lru_cache(maxsize=64)
def _encoded(path: Path, mtime_ns: int) -> tuple[bytes, bytes | None, str]:
    """A file's bytes, its gzip form (text types only) and its ETag, read once per version."""
    raw = path.read_bytes()
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    packed = gzip.compress(raw, 9, mtime=0) if kind.startswith(COMPRESSIBLE) else None
    return raw, packed, '"' + hashlib.sha1(raw).hexdigest()[:20] + '"'


def send_file(request: Request, path: Path) -> Response:
    raw, packed, etag = _encoded(path, path.stat().st_mtime_ns)
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    headers = {"ETag": etag, "Cache-Control": "no-cache", "Vary": "Accept-Encoding"}
    if request.headers.get("if-none-match") in (etag, "W/" + etag):
        return Response(status_code=304, headers=headers)
    if packed is not None and accepts_gzip(request.headers.get("accept-encoding", "")):
        raw, headers["Content-Encoding"] = packed, "gzip"
    body = b"" if request.method == "HEAD" else raw
    response = Response(body, media_type=kind, headers=headers)
    response.headers["Content-Length"] = str(len(raw))
    return response


def accepts_gzip(header: str) -> bool:
    """Accept-Encoding names gzip (or *) with a non-zero q."""
    for item in header.lower().split(","):
        name, _, params = item.strip().partition(";")
        q = params.strip().removeprefix("q=") if params.strip().startswith("q=") else "1"
        if name.strip() in ("gzip", "*"):
            try:
                return float(q) > 0
            except ValueError:
                return False
    return False


def in_folder(folder: str, url_path: str) -> Path | None:
    """The file of --path DIR that a URL path names, never outside DIR."""
    root = Path(folder).resolve()
    try:
        target = (root / url_path.lstrip("/")).resolve()
        if target.is_dir():
            target = target / "index.html"
        return target if target.is_relative_to(root) and target.is_file() else None
    except (OSError, ValueError):  # a NUL byte, a name too long: no such file
        return None


def index(request: Request, enabled: bool, folder: str) -> Response | None:
    """GET / : the built page, or DIR/index.html with --path; None when there is none."""
    if not enabled:
        return None
    path = in_folder(folder, "index.html") if folder else WEBUI
    return send_file(request, path) if path else None


def folder_file(request: Request, enabled: bool, folder: str) -> Response | None:
    """Any other GET under --path DIR (the route table's 404 handler asks here first)."""
    if not (enabled and folder and request.method in ("GET", "HEAD")):
        return None
    path = in_folder(folder, request.url.path)
    return send_file(request, path) if path else None
