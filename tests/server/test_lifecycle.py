"""Start-up, readiness, failure and shutdown, as apps that spawn llama-server rely on them."""

from __future__ import annotations

import time

import httpx

from tests.server.conftest import start_server, stop_server, wait_ready

LOADING = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


def test_listens_before_the_model_is_ready(model_paths, tmp_path):
    """Every endpoint but /health and /models answers 503 Loading model until ready."""
    server = start_server(["-m", str(model_paths["gemma3-270m"]), "-c", "512"],
                          str(tmp_path / "log"), wait=False)
    try:
        seen = None
        deadline = time.monotonic() + 60
        while seen is None and time.monotonic() < deadline:
            try:
                r = httpx.post(f"{server.url}/v1/chat/completions", json={}, timeout=2)
                seen = r
            except httpx.HTTPError:
                time.sleep(0.05)
        assert seen is not None, server.log()
        if seen.status_code == 503:  # caught it while loading
            assert seen.json() == LOADING
        wait_ready(server, 180)
        assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    finally:
        assert stop_server(server) == 0, server.log()


def test_failed_load_exits_non_zero_with_the_reason(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 32)
    server = start_server(["-m", str(bad)], str(tmp_path / "log"), wait=False)
    assert server.proc.wait(timeout=120) != 0
    assert "failed to load model" in server.log()


def test_missing_model_file_is_a_clear_error(tmp_path):
    server = start_server(["-m", str(tmp_path / "nope.gguf")], str(tmp_path / "log"), wait=False)
    assert server.proc.wait(timeout=60) == 1
    assert "neither a file nor a catalogue name" in server.log()


def test_hf_flag_points_to_pull(tmp_path):
    server = start_server(["-hf", "ggml-org/gemma-3-270m-GGUF"], str(tmp_path / "log"),
                          wait=False)
    assert server.proc.wait(timeout=60) != 0
    assert "llamacpy pull" in server.log()


def test_unsupported_flag_ends_the_server(model_paths, tmp_path):
    """A flag that would not take effect is never ignored: one line, exit status 2."""
    server = start_server(["-m", str(model_paths["gemma3-270m"]), "-c", "512", "--lora",
                           "x.gguf"], str(tmp_path / "log"), wait=False)
    assert server.proc.wait(timeout=60) == 2
    assert server.log().strip().splitlines() == [
        "llama-server: error: --lora is not supported by llamacpy yet"]


def test_gpu_flags_warn_and_run_on_the_cpu(model_paths, tmp_path):
    server = start_server(["-m", str(model_paths["gemma3-270m"]), "-c", "512", "-ngl", "99",
                           "-tb", "1"], str(tmp_path / "log"))
    try:
        assert "no GPU available" in server.log()
        assert httpx.get(f"{server.url}/props").json()["n_threads_batch"] == 1
    finally:
        assert stop_server(server) == 0
