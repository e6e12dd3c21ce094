"""Tool calling through a real llama-server with the official `openai` client.

Qwen2.5-Coder-0.5B-Instruct (greedy) for what a real model does with tools: tool_choice auto,
required and a named function, parallel calls, streamed deltas against the non-streamed message,
a tool result sent back, requests that must be refused. Then tiny random-weight models (the
tests/golden/tiny_hf files, byte-level vocabulary) carrying each format family's template
through --chat-template-file: with random weights only the grammar can make a call well formed.
A tiny model with a template that opens a think block checks reasoning_content beside calls.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import openai
import pytest

from llamacpy.chat.tools import detect_format
from llamacpy.format import open_gguf
from tests.reference.vocab_data import template_path
from tests.server.conftest import start_server, stop_server
from tests.server.tools_fixtures import (CITY, FORECAST, LOCAL_TIME, TIMER, WEATHER,
                                         assert_same_calls, check_calls, message_calls,
                                         read_openai_stream, read_sse, tool)

TINY = Path(__file__).resolve().parents[1] / "golden" / "tiny_hf"
PARIS = "What is the weather like in Paris right now?"
TWO_CITIES = "What is the weather in Paris and in Rome?"
TOOL_RESULT = {"temperature_c": 21, "sky": "sunny"}
TOOLS = [WEATHER, LOCAL_TIME]  # one tool set, so the slot reuses the prompt's tools prefix


def openai_client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-no-key-required",
                         max_retries=0, timeout=300)


def chat(client: openai.OpenAI, content: str | list, **kw):
    messages = [{"role": "user", "content": content}] if isinstance(content, str) else content
    kw.setdefault("max_tokens", 64)
    return client.chat.completions.create(model="any", messages=messages, temperature=0, **kw)


def only_calls(choice) -> list[dict]:
    """A choice that holds calls and nothing else: finish_reason tool_calls, content ""."""
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content == "" and choice.message.tool_calls, choice.message
    return message_calls(choice.message)


# -- Qwen2.5-Coder-0.5B-Instruct -------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen(model_paths, tmp_path_factory):
    log = tmp_path_factory.mktemp("tools-qwen") / "server.log"
    server = start_server(["-m", str(model_paths["qwen2.5-coder-0.5b"]), "-c", "4096", "-np", "1",
                           "-t", "2", "--jinja"], str(log))
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def client(qwen):
    return openai_client(qwen)


@pytest.fixture(scope="module")
def paris_auto(client):
    """The non-streamed answer to the weather question with tool_choice auto."""
    return chat(client, PARIS, tools=TOOLS)


def test_auto_calls_the_tool_the_prompt_needs(paris_auto):
    calls = only_calls(paris_auto.choices[0])
    (args,) = check_calls(calls, TOOLS)
    assert calls[0]["function"]["name"] == "get_weather" and args["city"] == "Paris"
    assert "<tool_call>" not in paris_auto.choices[0].message.content


def test_auto_streamed_equals_non_streamed(client, paris_auto):
    s = read_openai_stream(chat(client, PARIS, tools=TOOLS, stream=True))
    assert_same_calls(s.call_list, message_calls(paris_auto.choices[0].message))
    assert s.fragments[0] >= 2, "the arguments came in one piece"
    assert s.finish_reasons == ["tool_calls"] and s.content == ""


def test_required_calls_even_when_no_tool_is_needed(client):
    calls = only_calls(chat(client, "Say hello", tools=TOOLS, tool_choice="required")
                       .choices[0])
    check_calls(calls, TOOLS)


def test_named_function_is_the_only_one_called(client):
    r = chat(client, PARIS, tools=TOOLS,
             tool_choice={"type": "function", "function": {"name": "get_time"}})
    calls = only_calls(r.choices[0])
    check_calls(calls, [LOCAL_TIME])  # its schema only: get_weather would fail here


def test_two_parallel_calls_streamed_and_not(client, qwen):
    """The 0.5B model writes two calls for two cities when a call is required (with "auto" it
    writes one call for Paris)."""
    body = dict(messages=[{"role": "user", "content": TWO_CITIES}], tools=TOOLS,
                tool_choice="required", parallel_tool_calls=True, max_tokens=120, temperature=0)
    calls = only_calls(client.chat.completions.create(model="any", **body).choices[0])
    assert [a["city"] for a in check_calls(calls, TOOLS)] == ["Paris", "Rome"]
    assert {c["function"]["name"] for c in calls} == {"get_weather"}
    s = read_sse(f"{qwen.url}/v1/chat/completions", body)
    assert s.done and s.finish_reasons == ["tool_calls"]
    assert sorted(s.calls) == [0, 1] and min(s.fragments.values()) >= 2
    check_calls(s.call_list, TOOLS)
    assert_same_calls(s.call_list, calls)


def test_arguments_have_only_the_schema_keys(client):
    """A schema without additionalProperties allows no other keys (llama.cpp's reading): the
    0.5B model, left free, adds a 'city2' for the second city."""
    open_weather = tool("get_weather", CITY, "Get the current weather in a city", closed=False)
    r = chat(client, "Get the weather for both Paris and Rome, one call per city.",
             tools=[open_weather], tool_choice="required", parallel_tool_calls=False,
             max_tokens=120)
    for args in check_calls(only_calls(r.choices[0]), [open_weather]):
        assert set(args) <= {"city"}, args


def history(call: dict) -> list[dict]:
    """The weather question, the server's call sent back as it came, and the tool's answer."""
    return [{"role": "user", "content": PARIS},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": json.dumps(TOOL_RESULT)}]


def test_tool_result_round_trip(client, paris_auto):
    call = message_calls(paris_auto.choices[0].message)[0]
    messages = history(call)
    again = chat(client, messages, tools=TOOLS).choices[0]
    # a 0.5B model may call again; whatever it does must be well formed
    if again.message.tool_calls:
        check_calls(only_calls(again), TOOLS)
    else:
        assert again.message.content and again.finish_reason in ("stop", "length")
    # the answer under a schema: the model reads the tool's value
    answer = {"type": "object", "properties": {"temperature_c": {"type": "integer"}},
              "required": ["temperature_c"]}
    r = chat(client, messages, max_tokens=24, response_format={
        "type": "json_schema", "json_schema": {"name": "weather", "schema": answer}})
    assert r.choices[0].finish_reason == "stop"
    assert json.loads(r.choices[0].message.content) == {"temperature_c": 21}


def test_history_renders_arguments_as_objects(qwen, paris_auto):
    call = message_calls(paris_auto.choices[0].message)[0]
    r = httpx.post(f"{qwen.url}/apply-template", timeout=60,
                   json={"messages": history(call), "tools": [WEATHER, LOCAL_TIME]})
    prompt = r.json()["prompt"]
    args = json.loads(call["function"]["arguments"])
    assert f'"name": "get_weather", "arguments": {json.dumps(args)}' in prompt
    assert '\\"city\\"' not in prompt  # not the arguments string encoded once more
    assert f"<tool_response>\n{json.dumps(TOOL_RESULT)}\n</tool_response>" in prompt


BAD_ARGS = [{"role": "user", "content": PARIS},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{city: Paris"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "21"}]
BAD_REQUESTS = {
    "parameters-schema": dict(tools=[tool("f", {"a": {"type": "no-such-type"}})]),
    "parameters-not-an-object": dict(tools=[{"type": "function", "function": {
        "name": "f", "parameters": "a string"}}]),
    "unknown-named-function": dict(tools=[WEATHER], tool_choice={
        "type": "function", "function": {"name": "get_stock_price"}}),
    "grammar-with-tools": dict(tools=[WEATHER], extra_body={"grammar": 'root ::= "yes"'}),
    "json-format-with-tools": dict(tools=[WEATHER], response_format={"type": "json_object"}),
    "history-arguments-not-json": dict(tools=[WEATHER], messages=BAD_ARGS),
}


@pytest.mark.parametrize("case", BAD_REQUESTS)
def test_bad_tool_requests_are_400(client, case):
    kw = dict(BAD_REQUESTS[case])
    messages = kw.pop("messages", [{"role": "user", "content": "Hi"}])
    with pytest.raises(openai.BadRequestError) as info:
        chat(client, messages, max_tokens=4, **kw)
    assert info.value.status_code == 400
    assert info.value.body["type"] == "invalid_request_error", info.value.body
    after = chat(client, "Hi", max_tokens=3).choices[0]  # the server goes on as before
    assert after.message.content and not after.message.tool_calls


# -- tiny random-weight models, one per template family ---------------------------------------

def whitespace_tokens(model: Path) -> list[int]:
    """The byte-level vocabulary's tokens that are only blanks (Ġ space, Ċ newline, ĉ tab,
    č return)."""
    tokens = open_gguf(model).metadata["tokenizer.ggml.tokens"]
    return [i for i, t in enumerate(tokens) if t and set(t) <= set("ĠĊĉč")]


def no_blanks(model: Path) -> dict:
    """A logit_bias that keeps a random model from choosing blank tokens when it may choose.

    Workaround for a llamacpy bug: its tool grammars allow unbounded whitespace (`WS:
    /[ \\t\\r\\n]+/`, and %json's default) where llama.cpp's `space` rule allows at most one
    space or two newlines and 20 blanks, so greedy random weights write blanks to max_tokens.
    A bias of -100 is not a ban: a blank the grammar requires (qwen3_coder's newlines) is still
    the only choice there."""
    return {str(t): -100 for t in whitespace_tokens(model)}


def tiny_server(tmp_path_factory, model: str, template: Path, *extra: str):
    """llama-server on tests/golden/tiny_hf/MODEL.gguf with a template file. The files say 256
    positions; prompts with tools in a 320-token vocabulary are longer."""
    log = tmp_path_factory.mktemp(f"tools-{model}") / "server.log"
    return start_server(["-m", str(TINY / f"{model}.gguf"), "--chat-template-file", str(template),
                         "-c", "4096", "-np", "1", "-t", "1", "--jinja", *extra], str(log))


def smollm2_template(model_paths, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("smollm2") / "smollm2.jinja"
    path.write_text(open_gguf(model_paths["smollm2-135m"]).get("tokenizer.chat_template"))
    return path


# family -> (tiny model, llama.cpp's template or a GGUF's, expected format, tools)
FAMILIES = {
    "hermes": ("qwen2", "Qwen-Qwen2.5-7B-Instruct", "hermes", [TIMER, FORECAST]),
    "llama3_json": ("llama", "meta-llama-Llama-3.1-8B-Instruct", "llama3_json",
                    [TIMER, FORECAST]),
    # no Gemma 3 template in llama.cpp's models/templates (and none in gemma3-270m's file):
    # Gemma 2's, which has no system role, so the generic prompt goes into the user turn
    "generic-gemma": ("gemma3", "google-gemma-2-2b-it", "generic", [TIMER, FORECAST]),
    "generic-smollm2": ("llama", "smollm2", "generic", [TIMER, FORECAST]),
    # a string parameter is free text up to `</parameter>` in this format: integers only
    "qwen3_coder": ("qwen3", "Qwen3-Coder", "qwen3_coder", [TIMER]),
}


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, model_paths, tmp_path_factory):
    """(family, server, model path, template path)."""
    model, template, _, _ = FAMILIES[request.param]
    path = (smollm2_template(model_paths, tmp_path_factory) if template == "smollm2"
            else template_path(template))
    server = tiny_server(tmp_path_factory, model, path)
    yield request.param, server, TINY / f"{model}.gguf", path
    stop_server(server)


def test_family_format_and_prompt(family):
    name, server, _, template = family
    fmt = FAMILIES[name][2]
    assert detect_format(template.read_text()) == fmt
    r = httpx.post(f"{server.url}/apply-template", timeout=60, json={
        "messages": [{"role": "user", "content": "Hi"}], "tools": [TIMER]})
    prompt = r.json()["prompt"]
    assert "set_timer" in prompt and "Start a kitchen timer" in prompt
    # the generic format's instruction (in the user turn for Gemma, which has no system role)
    assert ("Respond in JSON format" in prompt) == (fmt == "generic")


@pytest.mark.parametrize("choice", ["required", "set_timer"])
def test_family_call_well_formed_streamed_and_not(family, choice):
    name, server, gguf, _ = family
    tools = FAMILIES[name][3]
    tool_choice = choice if choice == "required" else {
        "type": "function", "function": {"name": choice}}
    kw = dict(tools=tools, tool_choice=tool_choice, parallel_tool_calls=False, max_tokens=200,
              logit_bias=no_blanks(gguf))
    client = openai_client(server)
    calls = only_calls(chat(client, "Start a timer, or tell me the forecast.", **kw).choices[0])
    assert len(calls) == 1
    check_calls(calls, tools if choice == "required" else [TIMER])
    s = read_openai_stream(chat(client, "Start a timer, or tell me the forecast.", stream=True,
                                **kw))
    assert_same_calls(s.call_list, calls)
    assert s.fragments[0] >= 2 and s.finish_reasons == ["tool_calls"] and s.content == ""


@pytest.fixture(scope="module")
def hermes_tiny(tmp_path_factory):
    server = tiny_server(tmp_path_factory, "qwen2", template_path("Qwen-Qwen2.5-7B-Instruct"))
    yield server
    stop_server(server)


def test_whitespace_in_calls_is_bounded(hermes_tiny):
    """Greedy random weights write as many blanks as the grammar lets them: llama.cpp's `space`
    rule (one blank, or up to two newlines and 20 spaces or tabs) bounds every run of them."""
    r = chat(openai_client(hermes_tiny), "Timer", tools=[TIMER], tool_choice="required",
             max_tokens=200)
    msg = r.choices[0].message
    text = (msg.content or "") + "".join(c.function.arguments for c in msg.tool_calls or [])
    runs = re.findall(r"[ \t\r\n]+", text)
    assert runs and all(re.fullmatch(r" |\n{1,2}[ \t]{0,20}", w) for w in runs), runs[:5]


# -- reasoning beside tool calls ---------------------------------------------------------------

@pytest.fixture(scope="module")
def thinking_tiny(tmp_path_factory):
    """A tiny Qwen3 with QwQ's template, whose generation prompt opens `<think>` (hermes calls
    after it); the budget closes the block after 8 tokens, since random weights never would."""
    server = tiny_server(tmp_path_factory, "qwen3", template_path("Qwen-QwQ-32B"), "-rea", "on",
                         "--reasoning-budget", "8")
    gguf = TINY / "qwen3.gguf"
    yield server, gguf
    stop_server(server)


def test_reasoning_stays_out_of_tool_calls(thinking_tiny):
    server, gguf = thinking_tiny
    client = openai_client(server)
    kw = dict(tools=[TIMER], tool_choice="required", parallel_tool_calls=False, max_tokens=160,
              logit_bias=no_blanks(gguf))
    r = chat(client, "Timer", **kw)
    msg = r.choices[0].message
    reasoning = msg.model_extra.get("reasoning_content")
    assert reasoning and "think>" not in reasoning, msg
    calls = only_calls(r.choices[0])
    check_calls(calls, [TIMER])
    assert "think" not in calls[0]["function"]["arguments"]
    s = read_openai_stream(chat(client, "Timer", stream=True, **kw))
    assert s.reasoning == reasoning and s.content == ""
    assert_same_calls(s.call_list, calls)
