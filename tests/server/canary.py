"""What the robustness tests share: a small llama-server, llama.cpp's error shape, and the canary
request that must still be answered after every hostile one."""

from __future__ import annotations

import json

import httpx

from .conftest import Server, start_server

# a small context and short generations: every request of these tests stays quick
SMALL_SERVER = ["-c", "1024", "-np", "2", "-n", "16", "-t", "1"]
HANG = 60  # seconds: a request not answered by then is a hang
CANARY_TIMEOUT = 30  # generous on a shared 2-core machine; a dead engine never answers


def small_server(model_paths: dict, log_path: str) -> Server:
    """SmolLM2-135M-Instruct: 2 slots of 512 tokens, at most 16 generated tokens a request."""
    return start_server(["-m", str(model_paths["smollm2-135m"]), *SMALL_SERVER], log_path)


def canary(server: Server) -> None:
    """A two-token completion must be answered (the engine still runs, the queue still moves)."""
    assert server.proc.poll() is None, f"llama-server exited:\n{server.log()[-3000:]}"
    r = httpx.post(f"{server.url}/completion", json={"prompt": "Hello", "n_predict": 2,
                                                     "temperature": 0}, timeout=CANARY_TIMEOUT)
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body["content"], str) and 1 <= body["tokens_predicted"] <= 2


def assert_error_shape(r: httpx.Response) -> dict:
    """llama.cpp's error object, its code equal to the HTTP status; returns the error."""
    err = r.json()["error"]
    assert err["code"] == r.status_code, err
    assert isinstance(err["message"], str) and err["message"], err
    assert isinstance(err["type"], str) and err["type"], err
    return err


def sse_events(r: httpx.Response) -> list:
    """The JSON events of a server-sent event stream ('[DONE]' as the string)."""
    events = []
    for line in r.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events
