"""`llamacpy serve-ray` as a user runs it: a bad command line ends in one line before Ray
starts; a good one starts a local Ray, answers llama-server's API, and stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.serve_ray.conftest import free_port

pytest.importorskip("ray.serve", reason="Ray Serve is the optional extra llamacpy[ray]")


def serve_ray(*argv: str, **kw) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen([sys.executable, "-m", "llamacpy", "serve-ray", *argv], env=env,
                            stderr=subprocess.PIPE, text=True, **kw)


def test_bad_command_line_is_one_line():
    p = serve_ray("--replicas", "2", "--autoscale", "1:3")
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2
    assert err.strip() == "llamacpy serve-ray: error: give --replicas N or --autoscale " \
                          "MIN:MAX, not both"


def test_help_names_its_own_flags():
    p = subprocess.run([sys.executable, "-m", "llamacpy", "serve-ray", "--help"],
                       capture_output=True, text=True, check=False)
    assert p.returncode == 0 and "--autoscale MIN:MAX" in p.stdout and "--address" in p.stdout


def test_serves_and_stops_on_sigterm(model_paths):
    port = free_port()
    p = serve_ray("-m", str(model_paths["smollm2-135m"]), "--port", str(port), "-c", "1024")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert p.poll() is None, p.stderr.read()
            time.sleep(0.5)
        r = httpx.post(f"{url}/completion", json={"prompt": "Hello", "n_predict": 4},
                       timeout=60)
        assert r.status_code == 200 and r.json()["tokens_predicted"] == 4
    finally:
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert f"serving SmolLM2-135M-Instruct.Q4_1.gguf on {url} (1 replica)" in err
