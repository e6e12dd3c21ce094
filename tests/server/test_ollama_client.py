"""The official `ollama` Python client (PyPI) against llama-server's Ollama routes, with
Qwen2.5-Coder-0.5B-Instruct (a chat template with tools). References: gguf-py's reader for
/api/tags and /api/show, the catalogue's sha256, the OpenAI routes (/v1/chat/completions,
/v1/completions) for the greedy text, jsonschema for `format`."""

from __future__ import annotations

import json
import re

import gguf
import httpx
import jsonschema
import numpy as np
import ollama
import pytest

from llamacpy.hub import CATALOG
from tests.server.conftest import start_server, stop_server

MODEL = "qwen2.5-coder-0.5b"
GREEDY = {"temperature": 0, "num_predict": 24}
QUESTION = [{"role": "user", "content": "Write a short story about a red fox."}]


@pytest.fixture(scope="module")
def server(model_paths, tmp_path_factory):
    log = tmp_path_factory.mktemp("ollama-client") / "server.log"
    srv = start_server(["-m", str(model_paths[MODEL]), "-c", "4096", "-np", "2", "-t", "2",
                        "--jinja", "--alias", "qwen-coder"], str(log))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url, timeout=300)


@pytest.fixture(scope="module")
def reader(model_paths):
    return gguf.GGUFReader(model_paths[MODEL])


def field(reader, key):
    f = reader.fields[key]
    value = f.parts[f.data[0]]
    return bytes(value).decode() if f.types[0] == gguf.GGUFValueType.STRING else value[0]


def v1_chat(server, messages, n):
    body = {"messages": messages, "temperature": 0, "max_tokens": n}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=300).json()


def test_list_describes_the_gguf(client, reader, model_paths):
    (m,) = client.list().models
    path = model_paths[MODEL]
    n_params = sum(int(np.prod(t.shape)) for t in reader.tensors)
    assert m.model == "qwen-coder" and m.size == path.stat().st_size
    assert m.digest == CATALOG[MODEL].sha256
    assert m.details.format == "gguf" and m.details.family == field(reader, "general.architecture")
    file_type = gguf.LlamaFileType(int(field(reader, "general.file_type")))
    assert m.details.quantization_level == file_type.name.removeprefix("MOSTLY_") == "Q4_K_M"
    assert m.details.parameter_size == f"{n_params / 1e6:.2f}M" == "630.17M"  # the figure Ollama shows for this file
    assert m.modified_at.timestamp() == pytest.approx(path.stat().st_mtime, abs=1e-3)


def test_show_carries_model_info_template_and_capabilities(client, reader):
    r = client.show("qwen-coder")
    arch = field(reader, "general.architecture")
    for key in ("context_length", "embedding_length", "block_count"):
        assert r.modelinfo[f"{arch}.{key}"] == int(field(reader, f"{arch}.{key}"))
    assert r.modelinfo["general.architecture"] == arch
    assert r.template == field(reader, "tokenizer.chat_template")
    assert r.capabilities == ["completion", "tools"] and r.details.quantization_level == "Q4_K_M"
    assert re.search(r"^num_ctx +2048$", r.parameters, re.MULTILINE)  # -c 4096 over 2 slots


def test_ps_gives_the_slot_context(client):
    (m,) = client.ps().models
    assert m.name == "qwen-coder" and m.context_length == 2048 and m.expires_at.year > 2100


def test_chat_equals_the_openai_route(client, server):
    reference = v1_chat(server, QUESTION, 24)["choices"][0]["message"]["content"]
    r = client.chat(model="llama3.2:3b", messages=QUESTION, options=GREEDY)
    assert r.message.content == reference and r.model == "llama3.2:3b"
    assert r.done and r.done_reason == "length" and r.eval_count == 24
    parts = list(client.chat(model="any", messages=QUESTION, options=GREEDY, stream=True))
    assert "".join(p.message.content for p in parts) == reference
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].prompt_eval_count == r.prompt_eval_count > 10


def test_generate_is_a_user_message_and_raw_a_completion(client, server):
    system = "Answer in French."
    messages = [{"role": "system", "content": system}] + QUESTION
    reference = v1_chat(server, messages, 16)["choices"][0]["message"]["content"]
    opts = {"temperature": 0, "num_predict": 16}
    r = client.generate(model="x", prompt=QUESTION[0]["content"], system=system, options=opts)
    assert r.response == reference and isinstance(r.context, list) and len(r.context) > 16
    streamed = client.generate(model="x", prompt=QUESTION[0]["content"], system=system,
                               options=opts, stream=True)
    assert "".join(p.response for p in streamed) == reference
    prompt = "def fibonacci(n):"
    text = httpx.post(f"{server.url}/v1/completions", json={
        "prompt": prompt, "temperature": 0, "max_tokens": 16}, timeout=300).json()
    raw = client.generate(model="x", prompt=prompt, raw=True, options=opts)
    assert raw.response == text["choices"][0]["text"] and raw.context is None


def test_context_continues_a_conversation(client, server):
    first = client.generate(model="x", prompt="Say the word blue.", options=GREEDY)
    again = client.generate(model="x", prompt="Now say it again.", context=first.context,
                            options=GREEDY)
    assert again.prompt_eval_count >= len(first.context) + 5


def test_options_are_honoured(client):
    base = client.chat(model="x", messages=QUESTION, options=GREEDY).message.content
    short = client.chat(model="x", messages=QUESTION, options={**GREEDY, "num_predict": 4})
    assert short.eval_count == 4 and base.startswith(short.message.content)
    word = base.split()[3]
    stopped = client.chat(model="x", messages=QUESTION, options={**GREEDY, "stop": [word]})
    assert stopped.message.content == base[:base.index(word)] and stopped.done_reason == "stop"
    sampled = {"temperature": 1.0, "seed": 1234, "num_predict": 24}
    runs = [client.chat(model="x", messages=QUESTION, options=sampled).message.content
            for _ in range(2)]
    assert runs[0] == runs[1]
    again = client.chat(model="x", messages=QUESTION, options=GREEDY).message.content
    assert again == base


def test_format_json_and_schema(client):
    r = client.chat(model="x", format="json", options={"temperature": 0, "num_predict": 120},
                    messages=[{"role": "user", "content": "Describe a cat as JSON."}])
    assert isinstance(json.loads(r.message.content), dict)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer", "minimum": 0}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.generate(model="x", format=schema, options={"temperature": 0, "num_predict": 80},
                        prompt="Invent a person. Reply in JSON.")
    jsonschema.validate(json.loads(r.response), schema)


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
      city: The city's name
    """
    return "sunny"


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "The city's name"}}}}}
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_a_tool_call_has_object_arguments(client, server):
    r = client.chat(model="x", tools=[get_weather], options={"temperature": 0}, messages=PARIS)
    (call,) = r.message.tool_calls
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    # the result goes back as Ollama sends it; the answer equals the OpenAI route's
    history = PARIS + [r.message, {"role": "tool", "content": "sunny, 24 C",
                                   "tool_name": "get_weather"}]
    opts = {"temperature": 0, "num_predict": 32}
    answer = client.chat(model="x", tools=[get_weather], messages=history, options=opts)
    openai_history = PARIS + [
        {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "content": "sunny, 24 C", "tool_call_id": "call_0"}]
    v1 = httpx.post(f"{server.url}/v1/chat/completions", timeout=300, json={
        "messages": openai_history, "tools": [WEATHER], "temperature": 0,
        "max_tokens": 32}).json()["choices"][0]["message"]
    assert answer.message.content == v1["content"]
    assert [c.function.arguments for c in answer.message.tool_calls or []] == \
        [json.loads(c["function"]["arguments"]) for c in v1.get("tool_calls", [])]
    parts = list(client.chat(model="x", tools=[get_weather], options={"temperature": 0},
                             messages=PARIS, stream=True))
    streamed = [c for p in parts for c in p.message.tool_calls or []]
    assert streamed == r.message.tool_calls and parts[-1].message.tool_calls == streamed


def test_embed_and_thinking_answer_clear_errors(client):
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model="x", input=["hello"])
    assert e.value.status_code == 400 and "embedding" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        client.chat(model="x", messages=QUESTION, think=True)
    assert e.value.status_code == 400 and "does not support thinking" in e.value.error


def test_pull_a_cached_catalogue_model(client):
    parts = list(client.pull("smollm2-135m", stream=True))
    assert parts[0].status == "pulling manifest" and parts[-1].status == "success"
    (done,) = [p for p in parts if p.total]
    assert done.completed == done.total and done.digest == "sha256:" + CATALOG["smollm2-135m"].sha256
    assert client.pull("smollm2-135m:latest").status == "success"
    with pytest.raises(ollama.ResponseError) as e:
        client.pull("llama3.2:3b")
    assert e.value.status_code == 404 and "not found" in e.value.error
