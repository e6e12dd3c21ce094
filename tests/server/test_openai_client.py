"""The official `openai` Python client against llama-server."""

from __future__ import annotations

import openai
import pytest

from tests.server.conftest import start_server, stop_server


@pytest.fixture(scope="module")
def client(smollm_server):
    return openai.OpenAI(base_url=f"{smollm_server.url}/v1", api_key="sk-no-key-required")


def test_chat(client):
    r = client.chat.completions.create(model="any", max_tokens=12, temperature=0,
                                       messages=[{"role": "user", "content": "Hi!"}])
    assert r.choices[0].message.content and r.usage.completion_tokens > 0


def test_chat_streamed(client):
    stream = client.chat.completions.create(model="any", max_tokens=12, temperature=0,
                                            stream=True,
                                            messages=[{"role": "user", "content": "Hi!"}])
    parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert "".join(parts)


def test_completions(client):
    r = client.completions.create(model="any", prompt="Once upon a time", max_tokens=8,
                                  temperature=0)
    assert r.choices[0].text and r.choices[0].finish_reason in ("stop", "length")


def test_models_list(client):
    assert [m.object for m in client.models.list().data] == ["model"]


def test_bad_request_raises_with_error_object(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="any", messages=[], max_tokens=4)
    assert info.value.body["type"] == "invalid_request_error"


def test_api_keys(model_paths, tmp_path):
    server = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "512",
                           "--api-key", "key-one,key-two"], str(tmp_path / "log"))
    try:
        good = openai.OpenAI(base_url=f"{server.url}/v1", api_key="key-two")
        assert good.completions.create(model="x", prompt="Hi", max_tokens=2).choices
        bad = openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong")
        with pytest.raises(openai.AuthenticationError) as info:
            bad.completions.create(model="x", prompt="Hi", max_tokens=2)
        assert info.value.body["type"] == "authentication_error"
        assert bad.models.list().data  # /v1/models stays public
    finally:
        stop_server(server)
