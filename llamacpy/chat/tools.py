"""Tool calling for the OpenAI-compatible chat endpoint, the way llama.cpp's server does it.

Four output formats, picked from the chat template's text (detect_format):

- hermes (Qwen2.5, Qwen3, Hermes 2/3): `<tool_call>` + `{"name": ..., "arguments": {...}}` +
  `</tool_call>` (newlines between), possibly several, possibly after some text. A bare or
  ```json-fenced `{"name": <a given tool>, "arguments": ...}` at the very start of the output is
  a call too (small Qwen2.5 models write that).
- qwen3_coder (Qwen3.5, Qwen3-Coder, Nemotron Nano 3): `<tool_call>`, `<function=NAME>`, then per
  argument `<parameter=K>`, VALUE, `</parameter>`, then `</function>`, `</tool_call>`, each on its
  own line (common/parsers/qwen3-coder.cpp).
- llama3_json (Llama 3.1/3.2/3.3): `{"name": ..., "parameters": {...}}` at the start of the output,
  optionally after `<|python_tag|>` (common_chat_params_init_llama_3_x).
- generic (any other template): llama.cpp's generic handler (common_chat_params_init_generic): a
  system message describes the tools and the whole output is JSON, `{"tool_call": {"name",
  "arguments"}}`, `{"tool_calls": [...]}` or `{"response": "..."}`.

The llama_3_x, hermes_2_pro and generic handlers are those of llama.cpp's chat.cpp before its
differential autoparser (which now reads Llama 3.x and Hermes templates itself and drops the
generic fallback); qwen3_coder follows the vendored llama.cpp.

The pieces a request goes through:

1. validate_tools / parse_tool_choice check the request (ValueError -> 400).
2. prepare_messages makes the history renderable (arguments strings parsed into objects, null
   content as "", the generic format's system prompt and its polyfills for templates without tool
   support); the template is then rendered with tools=validate_tools(...).
3. call_grammar gives the llguidance (Lark) grammar and when it applies (ToolGrammar.find_trigger).
4. ToolCallParser turns the generated content (after the reasoning split) into content deltas and
   OpenAI tool-call deltas; parse_output is the same parser run over the whole text, so streamed and
   non-streamed results always agree.

Arguments strings: for the JSON formats they are the arguments value exactly as the model wrote it
(llama.cpp's PEG mapper keeps the text of the JSON value); for qwen3_coder they are built as
`{"k": v, ...}` (json.dumps separators, non-ASCII kept), as llama.cpp's mapper builds them.
"""

from __future__ import annotations

import copy
import json
import re
import secrets
import string
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Callable

from ..grammar.json_schema import WHITESPACE, closed_objects
from .template import ChatTemplate, concat_content_parts


class ToolFormat(str, Enum):
    """How a model writes tool calls."""

    HERMES = "hermes"
    QWEN3_CODER = "qwen3_coder"
    LLAMA3_JSON = "llama3_json"
    GENERIC = "generic"


def detect_format(template_source: str | None) -> ToolFormat:
    """The tool-call format a chat template's text implies (llama.cpp's template sniffing)."""
    src = template_source or ""
    if "<tool_call>" in src and "<function=" in src and "<parameter=" in src:
        return ToolFormat.QWEN3_CODER  # common_chat_try_specialized_template: Qwen3-Coder XML
    if "<tool_call>" in src and "<arg_key>" not in src and "<invoke" not in src:
        return ToolFormat.HERMES  # GLM (<arg_key>) and MiniMax (<invoke>) use other syntaxes
    if "<|python_tag|>" in src or "ipython<|end_header_id|>" in src or (
            "<|start_header_id|>" in src and '"parameters": ' in src):
        return ToolFormat.LLAMA3_JSON
    return ToolFormat.GENERIC


# -- tools and tool_choice ---------------------------------------------------------------------

def tool_parameters(function: dict) -> dict:
    """The arguments schema of a tool; none or {} means an object with any properties
    (common_chat_tool_parameters)."""
    params = function.get("parameters")
    if not params:
        return {"type": "object"}  # no "properties": llama.cpp then allows any keys
    return params


def _schema_for_json(schema: dict) -> dict:
    # lenient: unknown keywords and formats are annotations in JSON Schema, not errors; objects
    # closed and whitespace bounded as llama.cpp's json-schema-to-grammar writes them
    out = closed_objects(schema)
    out["x-guidance"] = {"lenient": True, "whitespace_pattern": WHITESPACE,
                         **(schema.get("x-guidance") or {})}
    return out


def _json_item(schema: dict) -> str:
    """A Lark `%json` item for a schema (llguidance)."""
    return "%json " + json.dumps(_schema_for_json(schema), ensure_ascii=False)


def _check_schema(schema: dict) -> str:
    """"" when llguidance can compile `schema`, else its error message."""
    import llguidance  # the grammar engine; imported here so `import llamacpy.chat` stays light

    is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(
        "start: " + _json_item(schema))
    if not is_error:
        return ""
    message = messages[0] if messages else "invalid schema"
    return message.split("failed to compile JSON schema: ")[-1].split("\n")[0]


def validate_tools(tools: Any) -> list[dict]:
    """Checked copies of a request's `tools`, in the shape llama.cpp hands to templates:
    {"type": "function", "function": {"name", "description" ("" if absent), "parameters"}}.
    Raises ValueError naming the bad field (the server answers 400)."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ValueError("'tools' must be an array")
    out = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise ValueError(f"{where} must be an object")
        if tool.get("type") != "function":  # common_chat_tools_parse_oaicompat
            raise ValueError(f"{where}.type must be 'function', got {tool.get('type')!r}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise ValueError(f"{where}.function is missing or not an object")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.function.name is missing or not a non-empty string")
        desc = fn.get("description", "")
        if desc is None:
            desc = ""
        if not isinstance(desc, str):
            raise ValueError(f"{where}.function.description must be a string")
        params = fn.get("parameters")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise ValueError(f"{where}.function.parameters must be a JSON schema object")
        error = _check_schema(tool_parameters({"parameters": params}))
        if error:
            raise ValueError(f"{where}.function.parameters is not a usable JSON schema: {error}")
        out.append({"type": "function",
                    "function": {"name": name, "description": desc, "parameters": params}})
    return out


@dataclass(frozen=True)
class ToolChoice:
    """mode: "none", "auto" or "required"; name: the one function allowed, when named."""

    mode: str = "auto"
    name: str | None = None


def parse_tool_choice(tool_choice: Any, tools: list[dict] | None = None) -> ToolChoice:
    """OpenAI's tool_choice: "auto" (default), "none", "required", or {"type": "function",
    "function": {"name": X}}, which forces a call of X (llama.cpp itself reads only the strings).
    Raises ValueError for anything else or a name not among the tools."""
    if tool_choice is None or tool_choice == "auto":
        return ToolChoice("auto")
    if tool_choice in ("none", "required"):
        return ToolChoice(tool_choice)
    if isinstance(tool_choice, dict) and tool_choice.get("type", "function") == "function":
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError("tool_choice.function.name is missing")
        if tools is not None and name not in _names(tools):
            raise ValueError(f"tool_choice names function '{name}', which is not among the tools")
        return ToolChoice("required", name)
    raise ValueError(f"Invalid tool_choice: {json.dumps(tool_choice)}")


def _names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def _chosen(tools: list[dict], choice: ToolChoice) -> list[dict]:
    return [t for t in tools if choice.name is None or t["function"]["name"] == choice.name]


# -- messages ---------------------------------------------------------------------------------

# common_chat_params_init_generic and minja's tools polyfill (chat_template::apply)
GENERIC_RESPOND_PROMPT = ("Respond in JSON format, either with `tool_call` (a request to call "
                          "tools) or with `response` reply to the user's request")
GENERIC_TOOLS_PROMPT = "You can call any of the following tools to satisfy the user's requests: "


def generic_system_prompt(tools: list[dict]) -> str:
    """What the generic format adds to the system message: llama.cpp's JSON instruction, then
    minja's tool list (two add_system calls, joined with a blank line)."""
    return (GENERIC_RESPOND_PROMPT + "\n\n" + GENERIC_TOOLS_PROMPT
            + json.dumps(tools, indent=2, ensure_ascii=False))


@dataclass(frozen=True)
class TemplateCaps:
    """What a template renders, found by rendering probe messages (llama.cpp: jinja/caps.cpp).
    parallel_tool_calls is llama-server's default for the request field of that name."""

    system_role: bool = True
    tools: bool = False
    tool_calls: bool = False
    tool_responses: bool = False
    object_arguments: bool = True
    parallel_tool_calls: bool = False


_CAPS_CACHE: dict[str, TemplateCaps] = {}
_NEEDLE = "N33dle"


def _renders(template: ChatTemplate, messages: list[dict], needle: str, **kw) -> str | None:
    try:
        out = template.render(messages, add_generation_prompt=False, **kw)
    except Exception:  # a probe the template rejects: it does not support the feature
        return None
    return out if needle in out else None


def _probe_call(name: str, as_text: bool) -> dict:
    args = {"arg": "value" + _NEEDLE}
    return {"id": "call" + name, "type": "function", "function": {
        "name": name + _NEEDLE, "arguments": json.dumps(args) if as_text else args}}


def template_caps(template: ChatTemplate) -> TemplateCaps:
    """Probe a template once (cached by its source) for system role and tool support."""
    if template.source in _CAPS_CACHE:
        return _CAPS_CACHE[template.source]
    user = {"role": "user", "content": "Hi"}
    tool = {"type": "function", "function": {"name": "tool" + _NEEDLE, "description": "d",
                                             "parameters": {"type": "object", "properties": {
                                                 "arg": {"type": "string"}}}}}
    calls = {text: {"role": "assistant", "content": "", "tool_calls": [_probe_call("a", text)]}
             for text in (False, True)}
    as_object = _renders(template, [user, calls[False]], "a" + _NEEDLE)
    as_text = _renders(template, [user, calls[True]], "a" + _NEEDLE)
    # an object rendered with str() shows Python's quotes: that template wants the JSON text
    object_args = as_object is not None and f"'value{_NEEDLE}'" not in as_object
    call = calls[not object_args and as_text is not None]
    two = dict(call, tool_calls=call["tool_calls"] + [_probe_call("b", not object_args)])
    resp = {"role": "tool", "content": "resp" + _NEEDLE, "tool_call_id": "calla"}
    both = _renders(template, [user, two], "b" + _NEEDLE)
    caps = TemplateCaps(
        system_role=_renders(template, [{"role": "system", "content": _NEEDLE}, user],
                             _NEEDLE) is not None,
        tools=_renders(template, [user], "tool" + _NEEDLE, tools=[tool]) is not None,
        tool_calls=as_object is not None or as_text is not None,
        tool_responses=_renders(template, [user, call, resp], "resp" + _NEEDLE) is not None,
        object_arguments=object_args or as_text is None,
        parallel_tool_calls=both is not None and "a" + _NEEDLE in both)
    _CAPS_CACHE[template.source] = caps
    return caps


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, list):
        return concat_content_parts(content)
    return content


def _parse_arguments(args: Any, where: str) -> dict:
    if isinstance(args, dict):
        return args
    if args is None or (isinstance(args, str) and not args.strip()):
        return {}  # "" is what some clients send for a call without arguments
    if not isinstance(args, str):
        raise ValueError(f"{where}: arguments must be a JSON object or a JSON string")
    try:
        value = json.loads(args)
    except ValueError as e:
        raise ValueError(f"{where}: arguments are not valid JSON ({e})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{where}: arguments must be a JSON object, got {args[:60]!r}")
    return value


def _check_message(i: int, m: Any, object_args: bool) -> dict:
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise ValueError(f"messages[{i}] must be an object with a string 'role'")
    m = copy.deepcopy(m)
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise ValueError(f"messages[{i}].tool_calls must be an array")
        for j, tc in enumerate(calls):
            where = f"messages[{i}].tool_calls[{j}]"
            if not isinstance(tc, dict) or tc.get("type", "function") != "function":
                raise ValueError(f"{where} must be an object of type 'function'")
            fn = tc.get("function")
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
                raise ValueError(f"{where}.function.name is missing")
            args = _parse_arguments(fn.get("arguments"), f"{where} ('{fn['name']}')")
            fn["arguments"] = args if object_args else json.dumps(args, ensure_ascii=False)
            tc.setdefault("type", "function")
    if m.get("content") is None:
        m["content"] = ""  # common_chat_msg::to_json_oaicompat renders empty content as ""
    return m


def _add_system(messages: list[dict], text: str) -> list[dict]:
    # minja chat_template::add_system
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=_text(messages[0]["content"]) + "\n\n" + text)
        return [first] + messages[1:]
    return [{"role": "system", "content": text}] + messages


def _polyfill_call(m: dict) -> dict:
    # minja: an assistant tool-call turn becomes its JSON, for templates that cannot render it
    calls = []
    for tc in m.pop("tool_calls"):
        fn = tc["function"]
        args = fn["arguments"]
        args = json.loads(args) if isinstance(args, str) else args
        call = {"name": fn["name"], "arguments": args}
        if "id" in tc:
            call["id"] = tc["id"]
        calls.append(call)
    obj: dict[str, Any] = {"tool_calls": calls}
    if m.get("content"):
        obj["content"] = m["content"]
    m["content"] = json.dumps(obj, indent=2, ensure_ascii=False)
    return m


def _polyfill_response(m: dict) -> dict:
    # minja: a tool result becomes a user turn carrying {"tool_response": {...}}
    obj: dict[str, Any] = {}
    if "name" in m:
        obj["tool"] = m.pop("name")
    obj["content"] = m["content"]
    if "tool_call_id" in m:
        obj["tool_call_id"] = m["tool_call_id"]
    m["role"], m["content"] = "user", json.dumps({"tool_response": obj}, indent=2,
                                                  ensure_ascii=False)
    return m


def _merge_system(messages: list[dict]) -> list[dict]:
    # workaround::system_message_not_supported: the system text goes before the next message's
    if not messages or messages[0]["role"] != "system":
        return messages
    if len(messages) == 1:
        return []
    second = dict(messages[1], content=_text(messages[0]["content"]) + "\n"
                  + _text(messages[1]["content"]))
    return [second] + messages[2:]


def prepare_messages(messages: Any, fmt: ToolFormat | str | None = None,
                     tools: list[dict] | None = None, tool_choice: Any = "auto",
                     template: ChatTemplate | None = None) -> list[dict]:
    """Copies of the chat history ready for the template.

    Every assistant tool call is checked and its `arguments` JSON string parsed into an object
    (templates apply `| tojson` to it; as a string it would be encoded twice), unless the
    template renders arguments as text; null content becomes "". For the generic format with
    tools, the system message gains generic_system_prompt, and when the template cannot render
    tool calls or tool results (probed), they are turned into JSON text as minja does: an
    assistant turn's content becomes {"tool_calls": [...]}, a tool turn a user turn holding
    {"tool_response": {...}}. A template without a system role gets the system text merged into
    the next message. Raises ValueError naming a malformed message or call.
    """
    if not isinstance(messages, list):
        raise ValueError("'messages' must be an array")
    caps = template_caps(template) if template is not None else TemplateCaps(
        tool_calls=fmt != ToolFormat.GENERIC, tool_responses=fmt != ToolFormat.GENERIC,
        tools=fmt != ToolFormat.GENERIC)
    generic = bool(tools) and fmt == ToolFormat.GENERIC and \
        parse_tool_choice(tool_choice).mode != "none"
    poly_calls = generic and not caps.tool_calls
    out = [_check_message(i, m, caps.object_arguments or poly_calls)
           for i, m in enumerate(messages)]
    if generic:
        out = _add_system(out, GENERIC_RESPOND_PROMPT)
        if not caps.tools:
            out = _add_system(out, GENERIC_TOOLS_PROMPT
                              + json.dumps(tools, indent=2, ensure_ascii=False))
        out = [_polyfill_call(m) if poly_calls and m.get("tool_calls") else m for m in out]
        if not caps.tool_responses:
            out = [_polyfill_response(m) if m["role"] == "tool" else m for m in out]
    if not caps.system_role:
        out = _merge_system(out)
    return out


def template_extras(now: datetime | None = None) -> dict:
    """Context llama.cpp gives every template (common_chat_extra_context): Llama 3.x prints
    `date_string` in its system header."""
    now = now or datetime.now()
    return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y")}


# -- grammars ---------------------------------------------------------------------------------

# llama.cpp's `space` rule (one blank, or up to two newlines and 20 spaces or tabs), never empty
_WS_RULE = "WS: /( |\\n{1,2}[ \\t]{0,20})/"
# a leading reasoning block, for grammars that cover the whole output of a thinking model:
# with the block opened by the prompt the output starts inside it, hence the optional <think>
_THINK_RULE = 'think[lazy]: "<think>"? /(.|\\n)*/ "</think>"'
_PARAM_END = "\n</parameter>\n"


def _lit(text: str) -> str:
    """A Lark string literal (JSON escapes are Lark's)."""
    return json.dumps(text, ensure_ascii=False)


def _jlit(text: str) -> str:
    """A Lark literal for `text` written as a JSON string."""
    return _lit(json.dumps(text, ensure_ascii=False))


@dataclass
class ToolGrammar:
    """A Lark grammar (llguidance syntax) for tool calls and when it applies.

    lazy False: the grammar covers the whole output (after the prompt): constrain from the
    first token. lazy True: generate freely until find_trigger(content) returns an index; then
    start a matcher, feed it content[index:] (the trigger onward, tokenized as plain text, no
    special-token parsing; every literal in the grammar is text) and constrain every later
    token. Triggers are looked for in the content only (after the reasoning split), each time it
    grows. The grammar ends where the calls end (trailing whitespace allowed); once it accepts,
    the end-of-generation token is allowed. `stops` are extra stop strings (Llama's <|eom_id|>).
    """

    lark: str
    lazy: bool
    triggers: list[str] = field(default_factory=list)  # words: anywhere in the content
    start_patterns: list[str] = field(default_factory=list)  # regexes: at its start only
    stops: list[str] = field(default_factory=list)

    def find_trigger(self, content: str) -> int | None:
        """Where the grammar starts in the content generated so far, or None (not yet)."""
        if not self.lazy:
            return 0
        hits = [i for i in (content.find(w) for w in self.triggers) if i >= 0]
        lead = len(content) - len(content.lstrip())
        if any(re.match(p, content[lead:]) for p in self.start_patterns):
            hits.append(lead)
        return min(hits) if hits else None


def _json_calls(tools: list[dict], keys: tuple[str, ...], with_type: bool) -> list[str]:
    """Rules `call` (any of the tools) and call_I: {"name": NAME, KEY: <args schema>}."""
    keys_alt = " | ".join(_jlit(k) for k in keys)
    typ = f'({_jlit("type")} WS? ":" WS? {_jlit("function")} WS? "," WS?)? ' if with_type else ""
    rules = ["call: " + " | ".join(f"call_{i}" for i in range(len(tools)))]
    for i, tool in enumerate(tools):
        fn = tool["function"]
        rules.append(f'call_{i}: "{{" WS? {typ}{_jlit("name")} WS? ":" WS? {_jlit(fn["name"])} '
                     f'WS? "," WS? ({keys_alt}) WS? ":" WS? args_{i} WS? "}}"')
        rules.append(f"args_{i}: {_json_item(tool_parameters(fn))}")
    return rules


def _repeat(item: str, parallel: bool) -> str:
    return f"{item} (WS? {item})* WS?" if parallel else f"{item} WS?"


def _hermes_rules(tools, lazy: bool, parallel: bool) -> list[str]:
    tagged = _repeat("tagged", parallel)
    rules = [f"start: {tagged} | call WS? | fenced WS?" if lazy else f"body: {tagged}",
             'tagged: "<tool_call>" WS? call WS? "</tool_call>"']
    if lazy:  # bare and fenced calls, which only the start patterns wake
        rules.append('fenced: "```" "json"? WS? call WS? "```"')
    return rules + _json_calls(tools, ("arguments",), False)


def _llama3_rules(tools, lazy: bool, parallel: bool) -> list[str]:
    head = "start" if lazy else "body"
    return [f'{head}: "<|python_tag|>"? WS? call WS?'] + _json_calls(
        tools, ("parameters", "arguments"), True)


def _generic_rules(tools, required: bool, parallel: bool) -> list[str]:
    key = lambda k: f'"{{" WS? {_jlit(k)} WS? ":" WS? '  # noqa: E731
    calls = (key("tool_calls") + '"[" WS? call (WS? "," WS? call)* WS? "]" WS? "}"' if parallel
             else key("tool_call") + 'call WS? "}"')
    rules = ["body: " + ("calls" if required else "(calls | response)") + " WS?",
             "calls: " + calls, "response: " + key("response") + 'text WS? "}"',
             "text: " + _json_item({"type": "string"})]
    return rules + _json_calls(tools, ("arguments",), False)


def _value_types(schema: Any) -> set[str] | None:
    """The JSON types a parameter schema allows, None when it does not say."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return set(kind)
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return {"string"}
    return None


def _xml_value_rule(schema: dict, params: dict) -> str:
    # qwen3-coder.cpp: a value that may be text is matched up to the closing tag, else JSON
    types = _value_types(schema)
    if types is None or "string" in types:
        return "sval"
    sub = dict(schema)
    for defs in ("$defs", "definitions"):  # keep $ref targets reachable from the value's schema
        if defs in params:
            sub[defs] = params[defs]
    return f"{_json_item(sub)} {_lit(_PARAM_END)}"


def _xml_function(i: int, fn: dict) -> list[str]:
    params = tool_parameters(fn)
    props = params.get("properties") or {}
    required = [k for k in params.get("required", []) if k in props]
    optional = [k for k in props if k not in required]
    keys = required + optional
    rules = [f"p_{i}_{j}: {_lit('<parameter=' + k + '>' + chr(10))} "
             f"{_xml_value_rule(props[k], params)}" for j, k in enumerate(keys)]
    body = []
    if required:
        body.append(_permute(i, len(required), rules) if len(required) <= 5
                    else " ".join(f"p_{i}_{j}" for j in range(len(required))))
    if optional:
        rules.append(f"opt_{i}: " + " | ".join(f"p_{i}_{j}" for j in range(len(required),
                                                                             len(keys))))
        body.append(f"opt_{i}*")
    rules.append(f"fn_{i}: {_lit('<function=' + fn['name'] + '>' + chr(10))} {' '.join(body)} "
                 f'"</function>\\n"')
    return rules


def _permute(i: int, n: int, rules: list[str]) -> str:
    """Required parameters in any order, as llama.cpp's p.permute: one rule per subset left."""
    for mask in range(1, 1 << n):
        alts = []
        for j in range(n):
            if mask >> j & 1:
                rest = mask & ~(1 << j)
                alts.append(f"p_{i}_{j}" + (f" req_{i}_{rest}" if rest else ""))
        rules.append(f"req_{i}_{mask}: " + " | ".join(alts))
    return f"req_{i}_{(1 << n) - 1}"


def _xml_rules(tools, lazy: bool, parallel: bool) -> list[str]:
    rules = [("start: " if lazy else "body: ") + _repeat("tagged", parallel),
             'tagged: "<tool_call>\\n" fn "</tool_call>"',
             "fn: " + " | ".join(f"fn_{i}" for i in range(len(tools))),
             f"sval[lazy]: /(.|\\n)*/ {_lit(_PARAM_END)}"]
    for i, tool in enumerate(tools):
        rules += _xml_function(i, tool["function"])
    return rules


# the grammar's WS (_WS_RULE), so that text the pattern wakes on is text the grammar continues
_BLANK = r"(?: |\n{1,2}[ \t]{0,20})?"
_NAME_AT_START = r'\{' + _BLANK + r'"name"' + _BLANK + ":" + _BLANK + r'"(?:{names})"'


def call_grammar(fmt: ToolFormat | str, tools: list[dict], tool_choice: Any = "auto",
                 parallel_tool_calls: bool = False, thinking: bool = False) -> ToolGrammar | None:
    """The grammar for a request's tool calls, or None (tool_choice "none" or no tools).

    `tools` as validate_tools returns them. tool_choice "auto": a lazy grammar for the call
    region (generic: the whole output, a call or {"response": ...}); "required" or a named
    function: the whole output must be calls (only that function's, when named), from the first
    token. parallel_tool_calls: one call, or one or more. thinking: a whole-output grammar lets
    a reasoning block `[<think>]...</think>` come first (a thinking model, or a prompt that
    opened the block). Each call's arguments are constrained by its `parameters` schema.

    What the grammar matches (blanks allowed between the pieces of JSON and between calls):
    hermes: `<tool_call>{"name": N, "arguments": A}</tool_call>`, repeated if parallel; lazy
    also a bare or ```json-fenced call, woken by start_patterns. qwen3_coder: `<tool_call>\\n
    <function=N>\\n` then `<parameter=K>\\nV\\n</parameter>\\n` per argument (required ones in
    any order, then optional ones), `</function>\\n</tool_call>`; a V whose schema allows a
    string is any text, else JSON. llama3_json: `[<|python_tag|>]{["type": "function",] "name":
    N, "parameters"|"arguments": A}`, one call (the template renders only one). generic:
    `{"tool_call": C}` or, if parallel, `{"tool_calls": [C, ...]}`, with "auto" also
    `{"response": "..."}`; no "id" member (ids are generated, as for the other formats).
    """
    fmt, choice = ToolFormat(fmt), parse_tool_choice(tool_choice, tools)
    tools = _chosen(tools, choice)
    if choice.mode == "none" or not tools:
        return None
    lazy = choice.mode == "auto" and fmt != ToolFormat.GENERIC
    if fmt == ToolFormat.GENERIC:
        rules = _generic_rules(tools, choice.mode == "required", parallel_tool_calls)
    else:
        build = {ToolFormat.HERMES: _hermes_rules, ToolFormat.LLAMA3_JSON: _llama3_rules,
                 ToolFormat.QWEN3_CODER: _xml_rules}[fmt]
        rules = build(tools, lazy, parallel_tool_calls and fmt != ToolFormat.LLAMA3_JSON)
    if not lazy:
        head = ["start: think? WS? body", _THINK_RULE] if thinking else ["start: WS? body"]
        rules = head + rules
    lark = "%llguidance {}\n" + "\n".join(rules + [_WS_RULE]) + "\n"
    grammar = ToolGrammar(lark, lazy)
    names = "|".join(re.escape(json.dumps(n, ensure_ascii=False)[1:-1]) for n in _names(tools))
    if lazy and fmt in (ToolFormat.HERMES, ToolFormat.QWEN3_CODER):
        grammar.triggers = ["<tool_call>"]
    if lazy and fmt == ToolFormat.HERMES:
        at_start = _NAME_AT_START.replace("{names}", names)
        grammar.start_patterns = [at_start, r"```(?:json)?" + _BLANK + at_start]
    if fmt == ToolFormat.LLAMA3_JSON:
        grammar.stops = ["<|eom_id|>"]
        if lazy:  # any name: small models invent names, the grammar then fixes it
            grammar.triggers = ["<|python_tag|>"]
            grammar.start_patterns = [
                r"\{" + _BLANK + r'(?:"type"' + _BLANK + ":" + _BLANK + r'"function"' + _BLANK
                + "," + _BLANK + r')?"name"' + _BLANK + ":" + _BLANK + '"']
    return grammar


# -- parsing the output -------------------------------------------------------------------------

_ID_ALPHABET = string.digits + string.ascii_uppercase + string.ascii_lowercase


def new_call_id() -> str:
    """A tool call id as llama-server makes them (random_string: 32 alphanumerics)."""
    return "".join(secrets.choice(_ID_ALPHABET) for _ in range(32))


def finish_reason(stopped: bool, tool_calls: list) -> str:
    """llama-server's finish_reason: "length" at the token limit, else "tool_calls" when the
    message has calls, else "stop"."""
    if not stopped:
        return "length"
    return "tool_calls" if tool_calls else "stop"


class _Need(Exception):
    """The text ends before the pattern could be decided."""


class _Fail(Exception):
    """The text does not match the pattern."""


_WS = " \t\r\n"
_STR_BODY = re.compile(r'(?:[^"\\]|\\.)*', re.S)
_HEADER_LIMIT = 2048  # a start that is still undecided after this many characters is text


class _Cursor:
    """Matches a fixed pattern step by step at the front of a text that may still grow."""

    def __init__(self, text: str, pos: int = 0):
        self.text, self.pos = text, pos

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WS:
            self.pos += 1
        if self.pos == len(self.text):
            raise _Need

    def lit(self, s: str) -> None:
        got = self.text[self.pos:self.pos + len(s)]
        if not s.startswith(got):
            raise _Fail
        if len(got) < len(s):
            raise _Need
        self.pos += len(s)

    def tokens(self, *lits: str) -> None:
        """Each literal, then optional blanks."""
        for s in lits:
            self.lit(s)
            self.ws()

    def opt(self, s: str) -> bool:
        try:
            self.lit(s)
            return True
        except _Fail:
            return False

    def string(self) -> str:
        start = self.pos
        self.lit('"')
        end = _STR_BODY.match(self.text, self.pos).end()
        if end >= len(self.text) or (self.text[end] == "\\" and end + 1 >= len(self.text)):
            raise _Need
        if self.text[end] != '"':
            raise _Fail
        self.pos = end + 1
        try:
            return json.loads(self.text[start:self.pos])
        except ValueError:
            raise _Fail from None

    def until(self, stop: str, limit: int = 256) -> str:
        end = self.text.find(stop, self.pos)
        if end < 0:
            if len(self.text) - self.pos > limit:
                raise _Fail
            raise _Need
        value, self.pos = self.text[self.pos:end], end + len(stop)
        return value


def _call_header(text: str, pos: int, keys: tuple[str, ...]) -> tuple[int, str]:
    """Match `{ ["type": "function",] "name": "N", "KEY":` at pos: (end, name)."""
    c = _Cursor(text, pos)
    c.tokens("{")
    save = c.pos
    try:
        c.tokens('"type"', ":", '"function"', ",")
    except _Fail:
        c.pos = save
    c.tokens('"name"', ":")
    name = c.string()
    c.ws()
    c.tokens(",")
    need, after = False, c.pos
    for key in keys:
        try:
            c.pos = after
            c.tokens(json.dumps(key))
            c.lit(":")
            return c.pos, name
        except _Need:
            need = True
        except _Fail:
            pass
    raise _Need if need else _Fail


class _ValueEnd:
    """Finds where a JSON value ends in text fed piece by piece (aware of strings and nesting);
    depth 1 finds the end of the object the text is inside."""

    def __init__(self, depth: int = 0):
        self.depth, self.in_str, self.esc, self.scalar = depth, False, False, False

    def feed(self, text: str) -> int | None:
        for i, ch in enumerate(text):
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif ch == "\\":
                    self.esc = True
                elif ch == '"':
                    self.in_str = False
                    if self.depth == 0:
                        return i + 1
            elif ch == '"':
                self.in_str = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]":
                if self.depth == 0:
                    return i
                self.depth -= 1
                if self.depth == 0:
                    return i + 1
            elif self.depth == 0 and (ch in _WS or ch == ","):
                if self.scalar:
                    return i
            elif self.depth == 0:
                self.scalar = True
        return None


_STR_SAFE = re.compile(r'(?:[^"\\]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*')
_HIGH_SURROGATE_END = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}$")
_PARTIAL_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{0,3})?")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _loads_body(body: str) -> str:
    text = json.loads('"' + body + '"', strict=False)
    return _LONE_SURROGATE.sub("\ufffd", text)  # half a pair cannot be sent as UTF-8


def _string_piece(text: str, final: bool) -> tuple[str, int, bool]:
    """Decode the front of a JSON string body: (text, characters used, closed by a quote)."""
    end = _STR_SAFE.match(text).end()
    tail = text[end:]
    if tail.startswith('"'):
        return _loads_body(text[:end]), end + 1, True
    if not final and (not tail or _PARTIAL_ESCAPE.fullmatch(tail)):
        if _HIGH_SURROGATE_END.search(text[:end]):
            end -= 6  # wait for the low half of the pair
        return _loads_body(text[:end]), end, False
    if tail.startswith("\\"):  # an escape JSON does not know: the backslash is kept as text
        return _loads_body(text[:end]) + "\\", end + 1, False
    return _loads_body(text[:end]), end, False


def _partial_suffix(text: str, words: tuple[str, ...]) -> int:
    """Length of the longest end of `text` that is a proper prefix of one of `words`."""
    best = 0
    for w in words:
        for n in range(min(len(w) - 1, len(text)), best, -1):
            if text.endswith(w[:n]):
                best = n
                break
    return best


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return {float: "number", dict: "object", list: "array", str: "string",
            type(None): "null"}[type(value)]


def _xml_json_value(text: str, schema: Any) -> str:
    """A buffered qwen3_coder parameter value as JSON text: typed by the schema, else a string."""
    s, types = text.strip(), _value_types(schema)
    try:
        value = json.loads(s)
    except ValueError:
        value = {"True": True, "False": False, "None": None}.get(s, text)  # pythonic scalars
    kind = _json_type(value)
    if kind == "string" or (types is not None and kind not in types and not (
            kind == "integer" and "number" in types)):
        return json.dumps(text, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


class ToolCallParser:
    """Generated content (after the reasoning split) in, OpenAI chat deltas out.

    feed(text) and finish() return lists of deltas, each ready to be a chunk's `delta`:
    {"content": "..."}, a call's first delta {"tool_calls": [{"index", "id", "type": "function",
    "function": {"name", "arguments": ""}}]}, then its argument fragments {"tool_calls":
    [{"index", "function": {"arguments": "..."}}]}. Text that may still turn into markup (a
    partial "<tool_", a leading "{" that may be an untagged call) is held back until decided;
    markup never reaches content. `content` and `tool_calls` hold the message so far.
    """

    def __init__(self, fmt: ToolFormat | str, tools: list[dict] | None = None,
                 tool_choice: Any = "auto", id_factory: Callable[[], str] | None = None):
        self.fmt, tools = ToolFormat(fmt), tools or []
        self.names = set(_names(tools))
        self.params = {t["function"]["name"]: tool_parameters(t["function"]) for t in tools}
        active = bool(tools) and parse_tool_choice(tool_choice, tools).mode != "none"
        self.new_id = id_factory or new_call_id
        self.content, self.tool_calls = "", []
        self.buf, self.events = "", []
        self.state = self._start if active else self._plain
        if active and self.fmt == ToolFormat.GENERIC:
            self.state = self._g_start
        self.words = {ToolFormat.LLAMA3_JSON: ("<|python_tag|>",)}.get(self.fmt, ("<tool_call>",))
        self.keys = ("parameters", "arguments") if self.fmt == ToolFormat.LLAMA3_JSON \
            else ("arguments",)
        self.close: str | None = None  # what ends the current call: "</tool_call>", "```", none
        self.after: Callable[[bool], bool] = self._after_call  # the state after a call
        self.trigger = ""  # the word that opened the current call
        self.scan: _ValueEnd | None = None  # where the arguments (then the call object) end
        # the current qwen3_coder parameter: its schema, streamed as text or parsed at its end
        self.nparams, self.stream, self.schema, self.value_start = 0, False, None, False

    # -- public -----------------------------------------------------------------------------
    def feed(self, text: str) -> list[dict]:
        """Deltas for the next piece of generated text."""
        self.buf += text
        self._run(final=False)
        return self._take()

    def finish(self) -> list[dict]:
        """Deltas for what was held back, at the end of generation."""
        self._run(final=True)
        self.buf = ""
        return self._take()

    # -- output -----------------------------------------------------------------------------
    def _take(self) -> list[dict]:
        events, self.events = self.events, []
        return events

    def _emit(self, text: str) -> None:
        if not text:
            return
        self.content += text
        if self.events and set(self.events[-1]) == {"content"}:
            self.events[-1]["content"] += text
        else:
            self.events.append({"content": text})

    def _open_call(self, name: str) -> None:
        call_id = self.new_id()
        self.tool_calls.append({"id": call_id, "type": "function",
                                "function": {"name": name, "arguments": ""}})
        self.events.append({"tool_calls": [{"index": len(self.tool_calls) - 1, "id": call_id,
                                            "type": "function",
                                            "function": {"name": name, "arguments": ""}}]})

    def _args(self, text: str) -> None:
        if not text:
            return
        index = len(self.tool_calls) - 1
        self.tool_calls[index]["function"]["arguments"] += text
        last = self.events[-1]["tool_calls"][0] if self.events and "tool_calls" in \
            self.events[-1] else None
        if last is not None and "id" not in last and last["index"] == index:
            last["function"]["arguments"] += text
        else:
            self.events.append({"tool_calls": [{"index": index, "function": {"arguments": text}}]})

    def _run(self, final: bool) -> None:
        while self.state(final):
            pass

    # -- text and triggers ------------------------------------------------------------------
    def _plain(self, final: bool) -> bool:
        self._emit(self.buf)
        self.buf = ""
        return False

    def _start(self, final: bool) -> bool:
        """The front of the output: a leading <think> block passes as text; a bare or fenced
        JSON call is a call (hermes: one of the tools; llama3_json: any name)."""
        rest = self.buf.lstrip()
        if not rest:
            if final:
                self._emit(self.buf)
                self.buf = ""
            return False
        if self.fmt in (ToolFormat.HERMES, ToolFormat.LLAMA3_JSON) and rest[0] in "{`":
            try:
                c = _Cursor(rest)
                fenced = self.fmt == ToolFormat.HERMES and c.opt("```")
                if fenced:
                    c.opt("json")
                    c.ws()
                end, name = _call_header(rest, c.pos, self.keys)
                if self.fmt == ToolFormat.HERMES and name not in self.names:
                    raise _Fail
            except _Need:
                if not final and len(rest) < _HEADER_LIMIT:
                    return False
            except _Fail:
                pass
            else:
                self.buf, self.close = rest[end:], "```" if fenced else None
                self._open_call(name)
                self.state, self.after, self.scan = self._json_args, self._after_call, None
                return True
        if rest.startswith("<think>") and self.fmt != ToolFormat.LLAMA3_JSON:
            self.state = self._think
            return True
        if not final and "<think>".startswith(rest) and self.fmt != ToolFormat.LLAMA3_JSON:
            return False
        self.state = self._text
        return True

    def _think(self, final: bool) -> bool:
        end = self.buf.find("</think>")
        if end < 0:
            keep = 0 if final else _partial_suffix(self.buf, ("</think>",))
            self._emit(self.buf[:len(self.buf) - keep])
            self.buf = self.buf[len(self.buf) - keep:]
            return False
        self._emit(self.buf[:end + len("</think>")])
        self.buf, self.state = self.buf[end + len("</think>"):], self._text
        return True

    def _text(self, final: bool) -> bool:
        hits = [(i, w) for w in self.words if (i := self.buf.find(w)) >= 0]
        if hits:
            i, word = min(hits)
            before = self.buf[:i]
            if self.content or not before.isspace():  # blanks before a first call are dropped
                self._emit(before)
            self.buf, self.trigger = self.buf[i + len(word):], word
            self.after = self._after_call
            if self.fmt == ToolFormat.QWEN3_CODER:
                self.state = self._xml_function
            else:
                self.close = "</tool_call>" if word == "<tool_call>" else None
                self.state = self._json_header
            return True
        keep = 0 if final else _partial_suffix(self.buf, self.words)
        out = self.buf[:len(self.buf) - keep]
        if not final and not self.content and out.isspace():
            return False  # leading blanks wait: a call may follow
        self._emit(out)
        self.buf = self.buf[len(out):]
        return False

    def _fallback(self) -> bool:
        """After a trigger, text that is not a call: tagged text is tried as loose JSON, other
        text goes back to content with its trigger."""
        if self.trigger == "<tool_call>":
            self.state = self._tagged_loose
        elif not self.trigger:  # inside the generic envelope: the rest is plain text
            self.state = self._plain
        else:
            self._emit(self.trigger)
            self.state = self._text
        return True

    # -- JSON calls -------------------------------------------------------------------------
    def _json_header(self, final: bool) -> bool:
        i = len(self.buf) - len(self.buf.lstrip())
        try:
            end, name = _call_header(self.buf, i, self.keys)
        except _Need:
            if not final and len(self.buf) < _HEADER_LIMIT:
                return False
            return self._fallback()
        except _Fail:
            return self._fallback()
        self._open_call(name)
        self.buf, self.state, self.scan = self.buf[end:], self._json_args, None
        return True

    def _json_args(self, final: bool) -> bool:
        if self.scan is None:
            self.buf = self.buf.lstrip()
            if not self.buf:
                return False
            self.scan = _ValueEnd()
        end = self.scan.feed(self.buf)
        if end is None:
            self._args(self.buf)
            self.buf = ""
            return False
        self._args(self.buf[:end])
        self.buf, self.state, self.scan = self.buf[end:], self._json_tail, _ValueEnd(depth=1)
        return True

    def _json_tail(self, final: bool) -> bool:
        """The rest of the call object after its arguments (extra members are dropped)."""
        end = self.scan.feed(self.buf)
        if end is None:
            self.buf = ""
            return False
        self.buf, self.state = self.buf[end:], self._close_tag
        return True

    def _close_tag(self, final: bool) -> bool:
        rest = self.buf.lstrip()
        if self.close:
            if rest.startswith(self.close):
                rest = rest[len(self.close):]
            elif self.close.startswith(rest) and not final:
                return False  # blanks or part of the closing tag so far
        self.buf, self.state = rest, self.after
        return True

    def _after_call(self, final: bool) -> bool:
        self.buf = self.buf.lstrip()
        if not self.buf:
            return False
        self.state = self._text
        return True

    def _tagged_loose(self, final: bool) -> bool:
        """<tool_call> with JSON our header does not match (keys in another order, no
        arguments): parsed whole once the closing tag is there. Not JSON at all: text."""
        rest = self.buf.lstrip()
        if rest and not rest.startswith("{"):
            self._emit("<tool_call>")
            self.state = self._text
            return True
        end = self.buf.find("</tool_call>")
        if end < 0 and not final:
            return False
        inner = self.buf if end < 0 else self.buf[:end]
        rest = "" if end < 0 else self.buf[end + len("</tool_call>"):]
        try:
            obj = json.loads(inner)
            name = obj["name"]
            args = obj.get("arguments", obj.get("parameters", {}))
            if not isinstance(name, str):
                raise TypeError
        except (ValueError, TypeError, KeyError):
            self._emit("<tool_call>" + inner + ("" if end < 0 else "</tool_call>"))
            self.buf, self.state = rest, self._text
            return True
        self._open_call(name)
        self._args(args if isinstance(args, str) else json.dumps(args, ensure_ascii=False))
        self.buf, self.state = rest, self._after_call
        return True

    # -- qwen3_coder XML calls --------------------------------------------------------------
    def _xml_function(self, final: bool) -> bool:
        rest = self.buf.lstrip()
        if rest.startswith("{"):  # a hermes-style JSON body inside <tool_call>
            self.close, self.state = "</tool_call>", self._json_header
            return True
        try:
            c = _Cursor(rest)
            c.lit("<function=")
            name = c.until(">")
        except _Need:
            if not final:
                return False
            return self._fallback()
        except _Fail:
            return self._fallback()
        self._open_call(name.strip())
        self.buf, self.state, self.nparams = rest[c.pos:], self._xml_params, 0
        return True

    def _xml_params(self, final: bool) -> bool:
        rest = self.buf.lstrip()
        if rest.startswith("</function>"):
            self._close_xml_args()
            self.buf, self.close, self.state = rest[len("</function>"):], "</tool_call>", \
                self._close_tag
            return True
        try:
            c = _Cursor(rest)
            c.lit("<parameter=")
            key = c.until(">").strip()
        except _Need:
            if not final:
                return False
            return self._xml_give_up(rest)
        except _Fail:
            if not final and "</function>".startswith(rest):
                return False
            return self._xml_give_up(rest)
        schema = (self.params.get(self.tool_calls[-1]["function"]["name"]) or {}).get(
            "properties", {}).get(key)
        self.stream = _value_types(schema) == {"string"}
        self.schema, self.value_start = schema, True
        self._args(("{" if self.nparams == 0 else ", ") + json.dumps(key, ensure_ascii=False)
                   + ": " + ('"' if self.stream else ""))
        self.nparams += 1
        self.buf, self.state = rest[c.pos:], self._xml_value
        return True

    def _xml_give_up(self, rest: str) -> bool:
        self._close_xml_args()
        self.buf, self.state = rest, self._text
        return True

    def _xml_value(self, final: bool) -> bool:
        if self.value_start:
            if not self.buf and not final:
                return False
            self.buf, self.value_start = self.buf.removeprefix("\n"), False
        end = self.buf.find("</parameter>")
        if end < 0 and not final:
            if self.stream:
                keep = _partial_suffix(self.buf, ("\n</parameter>", "</parameter>"))
                self._args(json.dumps(self.buf[:len(self.buf) - keep], ensure_ascii=False)[1:-1])
                self.buf = self.buf[len(self.buf) - keep:]
            return False
        value = self.buf if end < 0 else self.buf[:end]
        value = value[:-1] if end >= 0 and value.endswith("\n") else value
        if self.stream:
            self._args(json.dumps(value, ensure_ascii=False)[1:-1] + '"')
        else:
            self._args(_xml_json_value(value, self.schema))
        self.buf = "" if end < 0 else self.buf[end + len("</parameter>"):]
        self.state = self._xml_params
        return True

    def _close_xml_args(self) -> None:
        if self.state == self._xml_value and self.stream:
            self._args('"')
        self._args("{}" if self.nparams == 0 else "}")
        self.state = self._text

    # -- generic JSON envelope --------------------------------------------------------------
    def _g_start(self, final: bool) -> bool:
        rest = self.buf.lstrip()
        if not rest:
            return False
        try:
            c = _Cursor(rest)
            c.tokens("{")
            key = c.string()
            c.ws()
            c.tokens(":")
            if key not in ("response", "tool_call", "tool_calls"):
                raise _Fail
        except _Need:
            if not final and len(rest) < _HEADER_LIMIT:
                return False
            self.state = self._plain
            return True
        except _Fail:
            self.state = self._plain
            return True
        self.buf, self.trigger = rest[c.pos:], ""
        if key == "response":
            self.state = self._g_response
        elif key == "tool_call":
            self.state, self.after, self.close = self._json_header, self._g_done, None
        else:
            self.state = self._g_calls
        return True

    def _g_response(self, final: bool) -> bool:
        if not self.buf.startswith('"'):
            self.state = self._plain  # not a string: the JSON text as it is
            return True
        text, used, closed = _string_piece(self.buf[1:], final)
        self._emit(text)
        self.buf = '"' + self.buf[1 + used:]
        if closed:
            self.buf, self.state = "", self._g_done
            return True
        return False

    def _g_calls(self, final: bool) -> bool:
        rest = self.buf.lstrip()
        if not rest:
            return False
        if rest[0] in "[,":
            self.buf = rest[1:]
            return True
        if rest[0] == "{":
            self.buf, self.state, self.after, self.close = rest, self._json_header, \
                self._g_calls, None
            return True
        self.state = self._g_done
        return True

    def _g_done(self, final: bool) -> bool:
        self.buf = ""  # the envelope's closing brackets
        return False


def parse_output(fmt: ToolFormat | str, text: str, tools: list[dict] | None = None,
                 tool_choice: Any = "auto",
                 id_factory: Callable[[], str] | None = None) -> tuple[str, list[dict]]:
    """(content, tool_calls) of a whole generated content text: calls in OpenAI's shape
    {"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}, content
    without call markup ("" when the model wrote only calls, as llama-server returns it)."""
    parser = ToolCallParser(fmt, tools, tool_choice, id_factory)
    parser.feed(text)
    parser.finish()
    return parser.content, parser.tool_calls


@dataclass
class ToolPlan:
    """One chat request's tool calling: the format, the checked tools, tool_choice, whether
    calls may come in parallel, and the grammar that keeps calls well-formed."""

    fmt: ToolFormat
    tools: list[dict]
    choice: Any
    parallel: bool
    grammar: ToolGrammar | None

    def parser(self, id_factory: Callable[[], str] | None = None) -> ToolCallParser:
        return ToolCallParser(self.fmt, self.tools, self.choice, id_factory)


def plan_tools(template: ChatTemplate, tools: Any, tool_choice: Any = None,
               parallel_tool_calls: bool | None = None) -> ToolPlan | None:
    """The plan for a request's `tools` (None when there are none or tool_choice is "none");
    ValueError for bad tools or tool_choice. parallel_tool_calls defaults to whether the
    template can render several calls in one turn (llama-server's default)."""
    tools = validate_tools(tools)
    choice = parse_tool_choice(tool_choice, tools)
    if not tools or choice.mode == "none":
        return None
    fmt = detect_format(template.source)
    if parallel_tool_calls is None:
        parallel_tool_calls = template_caps(template).parallel_tool_calls
    grammar = call_grammar(fmt, tools, tool_choice, parallel_tool_calls)
    return ToolPlan(fmt, tools, tool_choice, parallel_tool_calls, grammar)
