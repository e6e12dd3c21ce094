"""A local Ray Serve application per test module (Ray started here, never joined through
RAY_ADDRESS, no dashboard), shut down with Ray at the module's end."""

from __future__ import annotations

import os
import socket
import time
from types import SimpleNamespace

import pytest

ray = pytest.importorskip("ray", reason="Ray Serve is the optional extra llamacpy[ray]")
serve = pytest.importorskip("ray.serve")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(argv: list[str], name: str = "llamacpy") -> SimpleNamespace:
    """serve-ray's application for this command line, on a local Ray with 2 CPUs."""
    from llamacpy.serve_ray.app import build
    from llamacpy.serve_ray.config import config_from_argv

    cfg = config_from_argv(argv)
    os.environ.pop("RAY_ADDRESS", None)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             logging_level="ERROR", configure_logging=False)
    port = free_port()  # after Ray's own processes took theirs
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build(cfg), name=name, route_prefix="/")
    return SimpleNamespace(url=f"http://127.0.0.1:{port}", cfg=cfg, name=name)


def stop_app() -> None:
    serve.shutdown()
    ray.shutdown()


def live_replicas(app_name: str) -> dict[str, list[str]]:
    """replica id -> its models, as the application's board has them (beats every 0.5 s)."""
    board = ray.get_actor(f"llamacpy-board:{app_name}", namespace="llamacpy")
    return ray.get(board.live.remote())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
