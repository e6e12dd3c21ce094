"""The web chat page (llamacpy/server/webui/, built from webui-src/) in a real headless Chromium
(Debian's package, driven by Playwright) against real servers: SmolLM2-135M behind an API key,
and the tiny Qwen3.5 with its vision projector and a template that opens a think block. Replies
whose shape matters are pinned by a GBNF grammar sent through the page's custom parameters, so
the checks hold for any weights."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest

from tests.server.conftest import start_server, stop_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(.ci/run installs it)")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]
KEY = "webui-test-key"
SETTINGS = "llamacpy-webui-settings"
QWEN, QWEN_MMPROJ = ROOT / "tests/golden/qwen35/qwen35.gguf", ROOT / "tests/golden/vision/qwen35.gguf"
# a think-block template (as Qwen3's) that honours enable_thinking and takes list contents
THINK_TEMPLATE = (
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n{% if m.content is string %}"
    "{{ m.content }}{% else %}{% for p in m.content %}{{ p.text }}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor -%}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}")
MARKDOWN = ('# Colours\n\n**bold** `inline` $x^2$ <b>raw</b><img src=x onerror="window.pwned=1">'
            '\n\n```python\nprint("hi")\n```\n')


def grammar(text: str) -> str:
    """A GBNF grammar whose only sentence is `text`."""
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def png(size: int = 48) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (size, size), (200, 40, 40)).save(buf, "PNG")
    return buf.getvalue()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture(scope="module")
def smol(model_paths, tmp_path_factory):
    folder = tmp_path_factory.mktemp("webui")
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "2048", "-np", "2",
                           "-n", "1000", "--api-key", KEY], str(folder / "log"))
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    folder = tmp_path_factory.mktemp("webui-vision")
    (folder / "think.jinja").write_text(THINK_TEMPLATE)
    server = start_server(["-m", str(QWEN), "--mmproj", str(QWEN_MMPROJ), "-c", "2048",
                           "-np", "1", "--chat-template-file", str(folder / "think.jinja")],
                          str(folder / "log"))
    yield server
    stop_server(server)


@pytest.fixture
def open_page(browser):
    """open_page(server, settings=None, **context) -> a page in a fresh browser profile; the
    settings go into localStorage before the page's first load."""
    contexts = []

    def open_(server, settings: dict | None = None, **kw):
        ctx = browser.new_context(**kw)
        contexts.append(ctx)
        if settings is not None:
            ctx.add_init_script(f"if (!localStorage.getItem('{SETTINGS}')) localStorage.setItem("
                                f"'{SETTINGS}', {json.dumps(json.dumps(settings))});")
        page = ctx.new_page()
        page.errors = []
        page.on("pageerror", lambda e: page.errors.append(str(e)))
        page.bodies = []
        page.on("request", lambda r: page.bodies.append(r.post_data_json)
                if r.url.endswith("/v1/chat/completions") else None)
        page.goto(server.url + "/")
        page.wait_for_selector("#status[data-kind=ok], #status[data-kind=error]")
        return page

    yield open_
    for ctx in contexts:
        ctx.close()


def send(page, text: str) -> None:
    """Type a message, press Enter and wait for the reply to finish."""
    n = replies(page)
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_label("Message", exact=True).press("Enter")
    wait_replies(page, n + 1)


def replies(page) -> int:
    """Replies finished since the page loaded."""
    return page.evaluate("+(document.body.dataset.replies || 0)")


def wait_replies(page, n: int, timeout: float = 120_000) -> None:
    page.wait_for_function(f"() => +(document.body.dataset.replies || 0) >= {n}",
                           timeout=timeout)


def set_settings(page, **fields) -> None:
    page.get_by_role("button", name="Settings", exact=True).click()
    for label, value in fields.items():
        page.get_by_label(label, exact=True).fill(value)
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("#settings:not([open])", state="attached")


def last_answer(page):
    return page.locator(".msg.assistant .content").last


def wait_saved(page) -> None:
    """Wait for the app's last IndexedDB save: a store's read-write transactions complete in the
    order they were made, and a click handler's save is made before this one (a reload right
    after a click, on a loaded machine, lost the branch switched to)."""
    page.evaluate("""() => new Promise((done, fail) => {
        const req = indexedDB.open("llamacpy-webui");
        req.onerror = () => fail(req.error);
        req.onsuccess = () => {
            const t = req.result.transaction("conversations", "readwrite");
            t.oncomplete = () => { req.result.close(); done(); };
            t.onerror = () => fail(t.error);
        };
    })""")


def slots_busy(server) -> list[bool]:
    r = httpx.get(f"{server.url}/slots", headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    return [s["is_processing"] for s in r.json()]


def with_key(**settings) -> dict:
    return {"apiKey": KEY, **settings}


# -- rendering ----------------------------------------------------------------------------------

def test_streamed_reply_renders_markdown_and_code(smol, open_page):
    page = open_page(smol, with_key(custom=json.dumps({"grammar": grammar(MARKDOWN)})))
    assert "SmolLM2" in page.locator("#status").inner_text()
    assert page.evaluate("document.documentElement.lang") == "en"
    page.get_by_label("Message", exact=True).fill("Show me some markdown.")
    page.get_by_label("Message", exact=True).press("Enter")
    # rendered while it streams, not only at the end
    page.wait_for_function("() => document.body.dataset.busy === 'true' && "
                           "document.querySelector('.msg.assistant .content h1')", timeout=60_000)
    wait_replies(page, 1)
    body = page.bodies[-1]
    assert body["stream"] is True and body["grammar"] == grammar(MARKDOWN)
    answer = last_answer(page)
    assert answer.locator("h1").inner_text() == "Colours"
    assert answer.locator("strong").inner_text() == "bold"
    assert answer.locator("p code").first.inner_text() == "inline"
    code = answer.locator("pre code.language-python")
    assert code.inner_text().strip() == 'print("hi")'
    assert code.locator(".hljs-built_in").inner_text() == "print"  # highlight.js ran
    assert answer.locator(".katex").count() == 1  # KaTeX typeset $x^2$
    # the model's HTML is text, never markup: no <b>, no <img>, no handler ran
    assert answer.locator("b, img").count() == 0 and not page.evaluate("window.pwned")
    assert "<b>raw</b>" in answer.inner_text()
    stats = page.locator(".msg.assistant .stats").last.inner_text()
    assert re.search(r"prompt \d+ tokens, [\d.]+ tokens/s · generation \d+ tokens, [\d.]+ "
                     r"tokens/s", stats), stats
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    answer.get_by_role("button", name="Copy code").click()
    assert page.evaluate("navigator.clipboard.readText()").strip() == 'print("hi")'
    assert not page.errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webui-markdown.png"), full_page=True)


# -- conversations ------------------------------------------------------------------------------

def test_conversation_survives_a_reload_and_the_list_manages_it(smol, open_page, tmp_path):
    page = open_page(smol, with_key(max_tokens="8"))
    send(page, "Say hello.")
    answer = last_answer(page).inner_text()
    page.reload()
    page.wait_for_selector(".msg.assistant")
    assert page.locator(".msg.user .text").inner_text() == "Say hello."
    assert last_answer(page).inner_text() == answer
    assert page.locator("#conversations li").count() == 1
    # rename, which also survives a reload
    page.get_by_label("Rename Say hello.").click()
    page.get_by_label("Conversation name").fill("Greetings")
    page.get_by_label("Conversation name").press("Enter")
    # the list shows the new name once IndexedDB has committed it (a reload before that,
    # on a loaded CI machine, lost the rename)
    page.wait_for_selector("#conversations li .open:text-is('Greetings')")
    page.reload()
    page.wait_for_selector("#conversations li .open:text-is('Greetings')")
    # a new chat is a second conversation
    page.get_by_label("New chat").click()
    send(page, "Say bye.")
    assert page.locator("#conversations li").count() == 2
    # export, delete both, import the export: both come back
    with page.expect_download() as download:
        page.get_by_label("Export conversations").click()
    exported = tmp_path / "export.json"
    download.value.save_as(exported)
    data = json.loads(exported.read_text())
    assert sorted(c["name"] for c in data) == ["Greetings", "Say bye."]
    page.on("dialog", lambda d: d.accept())
    for name in ("Greetings", "Say bye."):
        page.get_by_label(f"Delete {name}").click()
    page.wait_for_function("() => !document.querySelectorAll('#conversations li').length")
    page.reload()
    page.wait_for_selector(".empty")
    page.get_by_label("Import conversations").set_input_files(str(exported))
    page.wait_for_function("() => document.querySelectorAll('#conversations li').length == 2")
    page.get_by_role("button", name="Greetings", exact=True).click()
    assert last_answer(page).inner_text() == answer


def test_edit_and_regenerate_create_branches(smol, open_page):
    page = open_page(smol, with_key(max_tokens="6"))
    send(page, "Name a colour.")
    first = last_answer(page).inner_text()
    page.get_by_label("Regenerate").click()
    wait_replies(page, 2)  # replies since the page loaded
    # the regenerated answer was asked with the same history: one user message
    assert [m["role"] for m in page.bodies[-1]["messages"]] == ["user"]
    assistant = page.locator(".msg.assistant")
    assert assistant.locator(".position").inner_text() == "2/2"
    assistant.get_by_label("Previous version").click()
    assert page.locator(".msg.assistant .position").inner_text() == "1/2"
    assert last_answer(page).inner_text() == first
    # editing the user message makes a second user branch with its own answer
    page.get_by_label("Edit message", exact=True).click()
    page.locator("textarea.edit").fill("Name a fruit.")
    page.get_by_role("button", name="Send edit").click()
    wait_replies(page, 3)
    assert page.bodies[-1]["messages"] == [{"role": "user", "content": "Name a fruit."}]
    user = page.locator(".msg.user")
    assert user.locator(".position").inner_text() == "2/2"
    assert user.locator(".text").inner_text() == "Name a fruit."
    user.get_by_label("Previous version").click()
    assert page.locator(".msg.user .text").inner_text() == "Name a colour."
    # its answers are kept; the newest one shows
    assert page.locator(".msg.assistant .position").inner_text() == "2/2"
    wait_saved(page)
    page.reload()  # the tree is stored, not only the branch shown
    page.wait_for_selector(".msg.user .position")
    assert page.locator(".msg.user .text").inner_text() == "Name a colour."
    assert page.locator(".msg.user .position").inner_text() == "1/2"


def test_stop_cancels_the_generation_on_the_server(smol, open_page):
    page = open_page(smol, with_key(custom='{"ignore_eos": true}'))
    page.get_by_label("Message", exact=True).fill("Write a very long essay.")
    page.get_by_label("Message", exact=True).press("Enter")
    page.wait_for_function("() => (document.querySelector('.msg.assistant .content')"
                           "?.textContent.length || 0) > 20", timeout=120_000)
    assert any(slots_busy(smol))
    assert page.get_by_label("Send", exact=True).is_hidden() and page.get_by_label("Stop").is_visible()
    page.keyboard.press("Escape")  # the same as clicking Stop
    wait_replies(page, 1, timeout=10_000)
    deadline = time.monotonic() + 5
    while any(slots_busy(smol)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(slots_busy(smol))
    assert "stopped" in page.locator(".msg.assistant .stats").inner_text()
    text = last_answer(page).inner_text()
    page.wait_for_timeout(500)
    assert last_answer(page).inner_text() == text
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webui-stopped.png"), full_page=True)


# -- settings and the API key -------------------------------------------------------------------

def test_settings_change_the_request_body_and_persist(smol, open_page):
    page = open_page(smol, with_key())
    set_settings(page, **{"System prompt": "You answer in one word.", "Temperature": "0.3",
                          "Top-k": "5", "Top-p": "0.9", "Min-p": "0.1", "Max tokens": "7",
                          "Repeat penalty": "1.1", "Seed": "42"})
    with page.expect_request("**/v1/chat/completions") as request:
        send(page, "Hi")
    body = request.value.post_data_json
    assert body["messages"][0] == {"role": "system", "content": "You answer in one word."}
    assert {k: body[k] for k in ("temperature", "top_k", "top_p", "min_p", "max_tokens",
                                 "repeat_penalty", "seed")} == {
        "temperature": 0.3, "top_k": 5, "top_p": 0.9, "min_p": 0.1, "max_tokens": 7,
        "repeat_penalty": 1.1, "seed": 42}
    assert request.value.headers["authorization"] == f"Bearer {KEY}"
    # the server honoured max_tokens: at most 7 generated tokens
    n = re.search(r"generation (\d+) tokens", page.locator(".msg.assistant .stats").inner_text())
    assert n and int(n.group(1)) <= 7
    page.reload()
    page.get_by_role("button", name="Settings", exact=True).click()
    assert page.get_by_label("Temperature").input_value() == "0.3"
    assert page.get_by_label("System prompt").input_value() == "You answer in one word."
    # a bad number is refused in the dialog, not sent
    page.get_by_label("Top-k").fill("many")
    page.get_by_role("button", name="Save").click()
    assert "top_k is not a number" in page.locator("#settings-notice").inner_text()


def test_a_401_asks_for_the_key(smol, open_page):
    page = open_page(smol)  # no key stored
    page.wait_for_selector("#settings[open]")
    assert "API key" in page.locator("#settings-notice").inner_text()
    assert page.locator("#status").inner_text() == "API key required"
    assert page.evaluate("document.activeElement.id") == "s-apiKey"
    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("#status[data-kind=ok]")
    props = httpx.get(f"{smol.url}/props", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert page.locator("#status").inner_text() == (
        f"{Path(props['model_path']).name} · context {props['default_generation_settings']['n_ctx']}")
    # a key that stops working mid-chat: the reply says so and the dialog opens again
    page.get_by_role("button", name="Settings", exact=True).click()
    page.get_by_label("API key").fill("wrong")
    page.get_by_label("Max tokens").fill("4")
    page.get_by_role("button", name="Save").click()
    page.wait_for_selector("#status:text-is('API key required')")  # /props said 401 again
    page.wait_for_selector("#settings[open]")
    page.get_by_role("button", name="Cancel").click()
    send(page, "Hi")
    assert "API key" in page.locator(".msg.assistant .error").inner_text()
    page.wait_for_selector("#settings[open]")


def test_text_files_are_inlined_and_images_refused_without_vision(smol, open_page):
    page = open_page(smol, with_key(max_tokens="4"))
    assert "image/*" not in page.get_by_label("Attach").get_attribute("accept")
    assert "--mmproj" in page.locator("#attach-label").get_attribute("title")
    page.get_by_label("Attach").set_input_files([
        {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"the secret is 42"},
        {"name": "red.png", "mimeType": "image/png", "buffer": png()}])
    page.wait_for_selector("#attachments .pending")
    page.wait_for_selector("#notice:not([hidden])")
    assert "does not take images" in page.locator("#notice").inner_text()
    assert page.locator("#attachments .pending").count() == 1
    send(page, "What is the secret?")
    assert page.bodies[-1]["messages"][-1]["content"] == \
        "What is the secret?\n\n--- notes.txt ---\nthe secret is 42"


def test_loading_and_unreachable_servers_say_so(smol, open_page):
    """The server's 503 while loading (app.LOADING, llama.cpp's body) and a dropped connection,
    played by the browser's network layer in front of the real server."""
    from llamacpy.server.app import LOADING

    page = open_page(smol, with_key(max_tokens="4"))
    calls = []

    def loading(route):
        calls.append(route.request.url)
        if len(calls) <= 2:
            return route.fulfill(status=503, json=LOADING)
        route.continue_()

    page.route("**/props", loading)
    page.reload()
    page.wait_for_selector("#status:text-is('Loading model…')")
    page.wait_for_selector("#status[data-kind=ok]", timeout=20_000)  # it retried
    assert len(calls) == 3
    page.route("**/v1/chat/completions", lambda route: route.fulfill(status=503, json=LOADING))
    send(page, "Hi")
    assert "loading the model" in page.locator(".msg.assistant .error").inner_text()
    page.unroute("**/v1/chat/completions")
    page.route("**/v1/chat/completions", lambda route: route.abort("connectionrefused"))
    page.get_by_label("Regenerate").click()
    wait_replies(page, 2)
    assert "unreachable" in page.locator(".msg.assistant .error").inner_text()
    assert "unreachable" in page.locator("#status").inner_text()


def test_keyboard_and_accessible_names(smol, open_page):
    page = open_page(smol, with_key(max_tokens="4"))
    box = page.get_by_label("Message", exact=True)
    box.fill("one")
    box.press("Shift+Enter")
    box.type("two")
    assert box.input_value() == "one\ntwo" and not page.bodies  # Shift+Enter is a new line
    box.press("Enter")
    wait_replies(page, 1)
    assert page.bodies[-1]["messages"][-1]["content"] == "one\ntwo"
    for name in ("Message", "Attach"):
        assert page.get_by_label(name, exact=True).count() == 1, name
    for name in ("Send", "New chat", "Settings"):
        assert page.get_by_role("button", name=name, exact=True).count() == 1, name
    page.get_by_role("button", name="Settings", exact=True).click()
    for name in ("System prompt", "Temperature", "Max tokens", "API key"):
        assert page.get_by_label(name, exact=True).count() == 1, name
    # every control has a name: an aria-label, a <label> or its own text
    unnamed = page.evaluate("""() => [...document.querySelectorAll(
        'button, input, select, textarea')].filter((e) => !(e.getAttribute('aria-label') ||
        e.labels?.length || e.textContent.trim())).map((e) => e.outerHTML)""")
    assert unnamed == []


# -- phone width --------------------------------------------------------------------------------

def test_phone_width_has_no_horizontal_scroll(smol, open_page):
    long_reply = "```\n" + "x = 1; " * 9 + "\n```\n\n" + "y" * 48 + "\n"  # > 375 px each
    page = open_page(smol, with_key(custom=json.dumps({"grammar": grammar(long_reply)})),
                     viewport={"width": 375, "height": 740}, is_mobile=True, has_touch=True)
    send(page, "Long lines please.")
    overflow = page.evaluate("""() => {
      const w = document.documentElement.clientWidth, out = [];
      for (const e of document.querySelectorAll('main *')) {
        const r = e.getBoundingClientRect();
        if (r.width && r.right > w + 1 && !e.closest('pre, .math')) out.push(e.className || e.tagName);
      }
      return {out, page: document.documentElement.scrollWidth - w,
              messages: document.querySelector('#messages').scrollWidth -
                        document.querySelector('#messages').clientWidth};
    }""")
    assert overflow == {"out": [], "page": 0, "messages": 0}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webui-phone.png"))
    # the conversation list is a drawer behind the menu button
    assert page.locator("#sidebar").bounding_box()["x"] < 0
    page.get_by_label("Conversations list").click()
    page.wait_for_function("() => document.querySelector('#sidebar').getBoundingClientRect().x >= 0")


# -- images and reasoning (the tiny Qwen3.5 with its projector) ---------------------------------

def test_an_image_reaches_the_model(vision, open_page):
    page = open_page(vision, {"max_tokens": "4"})
    assert "image/*" in page.get_by_label("Attach").get_attribute("accept")
    page.get_by_label("Thinking").uncheck()
    page.get_by_label("Attach").set_input_files(
        {"name": "red.png", "mimeType": "image/png", "buffer": png()})
    page.wait_for_selector("#attachments img")
    send(page, "What is in this picture?")
    assert not page.locator(".msg.assistant .error").count()
    assert page.locator(".msg.user img.thumb").count() == 1
    body = page.bodies[-1]
    parts = body["messages"][-1]["content"]
    assert parts[0]["image_url"]["url"] == "data:image/png;base64," + base64.b64encode(
        png()).decode()
    # the page's request, replayed: the image costs prompt tokens (it reached the projector)
    plain = dict(body, stream=False, cache_prompt=False)
    with_image = httpx.post(f"{vision.url}/v1/chat/completions", json=plain, timeout=120).json()
    plain["messages"] = [{"role": "user", "content": "What is in this picture?"}]
    text_only = httpx.post(f"{vision.url}/v1/chat/completions", json=plain, timeout=120).json()
    assert with_image["usage"]["prompt_tokens"] > text_only["usage"]["prompt_tokens"] + 4
    # drag-and-drop and paste take images too
    page.evaluate("""(b64) => {
      const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = () => { const d = new DataTransfer();
        d.items.add(new File([bytes], 'drop.png', {type: 'image/png'})); return d; };
      document.querySelector('#composer').dispatchEvent(
        new DragEvent('drop', {dataTransfer: dt(), bubbles: true, cancelable: true}));
      document.querySelector('#input').dispatchEvent(
        new ClipboardEvent('paste', {clipboardData: dt(), bubbles: true, cancelable: true}));
    }""", base64.b64encode(png()).decode())
    page.wait_for_function("() => document.querySelectorAll('#attachments img').length == 2")


def test_reasoning_shows_in_a_thinking_block(vision, open_page):
    page = open_page(vision, {"max_tokens": "300", "custom": '{"ignore_eos": true}'})
    toggle = page.get_by_label("Thinking")
    assert toggle.is_visible() and toggle.is_checked()  # the template reads enable_thinking
    page.get_by_label("Message", exact=True).fill("Think about it.")
    page.get_by_label("Message", exact=True).press("Enter")
    # open while the thinking streams
    page.wait_for_function("() => document.body.dataset.busy === 'true' && (document."
                           "querySelector('.reasoning[open] .reasoning-text')?.textContent."
                           "length || 0) > 0", timeout=60_000)
    page.get_by_label("Stop").click()
    wait_replies(page, 1)
    assert page.bodies[-1]["chat_template_kwargs"] == {"enable_thinking": True}
    assert page.locator(".msg.assistant .reasoning").is_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webui-thinking.png"), full_page=True)
    # thinking off: the template closes the block, no reasoning arrives
    page.get_by_label("New chat").click()
    page.get_by_label("Thinking").uncheck()
    set_settings(page, **{"Max tokens": "6", "Custom parameters (JSON)": ""})
    send(page, "Answer now.")
    assert page.bodies[-1]["chat_template_kwargs"] == {"enable_thinking": False}
    assert page.locator(".msg.assistant .reasoning").is_hidden()
