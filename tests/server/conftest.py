"""A real llama-server process per test module, started the way apps start llama.cpp's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    proc: subprocess.Popen
    port: int
    log_path: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()


def start_server(args: list[str], log_path: str, wait: bool = True, timeout: float = 180) -> Server:
    """`llama-server ARGS --port P` as a subprocess; waits for /health while checking the
    process is alive (what llama.cpp's docs tell apps to do)."""
    port = free_port()
    log = open(log_path, "w")  # noqa: SIM115 - lives as long as the process
    cmd = [sys.executable, "-m", "llamacpy", "server", *args, "--host", "127.0.0.1",
           "--port", str(port)]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    server = Server(proc, port, log_path)
    if wait:
        wait_ready(server, timeout)
    return server


def wait_ready(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {server.proc.returncode}:\n"
                               f"{server.log()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"llama-server not ready after {timeout} s:\n{server.log()}")


def stop_server(server: Server) -> int:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        try:
            server.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
    return server.proc.returncode


@pytest.fixture(scope="module")
def smollm_server(model_paths, tmp_path_factory):
    """SmolLM2-135M-Instruct (has a chat template), 4 slots, an API key-free server."""
    log = tmp_path_factory.mktemp("srv") / "server.log"
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "4096", "-np", "4",
                           "-t", "2", "--metrics", "--jinja"], str(log))
    yield server
    stop_server(server)
