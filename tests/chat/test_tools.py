"""Tool calling (llamacpy/chat/tools.py) against llama.cpp's shapes: format detection on
llama.cpp's copies of real templates, tool history rendered through those templates, outputs in
each format parsed into OpenAI tool calls (cases from llama.cpp's tests/test-chat.cpp), streamed
deltas that reassemble to the non-streamed message under any chunking, and llguidance grammars
that accept correct calls and refuse wrong ones."""

from __future__ import annotations

import itertools
import json
import random
import re

import llguidance
import pytest

from llamacpy.chat.template import CHATML_TEMPLATE, GEMMA_TEMPLATE, ChatTemplate
from llamacpy.chat.tools import (GENERIC_RESPOND_PROMPT, ToolCallParser, ToolFormat, call_grammar,
                                 detect_format, finish_reason, generic_system_prompt,
                                 new_call_id, parse_output, parse_tool_choice, prepare_messages,
                                 template_caps, validate_tools)
from tests.reference.vocab_data import template_path

# tests/test-chat.cpp's tools, plus a string-valued one
SPECIAL = {"type": "function", "function": {
    "name": "special_function", "description": "I'm special",
    "parameters": {"type": "object", "properties": {
        "arg1": {"type": "integer", "description": "The arg."}}, "required": ["arg1"]}}}
SPECIAL_OPT = {"type": "function", "function": {
    "name": "special_function_with_opt", "description": "I'm special but have optional stuff",
    "parameters": {"type": "object", "properties": {
        "arg1": {"type": "integer", "description": "The arg."},
        "arg2": {"type": "integer", "description": "The optional arg."}}, "required": ["arg1"]}}}
PYTHON = {"type": "function", "function": {
    "name": "python", "description": "an ipython interpreter",
    "parameters": {"type": "object", "properties": {
        "code": {"type": "string", "description": "Python code to execute."}},
        "required": ["code"]}}}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather",
    "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"type": "string", "enum": ["c", "f"]}},
        "required": ["location"]}}}
TOOLS = validate_tools([SPECIAL, SPECIAL_OPT, PYTHON, WEATHER])

# a call made earlier in the conversation, as an OpenAI client sends it back
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
]

# SmolLM2-135M-Instruct's chat template (the catalogue GGUF's tokenizer.chat_template)
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")


def template(name: str, **kw) -> ChatTemplate:
    return ChatTemplate(template_path(name).read_text(), **kw)


def counter_ids():
    n = itertools.count()
    return lambda: f"call{next(n)}"


# -- format detection -----------------------------------------------------------------------

@pytest.mark.parametrize("name, fmt", [
    ("Qwen-Qwen2.5-7B-Instruct", "hermes"), ("Qwen-Qwen3-0.6B", "hermes"),
    ("Qwen-QwQ-32B", "hermes"), ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", "hermes"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "hermes"),
    ("Qwen3.5-4B", "qwen3_coder"), ("Qwen3-Coder", "qwen3_coder"),
    ("meta-llama-Llama-3.1-8B-Instruct", "llama3_json"),
    ("meta-llama-Llama-3.2-3B-Instruct", "llama3_json"),
    ("meta-llama-Llama-3.3-70B-Instruct", "llama3_json"),
    ("google-gemma-2-2b-it", "generic"), ("microsoft-Phi-3.5-mini-instruct", "generic"),
    ("GLM-4.6", "generic"),  # <tool_call>NAME<arg_key>...: not hermes JSON
])
def test_detect_format_on_llama_cpp_templates(name, fmt):
    assert detect_format(template_path(name).read_text()) == ToolFormat(fmt)


def test_detect_format_on_builtin_and_model_templates(real_models):
    # Gemma 3 270m carries no template: llamacpy renders it with its builtin Gemma one
    assert real_models["gemma3-270m"].get("tokenizer.chat_template") is None
    assert detect_format(GEMMA_TEMPLATE) == detect_format(CHATML_TEMPLATE) == "generic"
    assert detect_format(real_models["smollm2-135m"].get("tokenizer.chat_template")) == "generic"
    qwen = real_models["qwen2.5-coder-0.5b"].get("tokenizer.chat_template")
    assert detect_format(qwen) == "hermes"
    assert detect_format(None) == "generic"


# -- tools and tool_choice --------------------------------------------------------------------

def test_validate_tools_gives_llama_cpp_shape():
    tools = validate_tools([{"type": "function", "function": {"name": "ping"}}, WEATHER])
    # common_chat_tools_to_json_oaicompat: description defaults to "", parameters to {}
    assert tools[0] == {"type": "function",
                        "function": {"name": "ping", "description": "", "parameters": {}}}
    assert tools[1] == WEATHER and tools[1] is not WEATHER
    assert validate_tools(None) == []


@pytest.mark.parametrize("tools, message", [
    ({"type": "function"}, "'tools' must be an array"),
    ([{"type": "function", "function": {"description": "x"}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": ""}}], "tools[0].function.name"),
    ([{"function": {"name": "f"}}], "tools[0].type"),
    ([{"type": "retrieval", "function": {"name": "f"}}], "tools[0].type"),
    ([{"type": "function"}], "tools[0].function"),
    ([{"type": "function", "function": {"name": "f", "parameters": "object"}}],
     "tools[0].function.parameters must be a JSON schema object"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}],
     "Invalid type: objekt"),
    ([WEATHER, {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}}],
     "tools[1].function.parameters is not a usable JSON schema"),
    ([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "required": "a"}}}], "required"),
])
def test_validate_tools_refuses(tools, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        validate_tools(tools)


def test_validate_tools_accepts_annotations_it_cannot_enforce():
    # JSON Schema treats unknown formats and keywords as annotations
    schema = {"type": "object", "properties": {"d": {"type": "string", "format": "x-custom"}},
              "additionalProperties": False, "$schema": "https://json-schema.org/draft/2020-12",
              "x-extra": 1}
    assert validate_tools([{"type": "function", "function": {"name": "f", "parameters": schema}}])


def test_parse_tool_choice():
    assert parse_tool_choice(None).mode == parse_tool_choice("auto").mode == "auto"
    assert parse_tool_choice("none").mode == "none"
    assert (parse_tool_choice("required").mode, parse_tool_choice("required").name) == (
        "required", None)
    named = parse_tool_choice({"type": "function", "function": {"name": "python"}}, TOOLS)
    assert (named.mode, named.name) == ("required", "python")
    with pytest.raises(ValueError, match="not among the tools"):
        parse_tool_choice({"type": "function", "function": {"name": "nope"}}, TOOLS)
    with pytest.raises(ValueError, match="Invalid tool_choice"):
        parse_tool_choice("sometimes")


# -- rendering tool history -----------------------------------------------------------------

def test_qwen25_renders_calls_and_results():
    t = template("Qwen-Qwen2.5-7B-Instruct")
    prompt = t.render(prepare_messages(HISTORY, "hermes", TOOLS, template=t), tools=TOOLS)
    # the template's own tool list: each tool as llama.cpp's json
    assert '\n{"type": "function", "function": {"name": "get_weather", "description": ' \
        '"Current weather", "parameters": ' in prompt
    # arguments rendered once as JSON (a string would come out as "{\"location\"...}")
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"location": "Paris"}}\n</tool_call><|im_end|>\n') in prompt
    assert prompt.endswith("<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response>"
                           "<|im_end|>\n<|im_start|>assistant\n")


def test_qwen3_renders_null_content_with_calls():
    # Qwen3's template tests `'</think>' in message.content`: null content must become ""
    t = template("Qwen-Qwen3-0.6B")
    prompt = t.render(prepare_messages(HISTORY, "hermes", TOOLS, template=t), tools=TOOLS)
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"location": "Paris"}}\n</tool_call><|im_end|>') in prompt


def test_qwen35_renders_xml_calls():
    t = template("Qwen3.5-4B")
    prompt = t.render(prepare_messages(HISTORY, "qwen3_coder", TOOLS, template=t), tools=TOOLS)
    assert ("<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
            "</function>\n</tool_call><|im_end|>") in prompt
    assert "<tool_response>\n18C, sunny\n</tool_response>" in prompt


@pytest.mark.parametrize("name", ["meta-llama-Llama-3.1-8B-Instruct",
                                  "meta-llama-Llama-3.3-70B-Instruct"])
def test_llama3_renders_calls_and_results(name):
    t = template(name, bos_token="<|begin_of_text|>")
    prompt = t.render(prepare_messages(HISTORY, "llama3_json", TOOLS, template=t), tools=TOOLS,
                      date_string="26 Jul 2024")
    assert "Environment: ipython\n" in prompt
    assert ('<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", '
            '"parameters": {"location": "Paris"}}<|eot_id|>') in prompt
    # the template JSON-encodes a tool result that is a string
    assert '<|start_header_id|>ipython<|end_header_id|>\n\n"18C, sunny"<|eot_id|>' in prompt


def test_prepare_messages_does_not_touch_its_input():
    before = json.dumps(HISTORY)
    out = prepare_messages(HISTORY, "hermes", TOOLS)
    assert json.dumps(HISTORY) == before
    assert out[2]["content"] == "" and out[2]["tool_calls"][0]["function"]["arguments"] == {
        "location": "Paris"}
    assert out[3] == HISTORY[3]  # a tool result passes as it is


@pytest.mark.parametrize("arguments, message", [
    ('{"location": "Paris"', r"messages\[1\].tool_calls\[0\] \('get_weather'\): arguments are "
                             "not valid JSON"),
    ("[1, 2]", "arguments must be a JSON object"),
    (42, "arguments must be a JSON object or a JSON string"),
])
def test_prepare_messages_refuses_bad_arguments(arguments, message):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "get_weather",
                                                    "arguments": arguments}}]}]
    with pytest.raises(ValueError, match=message):
        prepare_messages(messages, "hermes")


def test_prepare_messages_refuses_malformed_calls():
    for call in ({"type": "function", "function": {"arguments": "{}"}},
                 {"type": "code_interpreter"}, "get_weather"):
        with pytest.raises(ValueError, match=r"messages\[0\].tool_calls\[0\]"):
            prepare_messages([{"role": "assistant", "tool_calls": [call]}])
    with pytest.raises(ValueError, match="messages"):
        prepare_messages({"role": "user"})


def test_template_caps():
    qwen = template_caps(template("Qwen-Qwen2.5-7B-Instruct"))
    assert qwen.tools and qwen.tool_calls and qwen.tool_responses and qwen.object_arguments
    assert qwen.parallel_tool_calls  # llama-server's default parallel_tool_calls for Qwen
    llama = template_caps(template("meta-llama-Llama-3.1-8B-Instruct"))
    assert llama.tool_calls and not llama.parallel_tool_calls  # "only supports single tool-calls"
    gemma2 = template_caps(template("google-gemma-2-2b-it"))
    assert not gemma2.system_role and not gemma2.tool_calls and not gemma2.tools
    smol = template_caps(ChatTemplate(SMOLLM2_TEMPLATE))
    assert smol.system_role and not smol.tools and not smol.tool_calls


def test_generic_prompt_for_smollm2():
    """llama.cpp's generic handler: its JSON instruction and minja's tool list join the system
    message; an earlier call turn becomes {"tool_calls": [...]} text (the template cannot render
    calls) while the tool turn, which it renders, stays a tool turn."""
    t = ChatTemplate(SMOLLM2_TEMPLATE)
    prompt = t.render(prepare_messages(HISTORY, "generic", TOOLS, template=t), tools=TOOLS)
    tools_json = json.dumps(TOOLS, indent=2)
    assert prompt.startswith(
        "<|im_start|>system\nBe brief.\n\nRespond in JSON format, either with `tool_call` (a "
        "request to call tools) or with `response` reply to the user's request\n\nYou can call "
        "any of the following tools to satisfy the user's requests: " + tools_json
        + "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n")
    call_text = json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {
        "location": "Paris"}, "id": "call_1"}]}, indent=2)
    assert f"<|im_start|>assistant\n{call_text}<|im_end|>\n" in prompt
    assert prompt.endswith("<|im_start|>tool\n18C, sunny<|im_end|>\n<|im_start|>assistant\n")
    assert generic_system_prompt(TOOLS) == (
        GENERIC_RESPOND_PROMPT + "\n\nYou can call any of the following tools to satisfy the "
        "user's requests: " + tools_json)


def test_generic_prompt_for_gemma2_without_system_role():
    """Gemma 2's template refuses a system turn and alternation breaks on a tool turn: the
    system text is merged into the first user turn ("\\n"), the result becomes a user turn."""
    t = template("google-gemma-2-2b-it", bos_token="<bos>")
    prompt = t.render(prepare_messages(HISTORY, "generic", TOOLS, template=t), tools=TOOLS)
    assert prompt.startswith("<bos><start_of_turn>user\nBe brief.\n\n" + GENERIC_RESPOND_PROMPT)
    assert "\n]\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n{\n  \"tool_calls\"" \
        in prompt
    response = json.dumps({"tool_response": {"content": "18C, sunny",
                                             "tool_call_id": "call_1"}}, indent=2)
    assert prompt.endswith(f"<start_of_turn>user\n{response}<end_of_turn>\n"
                           "<start_of_turn>model\n")


def test_generic_prompt_only_with_tools():
    t = ChatTemplate(SMOLLM2_TEMPLATE)
    for tools, choice in ((None, "auto"), (TOOLS, "none")):
        out = prepare_messages(HISTORY[:2], "generic", tools, choice, template=t)
        assert out == HISTORY[:2]


# -- parsing output -------------------------------------------------------------------------

def calls(*pairs) -> list[tuple[str, object]]:
    return [(name, args) for name, args in pairs]


def summary(tool_calls: list[dict]) -> list[tuple[str, object]]:
    """(name, parsed arguments) of each call; llama.cpp's tests compare arguments as JSON."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in tool_calls]


HERMES_CALL = '<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>'
XML_CALL = ("<tool_call>\n<function=special_function>\n<parameter=arg1>\n1\n</parameter>\n"
            "</function>\n</tool_call>")
XML_CODE = ("<tool_call>\n<function=python>\n<parameter=code>\ndef hello():\n"
            "    print(\"Hello, world!\")\n\nhello()\n</parameter>\n</function>\n</tool_call>")
XML_NEWLINE = ("<tool_call>\n<function=python>\n<parameter=code>\n    x = 1\n\n"
               "</parameter>\n</function>\n</tool_call>")
LLAMA_TAGGED = ('<|python_tag|>{"type": "function", "name": "python", "parameters": '
                '{"code": "print(1)"}}')
GENERIC_CALL = '{"tool_call": {"name": "special_function", "arguments": {"arg1": 1}}}'
GENERIC_CALLS = ('{\n  "tool_calls": [\n    {"name": "special_function", "arguments": '
                 '{"arg1": 1}},\n    {"name": "python", "arguments": {"code": "x"}}\n  ]\n}')

PARSE_CASES = [
    # (format, output, content, calls) -- from llama.cpp's tests/test-chat.cpp where marked
    ("hermes", HERMES_CALL, "", calls(("special_function", {"arg1": 1}))),  # message_assist_call
    ("hermes", "Hello, world!\nWhat's up?" + HERMES_CALL.replace("\n</", "</"),
     "Hello, world!\nWhat's up?", calls(("special_function", {"arg1": 1}))),
    ("hermes", "Hello, world!\nWhat's up?", "Hello, world!\nWhat's up?", []),
    ("hermes", HERMES_CALL + "\n<tool_call>\n{\"name\": \"special_function_with_opt\", "
     "\"arguments\": {\"arg1\": 1, \"arg2\": 2}}\n</tool_call>", "",
     calls(("special_function", {"arg1": 1}), ("special_function_with_opt",
                                                {"arg1": 1, "arg2": 2}))),
    # untagged calls of small Qwen2.5 models: bare, or in a ```json fence
    ("hermes", '{"name": "get_weather", "arguments": {"location": "Paris"}}', "",
     calls(("get_weather", {"location": "Paris"}))),
    ("hermes", '```json\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n```\n', "",
     calls(("get_weather", {"location": "Paris"}))),
    ("hermes", '\n{"name": "get_weather", "arguments": {}}', "", calls(("get_weather", {}))),
    # JSON that names no given tool, or is not at the start, is content
    ("hermes", '{"name": "Ada", "arguments": {"age": 36}}',
     '{"name": "Ada", "arguments": {"age": 36}}', []),
    ("hermes", 'Use {"name": "get_weather", "arguments": {}}',
     'Use {"name": "get_weather", "arguments": {}}', []),
    ("hermes", "```python\nprint(1)\n```", "```python\nprint(1)\n```", []),
    ("hermes", "a <b>bold</b> <tool", "a <b>bold</b> <tool", []),
    # keys in another order inside <tool_call>
    ("hermes", '<tool_call>{"arguments": {"arg1": 1}, "name": "special_function"}</tool_call>',
     "", calls(("special_function", {"arg1": 1}))),
    # a leading think block (reasoning not split off) is content, a call in it is not a call
    ("hermes", "<think>maybe <tool_call>?</think>\n\n" + HERMES_CALL,
     "<think>maybe <tool_call>?</think>\n\n", calls(("special_function", {"arg1": 1}))),
    # Qwen3.5 / Qwen3-Coder XML (tests/test-chat.cpp, Qwen3.5 section)
    ("qwen3_coder", XML_CALL, "", calls(("special_function", {"arg1": 1}))),
    ("qwen3_coder", XML_CALL + "\n<tool_call>\n<function=special_function_with_opt>\n"
     "<parameter=arg1>\n1\n</parameter>\n<parameter=arg2>\n2\n</parameter>\n</function>\n"
     "</tool_call>", "", calls(("special_function", {"arg1": 1}),
                               ("special_function_with_opt", {"arg1": 1, "arg2": 2}))),
    ("qwen3_coder", XML_CODE, "",
     calls(("python", {"code": "def hello():\n    print(\"Hello, world!\")\n\nhello()"}))),
    # a value ending in a newline keeps it (the delimiter is "\n</parameter>")
    ("qwen3_coder", XML_NEWLINE, "", calls(("python", {"code": "    x = 1\n"}))),
    ("qwen3_coder", "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=location>"
     "\nParis\n</parameter>\n</function>\n</tool_call>", "Let me check.\n\n",
     calls(("get_weather", {"location": "Paris"}))),
    # Llama 3.x JSON, with or without <|python_tag|>, "parameters" or "arguments"
    ("llama3_json", '{"name": "special_function", "parameters": {"arg1": 1}}', "",
     calls(("special_function", {"arg1": 1}))),
    ("llama3_json", LLAMA_TAGGED, "", calls(("python", {"code": "print(1)"}))),
    ("llama3_json", 'Hello, world!\nWhat\'s up?', "Hello, world!\nWhat's up?", []),
    # generic: the JSON envelope
    ("generic", GENERIC_CALL, "", calls(("special_function", {"arg1": 1}))),
    ("generic", GENERIC_CALLS, "",
     calls(("special_function", {"arg1": 1}), ("python", {"code": "x"}))),
    ("generic", '{"response": "Hello, world!\\nWhat\'s up? \\u00e9\\ud83d\\ude00 \\"q\\""}',
     'Hello, world!\nWhat\'s up? \u00e9\U0001F600 "q"', []),
    ("generic", "Hello, world!", "Hello, world!", []),  # not JSON: left as it is
]


@pytest.mark.parametrize("fmt, output, content, expected", PARSE_CASES)
def test_parse_output(fmt, output, content, expected):
    got_content, tool_calls = parse_output(fmt, output, TOOLS)
    assert got_content == content
    assert summary(tool_calls) == expected
    for call in tool_calls:
        assert call["type"] == "function"
        assert re.fullmatch(r"[0-9A-Za-z]{32}", call["id"])  # llama-server's random_string
    assert len({c["id"] for c in tool_calls}) == len(tool_calls)


def test_arguments_are_the_json_as_written():
    text = ('<tool_call>\n{"name": "python", "arguments": {"code": "print(\'\u00e9\')" }}\n'
            '</tool_call>')
    _, tool_calls = parse_output("hermes", text, TOOLS)
    assert tool_calls[0]["function"]["arguments"] == '{"code": "print(\'\u00e9\')" }'
    xml = "<tool_call>\n<function=special_function_with_opt>\n<parameter=arg1>\n1\n</parameter>" \
          "\n<parameter=arg2>\n2\n</parameter>\n</function>\n</tool_call>"
    _, tool_calls = parse_output("qwen3_coder", xml, TOOLS)
    assert tool_calls[0]["function"]["arguments"] == '{"arg1": 1, "arg2": 2}'


def test_tool_choice_none_and_no_tools_parse_nothing():
    for tools, choice in ((TOOLS, "none"), (None, "auto"), ([], "required")):
        assert parse_output("hermes", HERMES_CALL, tools, choice) == (HERMES_CALL, [])


def test_ids_are_generated_or_injected():
    text = HERMES_CALL + HERMES_CALL
    _, tool_calls = parse_output("hermes", text, TOOLS, id_factory=counter_ids())
    assert [c["id"] for c in tool_calls] == ["call0", "call1"]
    assert len({new_call_id() for _ in range(100)}) == 100


def test_finish_reason():
    assert finish_reason(True, [{"id": "x"}]) == "tool_calls"
    assert finish_reason(True, []) == "stop"
    assert finish_reason(False, [{"id": "x"}]) == "length"


# -- streaming ------------------------------------------------------------------------------

def stream(fmt: str, text: str, sizes) -> list[dict]:
    parser = ToolCallParser(fmt, TOOLS, id_factory=counter_ids())
    deltas, pos = [], 0
    while pos < len(text):
        n = next(sizes)
        deltas += parser.feed(text[pos:pos + n])
        pos += n
    return deltas + parser.finish()


def reassemble(deltas: list[dict]) -> tuple[str, list[dict]]:
    content, tool_calls = "", []
    for d in deltas:
        assert set(d) in ({"content"}, {"tool_calls"}), d
        content += d.get("content", "")
        for tc in d.get("tool_calls", []):
            if tc["index"] == len(tool_calls):  # a call's first delta: OpenAI's shape
                assert set(tc) == {"index", "id", "type", "function"} and tc["type"] == "function"
                assert set(tc["function"]) == {"name", "arguments"} and tc["function"]["name"]
                tool_calls.append({"id": tc["id"], "type": "function",
                                   "function": dict(tc["function"])})
            else:  # then argument fragments only
                assert tc["index"] == len(tool_calls) - 1 and set(tc) == {"index", "function"}
                assert set(tc["function"]) == {"arguments"}
                tool_calls[-1]["function"]["arguments"] += tc["function"]["arguments"]
    return content, tool_calls


MARKUP = ("<tool_call", "</tool_call", "<function=", "<parameter=", "<|python_tag|>",
          '"tool_call', '"response"')


@pytest.mark.parametrize("fmt, output", [(c[0], c[1]) for c in PARSE_CASES])
def test_streaming_matches_non_streaming(fmt, output):
    whole = parse_output(fmt, output, TOOLS, id_factory=counter_ids())
    rng = random.Random(output)
    chunkings = [itertools.repeat(1), itertools.repeat(3)] + [
        iter(lambda: rng.randint(1, 12), None) for _ in range(20)]
    for sizes in chunkings:
        deltas = stream(fmt, output, sizes)
        assert reassemble(deltas) == whole
        if whole[1]:  # content deltas never carry markup
            assert not any(m in d.get("content", "") for d in deltas for m in MARKUP
                           if m not in whole[0])


FRAGMENTS = ["<tool_call>", "</tool_call>", "\n", " ", '{"name": "special_function", ',
             '"arguments": ', '"parameters": ', '{"arg1": 1}', "}", "{", '"', "\\", "\\u00e9",
             "\\ud83d", "```json\n", "```", "<function=python>", "<parameter=code>",
             "</parameter>", "</function>", "<|python_tag|>", '{"tool_call": ', '{"response": "',
             '{"tool_calls": [', ",", "]", "hello", "<think>", "</think>", "<tool_"]


@pytest.mark.parametrize("fmt", [f.value for f in ToolFormat])
def test_streaming_matches_non_streaming_on_garbage(fmt):
    """Shuffled markup fragments: whatever the parser makes of them, chunking does not change
    it."""
    rng = random.Random(fmt)
    for _ in range(300):
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 12)))
        whole = parse_output(fmt, text, TOOLS, id_factory=counter_ids())
        for sizes in (itertools.repeat(1), iter(lambda: rng.randint(1, 7), None)):
            assert reassemble(stream(fmt, text, sizes)) == whole, text


def test_arguments_stream_as_they_arrive():
    for fmt, output in [("hermes", HERMES_CALL.replace('{"arg1": 1}', '{"arg1": 12345678}')),
                        ("qwen3_coder", XML_CODE), ("generic", GENERIC_CALLS),
                        ("llama3_json", LLAMA_TAGGED)]:
        parser = ToolCallParser(fmt, TOOLS)
        fragments = 0
        for ch in output:
            for d in parser.feed(ch):
                fragments += sum("id" not in tc for tc in d.get("tool_calls", []))
        assert fragments > 5, fmt  # a piece per character or so, not one at the end


def test_partial_trigger_is_held_back():
    parser = ToolCallParser("hermes", TOOLS)
    assert parser.feed("Let me look.") == [{"content": "Let me look."}]
    assert parser.feed(" <tool_") == [{"content": " "}]
    assert parser.feed('call>\n{"name": "get_weather", ') == []
    first = parser.feed('"arguments": {"loc')
    assert first[0]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    assert first[1] == {"tool_calls": [{"index": 0, "function": {"arguments": '{"loc'}}]}
    assert parser.feed('ation": "Paris"}}\n</tool_call>') == [
        {"tool_calls": [{"index": 0, "function": {"arguments": 'ation": "Paris"}'}}]}]
    assert parser.finish() == []
    # a trigger without a call after it is text, as soon as that is clear
    parser = ToolCallParser("hermes", TOOLS)
    assert parser.feed("Wrap calls in <tool_call>") == [{"content": "Wrap calls in "}]
    assert parser.feed(" tags.") == [{"content": "<tool_call> tags."}]
    # a partial trigger that never completes is text after all
    parser = ToolCallParser("hermes", TOOLS)
    assert parser.feed("x <tool_") == [{"content": "x "}]
    assert parser.finish() == [{"content": "<tool_"}]


def test_truncated_call_keeps_what_was_written():
    """Generation cut by the token limit mid-arguments: the call and its partial arguments
    stay a call (finish_reason "length"); nothing leaks into content."""
    content, tool_calls = parse_output("hermes", HERMES_CALL[:HERMES_CALL.index("1}") + 1], TOOLS)
    assert content == "" and tool_calls[0]["function"]["arguments"] == '{"arg1": 1'


# -- grammars -------------------------------------------------------------------------------

class _Bytes:
    """A byte-level vocabulary (one token per byte, then EOS) for llguidance."""

    tokens = [bytes([i]) for i in range(256)] + [b"<eos>"]
    eos_token_id, bos_token_id, special_token_ids = 256, None, [256]

    def __call__(self, text):
        return list(text if isinstance(text, bytes) else text.encode())


@pytest.fixture(scope="module")
def tokenizer():
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Bytes()))


def accepts(tokenizer, grammar, output: str) -> bool:
    """Whether the grammar, applied as the engine applies it, lets the model write `output`
    and then end: a lazy grammar from its trigger on, else from the first byte."""
    assert llguidance.LLMatcher.validate_grammar(grammar.lark) == ""
    start = grammar.find_trigger(output)
    if start is None:
        return False
    m = llguidance.LLMatcher(tokenizer, grammar.lark, log_level=0)
    assert not m.is_error(), m.get_error()
    return m.consume_tokens(list(output[start:].encode())) and m.is_accepting() \
        and m.consume_token(_Bytes.eos_token_id)


def valid_arguments(tool_calls: list[dict]) -> bool:
    """An independent check of parsed arguments against the tools' schemas."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for call in tool_calls:
        args, schema = json.loads(call["function"]["arguments"]), \
            schemas[call["function"]["name"]]
        kinds = {"integer": int, "string": str}
        if any(k not in args for k in schema.get("required", [])) or any(
                not isinstance(v, kinds[schema["properties"][k]["type"]]) for k, v in args.items()):
            return False
    return True


def test_hermes_auto_grammar(tokenizer):
    g = call_grammar("hermes", TOOLS, "auto", parallel_tool_calls=False)
    assert g.lazy and g.triggers == ["<tool_call>"]
    good = [HERMES_CALL, "Sure, let me check.\n" + HERMES_CALL,
            '{"name": "get_weather", "arguments": {"location": "Paris", "unit": "c"}}',
            '```json\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n```']
    for out in good:
        assert accepts(tokenizer, g, out), out
        assert valid_arguments(parse_output("hermes", out, TOOLS)[1])
    bad = [HERMES_CALL.replace("1", '"one"'),  # arg1 is an integer
           HERMES_CALL.replace("special_function", "secret_function"),
           HERMES_CALL.replace('{"arg1": 1}', "{}"),  # arg1 is required
           HERMES_CALL.replace('"arguments"', '"parameters"'),
           '{"name": "get_weather", "arguments": {"location": "Paris", "unit": "k"}}',
           HERMES_CALL + HERMES_CALL,  # one call only
           HERMES_CALL + " and more text"]
    for out in bad:
        assert not accepts(tokenizer, g, out), out
    assert g.find_trigger("Hello, world!") is None
    assert g.find_trigger('Text {"name": "get_weather"') is None  # untagged: at the start only
    assert g.find_trigger('  {"name": "get_weather"') == 2


def test_hermes_parallel_and_required_grammars(tokenizer):
    two = HERMES_CALL + "\n" + HERMES_CALL.replace("special_function", "python").replace(
        '{"arg1": 1}', '{"code": "print(1)"}')
    assert accepts(tokenizer, call_grammar("hermes", TOOLS, "auto", True), two)
    required = call_grammar("hermes", TOOLS, "required", False)
    assert not required.lazy and required.find_trigger("anything") == 0
    assert accepts(tokenizer, required, HERMES_CALL)
    assert not accepts(tokenizer, required, "Sure.\n" + HERMES_CALL)  # a call from the start
    assert not accepts(tokenizer, required, "Hello, world!")
    thinking = call_grammar("hermes", TOOLS, "required", False, thinking=True)
    assert accepts(tokenizer, thinking, "<think>\nNeed a call.\n</think>\n\n" + HERMES_CALL)
    assert accepts(tokenizer, thinking, "Need a call.\n</think>\n\n" + HERMES_CALL)
    named = call_grammar("hermes", TOOLS, {"type": "function", "function": {"name": "python"}})
    assert not named.lazy
    assert not accepts(tokenizer, named, HERMES_CALL)
    assert accepts(tokenizer, named, two[len(HERMES_CALL) + 1:])


def test_qwen3_coder_grammar(tokenizer):
    g = call_grammar("qwen3_coder", TOOLS, "auto", True)
    assert g.lazy and g.triggers == ["<tool_call>"] and not g.start_patterns
    assert accepts(tokenizer, g, "Let me check.\n\n" + XML_CALL)
    assert accepts(tokenizer, g, XML_CODE)  # multi-line code, quotes
    assert accepts(tokenizer, g, XML_NEWLINE)  # a value ending in a newline
    assert not accepts(tokenizer, g, XML_CALL.replace("\n1\n", "\none\n"))  # an integer
    assert not accepts(tokenizer, g, XML_CALL.replace("arg1", "arg9"))
    opt = ("<tool_call>\n<function=special_function_with_opt>\n<parameter=arg2>\n2\n</parameter>"
           "\n</function>\n</tool_call>")
    assert not accepts(tokenizer, g, opt)  # arg1 is required
    two = ("<tool_call>\n<function=get_weather>\n<parameter=unit>\nc\n</parameter>\n"
           "<parameter=location>\nParis\n</parameter>\n</function>\n</tool_call>")
    assert not accepts(tokenizer, g, two)  # optional after required, as llama.cpp's grammar
    assert accepts(tokenizer, g, XML_CALL + "\n" + XML_CODE)
    assert not accepts(tokenizer, call_grammar("qwen3_coder", TOOLS), XML_CALL + XML_CODE)


def test_llama3_grammar(tokenizer):
    g = call_grammar("llama3_json", TOOLS, "auto", True)
    assert g.lazy and g.triggers == ["<|python_tag|>"] and g.stops == ["<|eom_id|>"]
    for out in ['{"name": "special_function", "parameters": {"arg1": 1}}',
                '<|python_tag|>{"name": "python", "parameters": {"code": "x"}}',
                '{"type": "function", "name": "python", "parameters": {"code": "x"}}']:
        assert accepts(tokenizer, g, out), out
    assert not accepts(tokenizer, g, '{"name": "special_function", "parameters": {"arg1": "1"}}')
    assert not accepts(tokenizer, g, '{"name": "python", "parameters": {"code": "x"}}\n'
                                     '{"name": "python", "parameters": {"code": "y"}}')
    assert g.find_trigger("Sure: {\"name\": \"python\"") is None


def test_generic_grammar(tokenizer):
    g = call_grammar("generic", TOOLS, "auto", False)
    assert not g.lazy and g.triggers == []
    assert accepts(tokenizer, g, GENERIC_CALL)
    assert accepts(tokenizer, g, '{"response": "Hello, world!"}')
    assert not accepts(tokenizer, g, "Hello, world!")
    assert not accepts(tokenizer, g, GENERIC_CALLS)  # tool_calls needs parallel
    parallel = call_grammar("generic", TOOLS, "required", True)
    assert accepts(tokenizer, parallel, GENERIC_CALLS)
    assert not accepts(tokenizer, parallel, '{"response": "Hello"}')
    assert not accepts(tokenizer, parallel, GENERIC_CALLS.replace('"x"', "1"))


def test_no_grammar_without_calls():
    assert call_grammar("hermes", TOOLS, "none") is None
    assert call_grammar("hermes", [], "auto") is None


def test_grammar_quotes_odd_names(tokenizer):
    odd = validate_tools([{"type": "function", "function": {"name": 'say "hi"\\now'}}])
    g = call_grammar("hermes", odd, "auto")
    out = '<tool_call>{"name": "say \\"hi\\"\\\\now", "arguments": {"x": [1]}}</tool_call>'
    assert accepts(tokenizer, g, out)
    assert parse_output("hermes", out, odd)[1][0]["function"]["name"] == 'say "hi"\\now'
    assert g.find_trigger('{"name": "say \\"hi\\"\\\\now"') == 0
