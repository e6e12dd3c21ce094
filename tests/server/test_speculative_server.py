"""llama-server with --spec-type ngram-simple: the same greedy text as the Python API without
speculation, drafts reported in timings and /props, the per-request speculative.* limits
honoured (n_max 0 drafts nothing), bad values a 400; llama-cli -md gives the same text."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from llamacpy import Llama
from tests.server.conftest import start_server, stop_server

CODE = "def add(a, b):\n    total = a + b\n    return total\n\n" * 3
PROMPT = f"Here is some code:\n{CODE}The same code again:\n"
N = 40


@pytest.fixture(scope="module")
def model(model_paths):
    return str(model_paths["smollm2-135m"])


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    s = start_server(["-m", model, "-c", "1024", "--spec-type", "ngram-simple",
                      "--spec-ngram-simple-size-n", "3", "--spec-ngram-simple-size-m", "8"],
                     str(tmp_path_factory.mktemp("spec") / "log"))
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def plain_text(model):
    return Llama(model, n_ctx=1024, verbose=False)(PROMPT, max_tokens=N, temperature=0)[
        "choices"][0]["text"]


def complete(server, **extra) -> httpx.Response:
    return httpx.post(f"{server.url}/completion", timeout=120, json={
        "prompt": PROMPT, "n_predict": N, "temperature": 0, "cache_prompt": False, **extra})


def test_same_text_and_drafts_reported(server, plain_text):
    r = complete(server).json()
    assert r["content"] == plain_text
    t = r["timings"]
    assert t["draft_n"] > 0 and 0 < t["draft_n_accepted"] <= t["draft_n"]
    props = httpx.get(f"{server.url}/props").json()["default_generation_settings"]["params"]
    assert props["speculative.types"] == "ngram-simple" and props["speculative.n_max"] == 8


def test_per_request_limits(server, plain_text):
    r = complete(server, **{"speculative.n_max": 0}).json()
    assert r["content"] == plain_text and "draft_n" not in r["timings"]
    assert r["generation_settings"]["speculative.n_max"] == 0
    r = complete(server, **{"speculative.n_min": 9}).json()  # ngram-simple drafts at most 8
    assert r["content"] == plain_text and "draft_n" not in r["timings"]
    r = complete(server, **{"speculative.n_max": 2}).json()
    assert r["content"] == plain_text and r["timings"]["draft_n"] > 0
    for bad in ({"speculative.n_max": -1}, {"speculative.p_min": 2}, {"speculative.n_min": "x"}):
        resp = complete(server, **bad)
        assert resp.status_code == 400, (bad, resp.text)


def test_llama_cli_with_a_draft_model(model, plain_text):
    def run(*extra):
        out = subprocess.run([sys.executable, "-m", "llamacpy", "cli", "-m", model, "-p", PROMPT,
                              "-n", str(N), "--temp", "0", "-no-cnv", "-c", "1024",
                              "--no-warmup", *extra], capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert run("-md", model, "--draft-max", "4") == run()
    bad = subprocess.run([sys.executable, "-m", "llamacpy", "cli", "-m", model, "-ngld", "9"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "-ngld 9 is not supported" in bad.stderr


def test_mtp_drafts_through_the_server(tmp_path):
    """--spec-type draft-mtp on the tiny Qwen3.5 with an MTP block: the greedy text of the Python
    API without speculation, with drafts reported; a model without the block fails to start
    with one line."""
    from pathlib import Path

    golden = Path(__file__).resolve().parents[1] / "golden" / "qwen35"
    mtp = str(golden / "qwen35-mtp.gguf")
    prompt = [int(t) for t in range(5, 29)]
    plain = Llama(mtp, n_ctx=256, verbose=False)(prompt, max_tokens=24, temperature=0)[
        "choices"][0]["text"]
    s = start_server(["-m", mtp, "-c", "256", "--spec-type", "draft-mtp", "--draft-max", "3"],
                     str(tmp_path / "log"))
    try:
        r = httpx.post(f"{s.url}/completion", timeout=120, json={
            "prompt": prompt, "n_predict": 24, "temperature": 0, "ignore_eos": True}).json()
    finally:
        stop_server(s)
    assert r["content"] == plain and r["timings"]["draft_n"] > 0
    bad = subprocess.run([sys.executable, "-m", "llamacpy", "server", "-m",
                          str(golden / "qwen35.gguf"), "--spec-type", "draft-mtp", "--port", "1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "needs a model with an MTP block" in bad.stderr
