"""A static page on another loopback origin calls the Ollama routes with fetch, as local-first
web apps call Ollama: /api/generate not streamed, /api/chat streamed through a ReadableStream
reader. Driven in headless Chromium (Debian's package, through Playwright) like test_webui.py;
the answers must equal what the same requests get over plain HTTP. A page from an origin
Ollama does not allow gets no answer (the browser blocks it) and takes its offline path."""

from __future__ import annotations

import functools
import http.server
import json
import threading

import httpx
import pytest

from tests.server.conftest import free_port, start_server, stop_server
from tests.server.test_webui import BROWSER_ARGS, CHROMIUM

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(.ci/run installs it)")
OPTIONS = {"temperature": 0, "num_predict": 16}
GENERATE = {"model": "llama3.2:3b", "prompt": "Name a colour.", "stream": False,
            "options": OPTIONS}
CHAT = {"model": "llama3.2:3b", "messages": [{"role": "user", "content": "Say hello."}],
        "options": OPTIONS}
PAGE = """<!doctype html><html><body>
<div id="generate"></div><div id="chat"></div><div id="state">working</div>
<script>
const api = new URLSearchParams(location.search).get('api');
async function generate() {
  const r = await fetch(api + '/api/generate', {method: 'POST',
    headers: {'Content-Type': 'application/json'}, body: JSON.stringify(GENERATE)});
  const body = await r.json();
  document.getElementById('generate').textContent = body.done ? body.response : '?';
}
async function chat() {
  const r = await fetch(api + '/api/chat', {method: 'POST',
    headers: {'Content-Type': 'application/json'}, body: JSON.stringify(CHAT)});
  const reader = r.body.getReader(), decoder = new TextDecoder();
  let buffer = '', text = '', lines = 0;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, {stream: true});
    let nl;
    while ((nl = buffer.indexOf('\\n')) >= 0) {
      const line = JSON.parse(buffer.slice(0, nl));
      buffer = buffer.slice(nl + 1);
      lines += 1;
      text += line.message.content;
      if (line.done) document.getElementById('chat').dataset.lines = lines;
    }
  }
  document.getElementById('chat').textContent = text;
}
generate().then(chat).then(() => { document.getElementById('state').textContent = 'done'; })
  .catch(e => { document.getElementById('state').textContent = 'offline: ' + e; });
</script></body></html>"""


def serve_page(folder, host: str) -> tuple[str, http.server.HTTPServer]:
    page = PAGE.replace("GENERATE", json.dumps(GENERATE)).replace("CHAT", json.dumps(CHAT))
    (folder / "index.html").write_text(page)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    httpd = http.server.ThreadingHTTPServer((host, free_port()), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return f"http://{host}:{httpd.server_address[1]}", httpd


@pytest.fixture(scope="module")
def setup(model_paths, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("ollama-page")
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "2048", "-t", "2",
                           "--jinja"], str(folder / "log"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        yield server, browser, folder
        browser.close()
    stop_server(server)


def open_page(setup, host: str):
    server, browser, folder = setup
    site = folder / host
    site.mkdir(exist_ok=True)
    origin, httpd = serve_page(site, host)
    page = browser.new_page()
    page.goto(f"{origin}/index.html?api={server.url}")
    page.wait_for_selector("#state:not(:has-text('working'))", timeout=120_000)
    return page, httpd


def test_a_page_on_another_origin_gets_both_answers(setup):
    server = setup[0]
    page, httpd = open_page(setup, "localhost")  # another origin than 127.0.0.1:port
    try:
        assert page.inner_text("#state") == "done"
        expected = httpx.post(server.url + "/api/generate", json=GENERATE, timeout=120).json()
        assert page.inner_text("#generate") == expected["response"] != ""
        lines = [json.loads(x) for x in httpx.post(server.url + "/api/chat", json=CHAT,
                                                   timeout=120).text.splitlines()]
        assert page.inner_text("#chat") == "".join(x["message"]["content"] for x in lines)
        assert int(page.get_attribute("#chat", "data-lines")) == len(lines) > 2
    finally:
        httpd.shutdown()


def test_a_page_from_a_refused_origin_takes_its_offline_path(setup):
    page, httpd = open_page(setup, "127.0.0.2")  # loopback, but not an origin Ollama allows
    try:
        assert page.inner_text("#state").startswith("offline: TypeError")
        assert page.inner_text("#generate") == ""
    finally:
        httpd.shutdown()
