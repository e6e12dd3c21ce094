"""Screenshots of the web chat page's main states, in headless Chromium against real servers.

    .venv/bin/python bench/webui_screenshots.py [--out DIR] [--readme docs/webui.png]

Writes DIR/{empty,answer,settings,thinking,image,phone,dark}.png (default test-artifacts/webui)
and the README's picture (the answer state). The reply's text is pinned by a GBNF grammar sent
through the page's custom parameters, so the pictures do not depend on the model's whims.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.server.conftest import start_server, stop_server
from tests.server.test_webui import (BROWSER_ARGS, CHROMIUM, QWEN, QWEN_MMPROJ,
                                     SETTINGS, THINK_TEMPLATE, grammar, png)

SMOL = Path.home() / ".cache/llama.cpp/SmolLM2-135M-Instruct.Q4_1.gguf"
ANSWER = ("Here is a **function** that sums a list, with its cost $O(n)$:\n\n```python\n"
          "def total(xs):\n    return sum(xs)\n```\n\n| input | total |\n| --- | --- |\n"
          "| [1, 2] | 3 |\n")


def settings(**fields) -> str:
    return (f"localStorage.getItem('{SETTINGS}') || localStorage.setItem('{SETTINGS}', "
            f"{json.dumps(json.dumps(fields))});")


def chat(page, text: str) -> None:
    n = page.evaluate("+(document.body.dataset.replies || 0)")
    page.get_by_label("Message", exact=True).fill(text)
    page.get_by_label("Message", exact=True).press("Enter")
    page.wait_for_function(f"() => +(document.body.dataset.replies || 0) > {n}", timeout=300_000)


def open_page(browser, url: str, fields: dict, **context):
    ctx = browser.new_context(**context)
    ctx.add_init_script(settings(**fields))
    page = ctx.new_page()
    page.goto(url + "/")
    page.wait_for_selector("#status[data-kind=ok]", timeout=120_000)
    return page


def text_states(browser, url: str, out: Path) -> None:
    custom = json.dumps({"grammar": grammar(ANSWER)})
    page = open_page(browser, url, {"custom": custom, "system": "You are a helpful assistant.",
                                    "temperature": "0.7", "max_tokens": "512"})
    page.screenshot(path=str(out / "empty.png"))
    chat(page, "Write a Python function that sums a list.")
    page.screenshot(path=str(out / "answer.png"))
    page.get_by_role("button", name="Settings", exact=True).click()
    page.screenshot(path=str(out / "settings.png"))
    page.context.close()
    dark = open_page(browser, url, {"custom": custom}, color_scheme="dark")
    chat(dark, "Write a Python function that sums a list.")
    dark.screenshot(path=str(out / "dark.png"))
    dark.context.close()
    phone = open_page(browser, url, {"custom": custom}, viewport={"width": 390, "height": 780},
                      is_mobile=True, has_touch=True)
    chat(phone, "Write a Python function that sums a list.")
    phone.screenshot(path=str(out / "phone.png"))
    phone.context.close()


def vision_states(browser, url: str, out: Path) -> None:
    page = open_page(browser, url, {"max_tokens": "40"})
    chat(page, "Think first, then answer: what is 2 + 2?")
    page.locator(".reasoning").first.evaluate("d => d.open = true")
    page.screenshot(path=str(out / "thinking.png"))
    page.get_by_label("New chat").click()
    page.get_by_label("Thinking").uncheck()
    page.get_by_label("Attach").set_input_files(
        {"name": "red.png", "mimeType": "image/png", "buffer": png(96)})
    page.wait_for_selector("#attachments img")
    chat(page, "What is in this picture?")
    page.screenshot(path=str(out / "image.png"))
    page.context.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "test-artifacts" / "webui"))
    ap.add_argument("--readme", default=str(ROOT / "docs" / "webui.png"),
                    help="where the README's picture goes ('' for nowhere)")
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="webui-shots-"))
    (tmp / "think.jinja").write_text(THINK_TEMPLATE)
    text = start_server(["-m", str(SMOL), "-c", "2048"], str(tmp / "smol.log"))
    vision = start_server(["-m", str(QWEN), "--mmproj", str(QWEN_MMPROJ), "-c", "2048",
                           "--chat-template-file", str(tmp / "think.jinja")],
                          str(tmp / "vision.log"))
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                        args=BROWSER_ARGS)
            text_states(browser, text.url, out)
            vision_states(browser, vision.url, out)
            browser.close()
    finally:
        stop_server(text)
        stop_server(vision)
    if args.readme:
        Path(args.readme).write_bytes((out / "answer.png").read_bytes())
    for shot in sorted(out.glob("*.png")):
        print(f"{shot}: {shot.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
