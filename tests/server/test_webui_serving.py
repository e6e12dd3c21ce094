"""How llama-server serves its web page (server/static.py), without a browser: the built page at
/ (gzip-compressed when the client accepts it, revalidated by ETag), --no-webui's 404 and
--path DIR's folder (llama.cpp's static mount), as real servers and as the route handlers."""

from __future__ import annotations

import gzip
import hashlib
import re

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route
from starlette.testclient import TestClient

from llamacpy.server import app as single
from llamacpy.server import static

from .conftest import start_server, stop_server


@pytest.fixture(scope="module")
def smol(model_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("webui-serving")
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "256", "--api-key",
                           "k"], str(folder / "log"))
    yield server
    stop_server(server)


def test_the_page_is_served_gzip_compressed_small_and_public(smol):
    r = httpx.get(f"{smol.url}/", headers={"Accept-Encoding": "gzip"})  # no key: / is public
    assert r.status_code == 200 and r.headers["content-encoding"] == "gzip"
    assert r.headers["content-type"].startswith("text/html")
    assert int(r.headers["content-length"]) < 1_000_000  # the budget, on the wire
    assert r.content == static.WEBUI.read_bytes()  # httpx undid the gzip
    with httpx.stream("GET", f"{smol.url}/", headers={"Accept-Encoding": "gzip"}) as wire:
        packed = b"".join(wire.iter_raw())
    assert len(packed) == int(r.headers["content-length"])
    assert gzip.decompress(packed) == static.WEBUI.read_bytes()
    assert '<html lang="en">' in r.text
    raw = httpx.get(f"{smol.url}/", headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in raw.headers and raw.content == static.WEBUI.read_bytes()
    again = httpx.get(f"{smol.url}/", headers={"If-None-Match": r.headers["etag"]})
    assert again.status_code == 304 and not again.content
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", r.text)  # nothing from a CDN


@pytest.mark.parametrize("header, accepted", [
    ("gzip, deflate, br", True), ("br;q=1.0, gzip;q=0.8", True), ("*", True),
    ("gzip;q=0", False), ("identity", False), ("", False), ("gzip;q=x", False)])
def test_accept_encoding(header, accepted):
    assert static.accepts_gzip(header) is accepted


def handlers(enabled: bool, folder: str) -> TestClient:
    """The server's own / and 404 handlers, with app.state.static as build_app sets it."""
    app = Starlette(routes=[Route("/", single.index, methods=["GET"])],
                    exception_handlers={404: single.not_found})
    app.state.static = (enabled, folder)
    return TestClient(app)


def test_path_serves_a_folder_and_nothing_outside_it(tmp_path):
    site = tmp_path / "site"
    (site / "css").mkdir(parents=True)
    (site / "index.html").write_text("<p>custom page</p>")
    (site / "app.js").write_text("console.log(1)")
    (site / "css" / "index.html").write_text("css folder")
    (tmp_path / "secret.txt").write_text("outside")
    client = handlers(True, str(site))
    r = client.get("/", headers={"Accept-Encoding": "gzip"})
    assert r.text == "<p>custom page</p>" and r.headers["content-encoding"] == "gzip"
    js = client.get("/app.js")
    assert js.text == "console.log(1)" and "javascript" in js.headers["content-type"]
    assert client.get("/css/").text == "css folder"
    for path in ("/../secret.txt", "/%2e%2e/secret.txt", "/css/../../secret.txt",
                 "/missing.css", "/%00", "/" + "a" * 5000):
        r = client.get(path)
        assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error", path
    assert client.post("/app.js").status_code == 404  # only GET and HEAD read files
    assert handlers(True, "").get("/app.js").status_code == 404  # no --path: no folder
    empty = tmp_path / "empty"
    empty.mkdir()
    assert handlers(True, str(empty)).get("/").status_code == 404  # a folder without index


def test_no_webui_and_a_missing_path_on_real_servers(model_paths, tmp_path):
    model = str(model_paths["smollm2-135m"])
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<p>custom page</p>")
    off = start_server(["-m", model, "-c", "256", "--no-webui", "--path", str(site)],
                       str(tmp_path / "off.log"))
    custom = start_server(["-m", model, "-c", "256", "--path", str(site)],
                          str(tmp_path / "on.log"))
    try:
        r = httpx.get(f"{off.url}/")  # --no-webui wins over --path, as in llama.cpp
        assert r.status_code == 404 and r.json()["error"] == {
            "code": 404, "message": "File Not Found", "type": "not_found_error"}
        assert httpx.get(f"{off.url}/index.html").status_code == 404
        assert httpx.get(f"{custom.url}/").text == "<p>custom page</p>"
        assert httpx.get(f"{custom.url}/health").json() == {"status": "ok"}
    finally:
        stop_server(off)
        stop_server(custom)
    bad = start_server(["-m", model, "--path", str(tmp_path / "nowhere")],
                       str(tmp_path / "bad.log"), wait=False)
    assert bad.proc.wait(timeout=60) == 1
    assert "static assets path not found" in bad.log()


def test_the_built_page_matches_its_source():
    """The committed build names the sha256 of what it was built from (webui-src/build.mjs):
    a change under webui-src/ without `npm run build` fails here."""
    src = static.WEBUI.parents[3] / "webui-src"
    names = ["build.mjs", "package-lock.json", *(f"src/{p.name}" for p in (src / "src").iterdir())]
    digest = hashlib.sha256()
    for name in sorted(names):
        digest.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    built = re.search(r"<!-- built from webui-src, sha256 (\w+) -->",
                      static.WEBUI.read_text(encoding="utf-8"))
    assert built and built.group(1) == digest.hexdigest(), \
        "llamacpy/server/webui/index.html is stale: cd webui-src && npm ci && npm run build"
