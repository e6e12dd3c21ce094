"""The web chat page in a real headless Chromium (Debian's package, driven by Playwright)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.server.conftest import start_server, stop_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed "
                                "(.ci/run installs it)")
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def page(model_paths, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    folder = tmp_path_factory.mktemp("webui")
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "2048", "-n", "400"],
                          str(folder / "log"))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=BROWSER_ARGS)
        pg = browser.new_page()
        pg.goto(server.url + "/")
        yield pg
        browser.close()
    stop_server(server)


def test_send_a_message_and_see_the_streamed_answer(page):
    page.wait_for_selector("#status:has-text('model:')", timeout=60_000)
    page.fill("#system", "You are a helpful assistant.")
    page.fill("#input", "Name three colours.")
    page.press("#input", "Enter")
    answer = page.locator(".assistant .content").last
    page.wait_for_function("() => !document.querySelector('#send').disabled", timeout=120_000)
    assert answer.inner_text().strip()
    assert "tokens" in page.locator(".assistant .stats").last.inner_text()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "webui-answer.png"), full_page=True)
    assert (ARTIFACTS / "webui-answer.png").stat().st_size > 1000


def test_stop_a_generation(page):
    page.fill("#input", "Write a very long essay about the history of every country.")
    page.press("#input", "Enter")
    content = page.locator(".assistant .content").last
    page.wait_for_function(
        "() => { const c = document.querySelectorAll('.assistant .content'); "
        "return c[c.length - 1].textContent.length > 10; }", timeout=120_000)
    page.click("#stop")
    page.wait_for_function("() => !document.querySelector('#send').disabled", timeout=10_000)
    assert "stopped" in page.locator(".assistant .stats").last.inner_text()
    text = content.inner_text()
    page.wait_for_timeout(500)
    assert content.inner_text() == text  # nothing arrives after the stop
    page.screenshot(path=str(ARTIFACTS / "webui-stopped.png"), full_page=True)
