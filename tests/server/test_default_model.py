"""The default model, the one scripts/run.sh serves, answers a simple question in a chat: a new
user's first chat must work (an instruct model, not a base model that continues the text)."""

from __future__ import annotations

import httpx

from llamacpy.hub import DEFAULT_MODEL, pull
from tests.server.conftest import start_server, stop_server

QUESTION = "What is the capital of France? Answer in one word."


def test_default_model_answers_a_chat_question(tmp_path):
    server = start_server(["-m", str(pull(DEFAULT_MODEL, quiet=True)), "-c", "2048", "-np", "1",
                           "-t", "2"], str(tmp_path / "server.log"), timeout=900)
    try:
        r = httpx.post(f"{server.url}/v1/chat/completions", timeout=600, json={
            "messages": [{"role": "user", "content": QUESTION}],
            "temperature": 0, "max_tokens": 16})
        assert r.status_code == 200, r.text
        answer = r.json()["choices"][0]["message"]["content"]
        assert "Paris" in answer, f"{DEFAULT_MODEL} answered {answer!r}"
    finally:
        stop_server(server)
