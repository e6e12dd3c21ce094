"""llama-server's context controls end to end: --context-shift (a request runs past a full
context, reported as truncated), --keep and the request's n_keep, --cache-reuse, --cache-ram;
and the refusals: --context-shift with a projector or a model whose memory cannot shift (a clear
line, a non-zero exit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from .conftest import start_server, stop_server

ROOT = Path(__file__).resolve().parents[2]
QWEN35 = ROOT / "tests/golden/qwen35/qwen35.gguf"
QWEN35_MMPROJ = ROOT / "tests/golden/vision/qwen35.gguf"
PROMPT = "Count from one to one hundred, in words: one, two, three,"


@pytest.fixture(scope="module")
def servers(model_paths, tmp_path_factory):
    """SmolLM2 with a 96-token slot, with and without --context-shift."""
    log = tmp_path_factory.mktemp("ctx")
    common = ["-m", str(model_paths["smollm2-135m"]), "-c", "96", "-t", "2", "--no-warmup",
              "--temp", "0"]
    shifting = start_server([*common, "--context-shift", "--keep", "4", "--cache-reuse", "4"],
                            str(log / "shift.log"))
    plain = start_server([*common, "-cram", "0"], str(log / "plain.log"))
    yield shifting, plain
    stop_server(shifting)
    stop_server(plain)


def complete(server, **body) -> dict:
    r = httpx.post(f"{server.url}/completion", json={"prompt": PROMPT, "temperature": 0,
                                                     "ignore_eos": True, **body}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def test_context_shift_runs_past_a_full_context(servers):
    shifting, plain = servers
    out = complete(shifting, n_predict=150)
    assert out["tokens_predicted"] == 150 and out["truncated"] is True
    assert out["stop_type"] == "limit"
    short = complete(plain, n_predict=150)
    assert short["truncated"] is False and short["tokens_predicted"] < 96
    assert short["tokens_evaluated"] + short["tokens_predicted"] == 96
    # the same greedy text up to where the plain server had to stop
    assert out["content"].startswith(short["content"][:40])
    props = httpx.get(f"{shifting.url}/props").json()
    assert props["default_generation_settings"]["params"]["n_keep"] == 4


def test_n_keep_per_request(servers):
    shifting, _ = servers
    out = complete(shifting, n_predict=120, n_keep=-1)
    assert out["truncated"] is True and out["generation_settings"]["n_keep"] == -1
    r = httpx.post(f"{shifting.url}/completion", json={"prompt": PROMPT, "n_keep": -2})
    assert r.status_code == 400 and "n_keep" in r.json()["error"]["message"]


def run_server(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamacpy", "server", *args, "--port", "0",
                           "--no-warmup"], capture_output=True, text=True, timeout=timeout,
                          cwd=ROOT)


@pytest.mark.parametrize("flag", [["--context-shift"], ["--cache-reuse", "256"]])
def test_refused_with_a_projector(flag):
    out = run_server(["-m", str(QWEN35), "--mmproj", str(QWEN35_MMPROJ), *flag])
    err = out.stderr.strip().splitlines()
    assert out.returncode != 0 and err == [
        f"llama-server: error: {flag[0]} is not supported with a multimodal projector "
        f"(--mmproj): an image's cells cannot be shifted"]


def test_refused_for_a_recurrent_model():
    out = run_server(["-m", str(QWEN35), "--context-shift"])
    assert out.returncode != 0
    lines = [x for x in out.stderr.splitlines() if "error" in x]
    assert len(lines) == 1 and "--context-shift is not supported with this model and cache: " \
        "its memory cannot shift" in lines[0], out.stderr


def test_a_quantized_cache_shifts_too(model_paths, tmp_path):
    """The wrapper's cache flags with --context-shift: q8_0 keys are dequantized, re-rotated
    and quantized again."""
    s = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "96", "-t", "2",
                      "--no-warmup", "--context-shift", "-ctk", "q8_0", "-ctv", "q8_0", "-fa",
                      "on"], str(tmp_path / "q8.log"))
    try:
        out = complete(s, n_predict=120)
        assert out["tokens_predicted"] == 120 and out["truncated"] is True
    finally:
        stop_server(s)


def test_bad_keep_is_refused():
    out = run_server(["-m", str(QWEN35), "--keep", "-5"])
    assert out.returncode != 0 and out.stderr.strip().splitlines() == [
        "llama-server: error: --keep must be -1 (the whole prompt) or at least 0, not -5"]
