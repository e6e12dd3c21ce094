"""What llama.cpp's docs tell an app to do, unchanged: spawn llama-server with these flags, wait
for /health (with a timeout, checking the process is alive), then chat with and without
streaming."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

LLAMA_SERVER = str(Path(sys.executable).with_name("llama-server"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_app_from_the_docs(model_paths, tmp_path):
    port = free_port()
    cmd = [LLAMA_SERVER, "--model", str(model_paths["smollm2-135m"]), "--host", "127.0.0.1",
           "--port", str(port), "--ctx-size", "2048", "--parallel", "1", "--threads", "4",
           "--threads-batch", "4", "--batch-size", "256", "--ubatch-size", "256", "--jinja"]
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "server did not become healthy"
            time.sleep(0.25)
        body = {"model": "local", "messages": [{"role": "user", "content": "Hello!"}],
                "max_tokens": 24, "temperature": 0.0,
                "chat_template_kwargs": {"enable_thinking": False}}
        r = httpx.post(f"{base}/v1/chat/completions", json={**body, "stream": False}, timeout=120)
        answer = r.json()["choices"][0]["message"]["content"]
        assert r.status_code == 200 and answer
        streamed = ""
        with httpx.stream("POST", f"{base}/v1/chat/completions", json={**body, "stream": True},
                          timeout=120) as s:
            for line in s.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    for choice in json.loads(line[6:])["choices"]:
                        streamed += choice["delta"].get("content") or ""
        assert streamed == answer  # greedy: the same text either way
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        log.close()
