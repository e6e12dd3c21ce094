"""Request bodies to engine tasks: field names, defaults and validation as llama.cpp's server
(tools/server/server-task.cpp params_from_json_cmpl, server-common.cpp oaicompat parsers).

Every field of every route is described by a JSON Schema subset (request_fields), checked
before the task is queued (validate) and published in /openapi.json (openapi.py). A bad field
raises RequestError, answered as 400 invalid_request_error; a field asking for something not
implemented raises NotSupported, answered as 400 not_supported_error.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from ..chat.reasoning import FORMATS as REASONING_FORMATS
from ..engine.speculative import SpecParams
from ..grammar import Grammar, GrammarError
from ..sampling import SamplingParams
from ..sampling.params import NOT_IMPLEMENTED, SAMPLER_ALIASES, SAMPLER_CHARS, UnsupportedSampler


class RequestError(ValueError):
    """A request refused before it is queued: `status` (400 unless said otherwise) and
    llama.cpp's error `kind`."""

    def __init__(self, message: str, kind: str = "invalid_request_error", status: int = 400):
        super().__init__(message)
        self.kind, self.status = kind, status


class NotSupported(RequestError):
    """A field that would change the result but is not implemented: 400 not_supported_error."""

    def __init__(self, message: str):
        super().__init__(message, "not_supported_error")


# -- the body -----------------------------------------------------------------------------------

MAX_DEPTH = 128  # nesting levels of arrays and objects in a request body
MAX_STOPS, MAX_STOP_LENGTH = 64, 1024  # stop strings in a request, characters in each


def _not_a_number(name: str):
    raise RequestError(f"Invalid JSON in request body: {name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise RequestError(f"Invalid JSON in request body: the number {text[:32]} is out of range")
    return value


def parse_body(raw: bytes) -> dict:
    """A request body as a JSON object, read strictly: UTF-8, standard numbers only (no NaN,
    Infinity, or numbers that overflow a double), no lone surrogates, at most MAX_DEPTH levels
    deep. Anything else raises RequestError."""
    if not raw.strip():
        raise RequestError("the request body is empty: send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(f"the request body is not valid UTF-8: {e}") from None
    text = text.removeprefix("\ufeff")  # a byte order mark is no error
    try:
        data = json.loads(text, parse_constant=_not_a_number, parse_float=_finite)
    except RequestError:
        raise
    except RecursionError:
        raise RequestError("Invalid JSON in request body: nested too deeply") from None
    except ValueError as e:  # a syntax error, or an integer past Python's digit limit
        raise RequestError(f"Invalid JSON in request body: {e}") from None
    if not isinstance(data, dict):
        raise RequestError("the request body must be a JSON object")
    check_tree(data)
    return data


def check_tree(data: Any) -> None:
    """Every string (keys too) encodes to UTF-8, and nesting stays within MAX_DEPTH; iterative,
    so no depth can exhaust the stack."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _utf8(value)
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise RequestError(f"the request body is nested more than {MAX_DEPTH} levels deep")
            if isinstance(value, dict):
                for key, item in value.items():
                    _utf8(key)
                    stack.append((item, depth + 1))
            else:
                stack.extend((item, depth + 1) for item in value)


def _utf8(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise RequestError("the request body holds a lone surrogate (\\ud800-\\udfff "
                               "escape): strings must be valid Unicode") from None


# -- request fields: a JSON Schema subset, checked here and published at /openapi.json ------------

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
FLOAT_MAX = 3.4028234663852886e38  # llama.cpp reads numbers as float: finite float32 values
UINT32_MAX = 2**32 - 1


def _doc(schema: dict, doc: str) -> dict:
    return {**schema, "description": doc} if doc else schema


def integer(lo: int = INT32_MIN, hi: int = INT32_MAX, doc: str = "") -> dict:
    return _doc({"type": "integer", "minimum": lo, "maximum": hi}, doc)


def number(lo: float = -FLOAT_MAX, hi: float = FLOAT_MAX, doc: str = "") -> dict:
    """A finite number in [lo, hi]."""
    return _doc({"type": "number", "minimum": lo, "maximum": hi}, doc)


def boolean(doc: str = "", only: bool | None = None) -> dict:
    return _doc({"type": "boolean", **({} if only is None else {"enum": [only]})}, doc)


def string(doc: str = "", enum: Sequence[str] | None = None, max_length: int | None = None,
           pattern: str | None = None) -> dict:
    schema: dict = {"type": "string"}
    if enum is not None:
        schema["enum"] = list(enum)
    if max_length is not None:
        schema["maxLength"] = max_length
    if pattern is not None:
        schema["pattern"] = pattern  # documented; the field's own check enforces it
    return _doc(schema, doc)


def array(items: dict | None = None, doc: str = "", min_items: int | None = None,
          prefix: Sequence[dict] | None = None, max_items: int | None = None) -> dict:
    schema: dict = {"type": "array"}
    if items is not None:
        schema["items"] = items
    if prefix is not None:  # a fixed-length tuple
        schema.update(prefixItems=list(prefix), minItems=len(prefix), maxItems=len(prefix))
    if min_items is not None:
        schema["minItems"] = min_items
    if max_items is not None:
        schema["maxItems"] = max_items
    return _doc(schema, doc)


def obj(properties: dict | None = None, required: Sequence[str] = (), values: dict | None = None,
        doc: str = "") -> dict:
    """An object; `values` is the schema of properties not named (JSON Schema's
    additionalProperties)."""
    schema: dict = {"type": "object"}
    if properties:
        schema["properties"] = properties
    if required:
        schema["required"] = list(required)
    if values is not None:
        schema["additionalProperties"] = values
    return _doc(schema, doc)


def any_of(*schemas: dict, doc: str = "") -> dict:
    return _doc({"anyOf": list(schemas)}, doc)


def _json_integer(v: Any) -> bool:
    """JSON Schema's integer: 1.0 counts (and comes back from check as 1)."""
    return (isinstance(v, int) and not isinstance(v, bool)) or \
        (isinstance(v, float) and v.is_integer())


_TYPES = {
    "integer": _json_integer,
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def describe(schema: dict) -> str:
    """The schema in words, for error messages."""
    if "anyOf" in schema and "type" not in schema:
        return " or ".join(describe(s) for s in schema["anyOf"])
    kind = schema.get("type", "value")
    text = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if "enum" in schema and len(schema["enum"]) <= 8:
        text += " among " + ", ".join(json.dumps(v) for v in schema["enum"])
    elif "enum" in schema:
        text = f"one of the {len(schema['enum'])} known {kind} values (see /openapi.json)"
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum")
    if kind == "integer" and (lo, hi) != (INT32_MIN, INT32_MAX):
        text += f" from {lo} to {hi}"
    elif kind == "number" and "exclusiveMinimum" in schema:
        text += f" greater than {lo}"
    elif kind == "number" and (lo, hi) != (-FLOAT_MAX, FLOAT_MAX):
        text += f" from {lo:g} to {hi:g}"
    elif kind == "number":
        text += " (finite, within float range)"
    if kind == "array" and "items" in schema:
        text += " whose items are each " + describe(schema["items"])
    return text


def check(value: Any, schema: dict, where: str) -> Any:
    """`value` if it fits `schema`, else RequestError. The subset of JSON Schema read here: type,
    enum, minimum, exclusiveMinimum, maximum, maxLength, items, prefixItems, minItems, maxItems,
    properties, required, additionalProperties, and anyOf of typed options; other keywords
    (minLength, pattern, const, not, options without a type) only document what the field's own
    check enforces. A null property counts as absent (llama.cpp's json_value); an integral float
    (1.0) is an integer, and comes back as an int, in place. Recursion follows the schema, never
    the data's own depth."""
    if "anyOf" in schema:
        value = _check_any(value, schema, where)
    kind = schema.get("type")
    if kind is None:
        return value
    if not _TYPES[kind](value):
        raise RequestError(f"'{where}' must be {describe(schema)}")
    if kind == "integer":
        value = int(value)
    if "enum" in schema and value not in schema["enum"]:
        raise RequestError(f"'{where}' must be {describe(schema)}")
    if kind in ("integer", "number"):
        _check_bounds(value, schema, where)
    elif kind == "string" and len(value) > schema.get("maxLength", len(value)):
        raise RequestError(f"'{where}' must be at most {schema['maxLength']} characters long")
    elif kind == "array":
        _check_items(value, schema, where)
    elif kind == "object":
        _check_properties(value, schema, where)
    return value


def _check_any(value: Any, schema: dict, where: str) -> Any:
    near = []  # the failures of options of the value's own type: their message is the useful one
    for option in schema["anyOf"]:
        try:
            return check(value, option, where)
        except RequestError as e:
            if "type" in option and _TYPES[option["type"]](value):
                near.append(e)
    if len(near) == 1:
        raise near[0]
    raise RequestError(f"'{where}' must be {describe({'anyOf': schema['anyOf']})}")


def _check_bounds(value: int | float, schema: dict, where: str) -> None:
    try:
        ok = math.isfinite(value)  # an int past the float range overflows here
    except OverflowError:
        ok = False
    if ok and "minimum" in schema:
        ok = value >= schema["minimum"]
    if ok and "exclusiveMinimum" in schema:
        ok = value > schema["exclusiveMinimum"]
    if ok and "maximum" in schema:
        ok = value <= schema["maximum"]
    if not ok:
        raise RequestError(f"'{where}' must be {describe(schema)}")


def _check_items(value: list, schema: dict, where: str) -> None:
    lo, hi = schema.get("minItems", 0), schema.get("maxItems", len(value))
    if not lo <= len(value) <= hi:
        count = (f"exactly {lo}" if lo == schema.get("maxItems") else
                 f"at least {lo}" if len(value) < lo else f"at most {hi}")
        raise RequestError(f"'{where}' must have {count} item{'s' * (count[-2:] != ' 1')}")
    for i, part in enumerate(schema.get("prefixItems", ())[:len(value)]):
        value[i] = check(value[i], part, f"{where}[{i}]")
    if "items" in schema:
        for i, item in enumerate(value):
            value[i] = check(item, schema["items"], f"{where}[{i}]")


def _check_properties(value: dict, schema: dict, where: str) -> None:
    for key in schema.get("required", ()):
        if value.get(key) is None:
            raise RequestError(f"'{where}.{key}' is required" if where else f"'{key}' is required")
    properties, others = schema.get("properties", {}), schema.get("additionalProperties")
    for key, item in value.items():
        part = properties.get(key, others)
        if item is not None and isinstance(part, dict):
            value[key] = check(item, part, f"{where}.{key}" if where else key)


# -- the fields of each route ---------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What the bounds of some fields depend on: the vocabulary, the slots, a slot's context."""

    n_vocab: int = 2**31 - 1
    n_slots: int = 1
    n_ctx_slot: int = 2**31 - 1


NUMBER_FIELDS = ("temperature", "temp", "dynatemp_range", "dynatemp_exponent", "top_p", "min_p",
                 "typical_p", "typ_p", "top_n_sigma", "xtc_probability", "xtc_threshold",
                 "repeat_penalty", "penalty_repeat", "presence_penalty", "penalty_present",
                 "frequency_penalty", "penalty_freq", "dry_multiplier", "dry_base",
                 "mirostat_tau", "mirostat_eta")
IMPLEMENTED_SAMPLERS = sorted(k for k, v in SAMPLER_ALIASES.items() if v not in NOT_IMPLEMENTED)
SAMPLER_CHAR_PATTERN = "^[" + "".join(c for c, v in SAMPLER_CHARS.items()
                                      if v not in NOT_IMPLEMENTED) + "]*$"
NOT_SUPPORTED_NOTE = "; other values answer 400 not_supported_error (not implemented yet)"
MAX_BIAS_TEXT = 1024  # characters of a logit_bias text key


@lru_cache(maxsize=32)
def sampling_fields(limits: Limits) -> dict[str, dict]:
    """llama.cpp's sampling fields (params_from_json_cmpl), with the aliases SamplingParams
    takes."""
    token = integer(0, limits.n_vocab - 1, "a token id")
    bias = any_of(number(), boolean(), doc="a bias added to the logit; false bans the token")
    numbers_ = {name: number() for name in NUMBER_FIELDS}
    # repeat_penalty divides the logits: from float32's smallest normal number up
    numbers_.update(repeat_penalty=number(2.0**-126), penalty_repeat=number(2.0**-126))
    return {
        **numbers_,
        "top_k": integer(doc="<= 0: off"),
        "repeat_last_n": integer(-1, doc="-1: the slot's context"),
        "penalty_last_n": integer(-1, doc="alias of repeat_last_n"),
        "dry_allowed_length": integer(),
        "dry_penalty_last_n": integer(-1, doc="-1: the slot's context"),
        "dry_sequence_breakers": array(string(), min_items=1),
        "mirostat": integer(0, 2),
        "seed": integer(-1, UINT32_MAX, "-1: a random seed"),
        "min_keep": integer(0),
        "n_probs": integer(0, 100),
        "post_sampling_probs": boolean(),
        "samplers": any_of(array(string(enum=IMPLEMENTED_SAMPLERS)),
                           string(pattern=SAMPLER_CHAR_PATTERN),
                           doc="sampler names (infill and adaptive_p are not implemented), or "
                               "their letters"),
        "logit_bias": any_of(
            obj(values=bias, doc="token id (as a string) or text -> bias"),
            array(array(prefix=[any_of(token, string(max_length=MAX_BIAS_TEXT)), bias])),
            doc="token ids must be in the vocabulary; a text is tokenized"),
    }


N_PREDICT_DOC = ("tokens to generate; -1: until EOS or the context is full; the server's -n "
                 "caps it")


def completion_fields(limits: Limits) -> dict[str, dict]:
    """Fields shared by /completion, /v1/completions and /v1/chat/completions."""
    n_predict = integer(-1, doc=N_PREDICT_DOC)
    return {
        **sampling_fields(limits),
        "n_predict": n_predict, "max_tokens": n_predict, "max_completion_tokens": n_predict,
        "stream": boolean(),
        "stream_options": obj({"include_usage": boolean()}),
        # bounded: every generated token is checked against each stop string
        "stop": any_of(string(max_length=MAX_STOP_LENGTH),
                       array(string(max_length=MAX_STOP_LENGTH), max_items=MAX_STOPS)),
        "ignore_eos": boolean(), "cache_prompt": boolean(), "return_tokens": boolean(),
        "timings_per_token": boolean(doc="timings in every streamed chunk"),
        "id_slot": integer(-1, limits.n_slots - 1, "-1: any idle slot"),
        "n_keep": integer(-1, doc="-1: the whole prompt"),
        "model": string(), "user": string(),
        # documented with only the values that work (NOT_IMPLEMENTED_FIELDS says why)
        "n": integer(1, 1, "1" + NOT_SUPPORTED_NOTE),
        "n_cmpl": integer(1, 1, "1" + NOT_SUPPORTED_NOTE),
        "lora": array(obj(), "[]" + NOT_SUPPORTED_NOTE + ": no adapter is loaded", max_items=0),
        "grammar": string("a GBNF grammar the output must match (llama.cpp's grammars/README)"),
        "json_schema": any_of(obj(), boolean(), doc="a JSON schema the output must match"),
        "response_format": response_format_schema(),
        "grammar_lazy": boolean("the grammar applies from the first grammar_triggers match on"),
        "grammar_triggers": array(obj({"type": integer(0, 3, "0 token, 1 word; 2 and 3 "
                                                           "(patterns) answer 400 "
                                                           "not_supported_error"),
                                       "value": string(),
                                       "token": integer(0, limits.n_vocab - 1)},
                                      required=["type"]), max_items=MAX_STOPS),
        "preserved_tokens": array(string(), "[]" + NOT_SUPPORTED_NOTE, max_items=0),
        "n_indent": integer(0, 0, "0" + NOT_SUPPORTED_NOTE),
        "t_max_predict_ms": integer(hi=0, doc="<= 0" + NOT_SUPPORTED_NOTE),
        "response_fields": array(string(), "[]" + NOT_SUPPORTED_NOTE, max_items=0),
        "return_progress": boolean("false" + NOT_SUPPORTED_NOTE, only=False),
        # llama.cpp's per-request draft limits; without speculation no token is drafted
        "speculative.n_max": integer(0, doc="most tokens drafted per step"),
        "speculative.n_min": integer(0, doc="shorter drafts are dropped"),
        "speculative.p_min": number(0.0, 1.0, "a draft model stops below this probability"),
    }


@lru_cache(maxsize=1)
def response_format_schema() -> dict:
    wrapper = obj({"name": string(), "description": string(), "schema": any_of(obj(), boolean()),
                   "strict": boolean()})
    return obj({"type": string(enum=["text", "json_object", "json_schema"]),
                "schema": any_of(obj(), boolean()), "json_schema": wrapper}, required=["type"],
               doc='{"type": "json_object"} (optionally with "schema") or {"type": '
                   '"json_schema", "json_schema": {"name", "schema", "strict"}}')


def prompt_schema(limits: Limits, native: bool) -> dict:
    token = integer(0, limits.n_vocab - 1, "a token id")
    forms = [string(doc="may not tokenize to nothing"),
             array(any_of(token, string()), doc="token ids and texts, one prompt")]
    forms[0]["minLength"] = forms[1]["minItems"] = 1  # documented: the engine refuses no tokens
    if native:
        forms.append(obj({"prompt_string": string(), "multimodal_data": array(string())},
                         required=["prompt_string"],
                         doc="text with media markers and base64 images (--mmproj)"))
    return any_of(*forms)


@lru_cache(maxsize=1)
def message_schema() -> dict:
    part = obj({"type": string(enum=["text", "image_url", "input_audio"]), "text": string(),
                "image_url": any_of(string(), obj({"url": string(), "detail": string()}))},
               required=["type"], doc="image_url needs --mmproj (a base64 data URL); "
                                      "input_audio is not supported (400)")
    part["anyOf"] = [{"properties": {"type": {"const": kind}}, "required": [key]}
                     for kind, key in (("text", "text"), ("image_url", "image_url"))]
    part["anyOf"].append({"properties": {"type": {"const": "input_audio"}}})
    call = obj({"id": string(), "type": string(enum=["function"]),
                "function": obj({"name": string(), "arguments": any_of(string(), obj())},
                                required=["name"])}, required=["function"])
    message = obj({"role": string(), "content": any_of(string(), array(part), {"type": "null"}),
                   "name": string(), "tool_call_id": string(), "tool_calls": array(call),
                   "reasoning_content": string()}, required=["role"],
                  doc="needs 'content', or 'tool_calls' (then content may be null)")
    # documented here, enforced by messages_from
    message["anyOf"] = [{"required": ["content"],
                         "properties": {"content": {"not": {"type": "null"}}}},
                        {"required": ["tool_calls"], "properties": {"tool_calls": {"minItems": 1}}}]
    return message


def tools_fields() -> dict[str, dict]:
    tool = obj({"type": string(enum=["function"]),
                "function": obj({"name": string(), "description": string(),
                                 "parameters": obj()}, required=["name"])},
               required=["type", "function"])
    named = obj({"type": string(enum=["function"]),
                 "function": obj({"name": string()}, required=["name"])}, required=["function"])
    choice = any_of(string(enum=["none", "auto", "required"]), named,
                    doc='"auto", "none", "required" (a call from the first token) or a named '
                        'function')
    return {"tools": array(tool), "tool_choice": choice, "parallel_tool_calls": boolean(),
            "chat_template_kwargs": obj(doc="extra variables for the chat template")}


@lru_cache(maxsize=64)
def request_fields(route: str, limits: Limits) -> tuple[dict[str, dict], list[str]]:
    """(the fields, the required ones) of a route's request body: 'completion' (/completion),
    'completions' (/v1/completions), 'chat', 'tokenize', 'detokenize', 'apply-template'."""
    logprobs = integer(0, 100, "alternatives reported per token")
    if route == "completion":
        return {**completion_fields(limits), "prompt": prompt_schema(limits, native=True),
                "logprobs": logprobs}, ["prompt"]
    if route == "completions":
        return {**completion_fields(limits), "prompt": prompt_schema(limits, native=False),
                "logprobs": any_of(logprobs, boolean()),
                "echo": boolean("false" + NOT_SUPPORTED_NOTE, only=False),
                "suffix": string('""' + NOT_SUPPORTED_NOTE, max_length=0),
                "best_of": integer(1, 1, "1" + NOT_SUPPORTED_NOTE)}, ["prompt"]
    messages = array(message_schema(), min_items=1)
    if route == "chat":
        return {**completion_fields(limits), "messages": messages, **tools_fields(),
                "logprobs": boolean(), "top_logprobs": integer(0, 100),
                "reasoning_format": string(enum=list(REASONING_FORMATS))}, ["messages"]
    if route == "apply-template":
        return {"messages": messages, **tools_fields()}, ["messages"]
    if route == "tokenize":
        return {"content": string(), "add_special": boolean(), "parse_special": boolean(),
                "with_pieces": boolean()}, []
    if route == "detokenize":
        return {"tokens": array(integer(0, limits.n_vocab - 1, "a token id"))}, []
    raise KeyError(route)


def _above(n: int) -> Callable[[Any], bool]:
    return lambda v: _json_integer(v) and v > n


def _non_empty(kind: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, kind) and len(v) > 0


# field -> (does the value ask for something not implemented?, what to say); checked before the
# types, so each test first makes sure of the type it reads
NOT_IMPLEMENTED_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "preserved_tokens": (_non_empty(list), "'preserved_tokens' is not supported yet"),
    "n": (_above(1), "only one choice per request is supported (n = 1)"),
    "n_cmpl": (_above(1), "only one completion per request is supported (n_cmpl = 1)"),
    "best_of": (_above(1), "best_of > 1 is not supported"),
    "lora": (_non_empty(list), "no LoRA adapter is loaded: 'lora' must be empty"),
    "echo": (lambda v: v is True, "'echo' is not supported yet"),
    "suffix": (_non_empty(str), "'suffix' (fill-in-the-middle) is not supported yet"),
    "n_indent": (_above(0), "'n_indent' is not supported yet"),
    "t_max_predict_ms": (_above(0), "'t_max_predict_ms' is not supported yet"),
    "response_fields": (_non_empty(list), "'response_fields' is not supported yet"),
    "return_progress": (lambda v: v is True, "'return_progress' is not supported yet"),
}


def validate(data: dict, route: str, limits: Limits) -> None:
    """Every known field of a route's body, in place (1.0 becomes 1 where an integer is due):
    first what is not implemented and sampler names (for clear messages), then the messages,
    then every type and range."""
    fields_, required = request_fields(route, limits)
    for key, (asks, message) in NOT_IMPLEMENTED_FIELDS.items():
        if key in fields_ and data.get(key) is not None and asks(data[key]):
            raise NotSupported(message)
    if "samplers" in fields_:
        check_samplers(data.get("samplers"))
    if "messages" in fields_:
        messages_from(data)
    check(data, obj(fields_, required), "")


def check_samplers(samplers: Any) -> None:
    """Unknown sampler names are a 400 invalid_request_error (llama.cpp skips them), known ones
    that llamacpy lacks a 400 not_supported_error."""
    if isinstance(samplers, str):
        names = [SAMPLER_CHARS.get(c, c) for c in samplers]
        known = SAMPLER_CHARS.values()
    elif isinstance(samplers, list) and all(isinstance(s, str) for s in samplers):
        names = [SAMPLER_ALIASES.get(s, s) for s in samplers]  # exact, as llama.cpp's server
        known = SAMPLER_ALIASES.values()
    else:
        return  # the type check says what is wrong
    for name in names:
        if name in NOT_IMPLEMENTED:
            raise NotSupported(f"sampler {name!r} is not implemented in llamacpy")
        if name not in known:
            raise RequestError(f"unknown sampler {name!r}")


# -- completions ----------------------------------------------------------------------------------

@dataclass
class Completion:
    """What a completion or chat request asks for, before tokenization."""

    params: SamplingParams
    n_predict: int = -1
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    ignore_eos: bool = False
    n_probs: int = 0
    post_sampling_probs: bool = False
    logprobs: bool = False  # OpenAI-style logprobs requested
    top_logprobs: int = 0  # alternatives shown per token with logprobs (n_probs is at least 1)
    cache_prompt: bool = True
    n_keep: int | None = None  # tokens a context shift keeps; None: the server's --keep
    id_slot: int = -1
    return_tokens: bool = False
    model: str = ""
    timings_per_token: bool = False
    reasoning_format: str | None = None  # chat: this request's, else the server's
    grammar: Grammar | None = None  # grammar, json_schema or response_format, compiled
    grammar_source: str = ""  # as given (a schema as JSON), for generation_settings
    grammar_triggers: list[dict] | None = None  # grammar_lazy: where the grammar starts
    speculative: SpecParams | None = None  # speculative.n_max / n_min / p_min, when given


Tokenize = Callable[[str], list[int]]


def sampling_from(data: dict, base: SamplingParams, limits: Limits,
                  tokenize: Tokenize | None = None) -> SamplingParams:
    """The request's sampling fields (already validated) over the server's defaults."""
    known = sampling_fields(limits)
    fields_ = {k: data[k] for k in known if data.get(k) is not None}
    for key in NUMBER_FIELDS:
        if key in fields_:
            fields_[key] = float(fields_[key])
    for key in ("repeat_last_n", "penalty_last_n", "dry_penalty_last_n"):
        if fields_.get(key) == -1:  # llama.cpp: the slot's context
            fields_[key] = limits.n_ctx_slot
    if "logit_bias" in fields_:
        fields_["logit_bias"] = logit_bias_from(fields_["logit_bias"], limits, tokenize)
    try:
        return SamplingParams.from_dict(fields_, base=base)
    except UnsupportedSampler as e:
        raise NotSupported(str(e)) from None
    except (ValueError, TypeError, KeyError) as e:
        raise RequestError(str(e)) from None


def logit_bias_from(value: dict | list, limits: Limits, tokenize: Tokenize | None
                    ) -> dict[int, float]:
    """llama.cpp's logit_bias forms ({"15043": 1.0}, [[15043, -1.0]], texts for keys, false to
    ban, true ignored) as token -> bias; a token id outside the vocabulary is a RequestError."""
    out: dict[int, float] = {}
    for key, bias in value.items() if isinstance(value, dict) else value:
        if bias is True:
            continue
        bias = -math.inf if bias is False else float(bias)
        if isinstance(key, str) and re.fullmatch(r"[+-]?\d+", key):
            key = int(key) if len(key) < 12 else limits.n_vocab  # past int32: out of range
        if isinstance(key, int):
            tokens = [key]
        elif tokenize is None:
            raise RequestError("logit_bias keys must be token ids here")
        elif len(key) > MAX_BIAS_TEXT:
            raise RequestError(f"a logit_bias text must be at most {MAX_BIAS_TEXT} characters")
        else:
            tokens = tokenize(key)
        for t in tokens:
            if not 0 <= t < limits.n_vocab:
                raise RequestError(f"logit_bias: token id {t} is not in the vocabulary "
                                   f"(0 to {limits.n_vocab - 1})")
            out[t] = out.get(t, 0.0) + bias  # repeated tokens add up
    return out


def stop_list(data: dict) -> list[str]:
    stop = data.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        stop = [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]  # llama.cpp drops empty stop strings
    raise RequestError("'stop' must be a string or a list of strings")


def completion_from(data: dict, base: SamplingParams, default_n_predict: int, route: str,
                    limits: Limits = Limits(), tokenize: Tokenize | None = None,
                    ignore_eos: bool = False) -> Completion:
    """A validated /completion ('completion'), /v1/completions ('completions') or chat ('chat')
    body as a Completion (prompt and messages are the caller's); default_n_predict and
    ignore_eos are the server's (-n, --ignore-eos)."""
    validate(data, route, limits)
    c = Completion(params=sampling_from(data, base, limits, tokenize))
    n_predict = next((data[k] for k in ("n_predict", "max_completion_tokens", "max_tokens")
                      if data.get(k) is not None), -1)
    if default_n_predict > 0 and not 0 <= n_predict <= default_n_predict:
        n_predict = default_n_predict  # llama.cpp: the server's -n caps every request
    c.n_predict = n_predict
    c.stop = stop_list(data)
    c.stream = data.get("stream") is True
    c.include_usage = (data.get("stream_options") or {}).get("include_usage") is True
    c.ignore_eos = data["ignore_eos"] if isinstance(data.get("ignore_eos"), bool) else ignore_eos
    c.cache_prompt = data.get("cache_prompt") is not False
    c.n_keep = data.get("n_keep")
    c.id_slot = -1 if data.get("id_slot") is None else data["id_slot"]
    c.post_sampling_probs = data.get("post_sampling_probs") is True
    c.return_tokens = data.get("return_tokens") is True
    c.model = data.get("model") or ""
    c.n_probs = data.get("n_probs") or 0
    logprobs = data.get("logprobs")
    if route == "chat" and logprobs is not None:  # logprobs: bool, top_logprobs: alternatives
        c.logprobs = logprobs
        c.top_logprobs = (data.get("top_logprobs") or 0) if logprobs else 0
        c.n_probs = max(c.top_logprobs, 1) if logprobs else 0  # the chosen token's, at least
    elif route == "completions" and logprobs is not None and logprobs is not False:
        c.logprobs, c.top_logprobs = True, (0 if logprobs is True else logprobs)
        c.n_probs = max(c.top_logprobs, 1)
    elif route == "completion" and isinstance(logprobs, int) and "n_probs" not in data:
        c.n_probs = logprobs
    c.params.n_probs = c.n_probs
    c.timings_per_token = data.get("timings_per_token") is True
    c.reasoning_format = data.get("reasoning_format")
    c.grammar, c.grammar_source = constraint_from(data)
    c.speculative = speculative_from(data)
    if data.get("grammar_lazy"):
        if c.grammar is None:
            raise RequestError("'grammar_lazy' needs a grammar or a json_schema")
        c.grammar_triggers = data.get("grammar_triggers") or []
        if not c.grammar_triggers:
            raise RequestError("Error: no triggers set for lazy grammar!")
        trigger_words(c.grammar_triggers, str)  # refused kinds answer now, before tokenizing
    return c


def speculative_from(data: dict) -> SpecParams | None:
    """speculative.n_max / n_min / p_min, clamped as llama.cpp's params_from_json_cmpl
    (n_min at most n_max); None when the request sets none."""
    keys = ("speculative.n_max", "speculative.n_min", "speculative.p_min")
    if all(data.get(k) is None for k in keys):
        return None
    n_max, n_min, p_min = (data.get(k) for k in keys)
    n_min = n_min or 0
    if n_max is not None:
        n_min = min(n_min, n_max)
    return SpecParams(n_max=n_max, n_min=n_min, p_min=p_min)


def trigger_words(triggers: list[dict], token_text: Callable[[int], str]) -> list[str]:
    """The texts at whose first occurrence a lazy grammar starts (llama.cpp's grammar triggers:
    a word, or a token by id). Pattern triggers are refused: a regex run over the growing output
    at every token, in the engine thread, can backtrack for ever on a hostile pattern."""
    words = []
    for i, t in enumerate(triggers):
        kind, value = t["type"], t.get("value") or ""
        if kind in (2, 3):
            raise NotSupported(f"grammar_triggers[{i}]: pattern triggers are not supported; use "
                               "a word (type 1) or a token (type 0)")
        if kind == 0:
            if t.get("token") is None:
                raise RequestError(f"grammar_triggers[{i}]: a token trigger needs 'token'")
            value = token_text(t["token"])
        if not value:
            raise RequestError(f"grammar_triggers[{i}] needs a non-empty 'value'")
        words.append(value)
    return words


def constraint_from(data: dict) -> tuple[Grammar | None, str]:
    """The grammar a request asks for: `grammar` (GBNF), `json_schema`, or `response_format`'s
    schema; (None, "") for free text. Each is compiled here, so a bad one is a 400 that says
    what is wrong and where, before anything is queued."""
    grammar, schema = data.get("grammar"), data.get("json_schema")
    fmt = data.get("response_format")
    if fmt is not None and fmt.get("type") != "text":
        if fmt["type"] == "json_object":
            from_format = fmt.get("schema", {"type": "object"})
        else:
            from_format = (fmt.get("json_schema") or {}).get("schema", {})
        if schema is not None:
            raise RequestError("Either \"json_schema\" or \"response_format\" can be "
                               "specified, but not both")
        schema = from_format
    if grammar and schema is not None:
        raise RequestError("Either \"json_schema\" or \"grammar\" can be specified, but not both")
    try:
        if grammar:
            return Grammar.from_gbnf(grammar), grammar
        if schema is not None:
            return Grammar.from_json_schema(schema), json.dumps(schema)
    except GrammarError as e:
        kind = "grammar" if grammar else "JSON schema"
        raise RequestError(f"invalid {kind}: {e}") from None
    return None, ""


CHAT_TEMPLATE_RESERVED = ("messages", "add_generation_prompt", "tools", "self")


def messages_from(data: dict) -> list[dict]:
    """The chat messages, checked as llama.cpp's common_chat_msgs_parse_oaicompat does: each
    needs 'content' or 'tool_calls'; a null or missing content next to tool calls is ""."""
    shape = array(obj({"role": string()}, required=["role"]), min_items=1)
    messages = check(data.get("messages"), shape, "messages")
    for i, m in enumerate(messages):
        if m.get("content") is None and not m.get("tool_calls"):
            raise RequestError(f"Failed to parse messages: message {i} needs 'content' or "
                               "'tool_calls'")
    check(messages, array(message_schema(), min_items=1), "messages")
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if content is None:
            m = dict(m, content="")
        for part in content if isinstance(content, list) else ():
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise RequestError(f"message {i}: a text part needs a string 'text'")
        out.append(m)
    kwargs = data.get("chat_template_kwargs")
    if kwargs is not None:
        check(kwargs, obj(), "chat_template_kwargs")
        taken = [k for k in CHAT_TEMPLATE_RESERVED if k in kwargs]
        if taken:
            raise RequestError(f"'chat_template_kwargs' cannot set '{taken[0]}'")
    return out


NO_IMAGES = ("image input is not supported - hint: if this is unexpected, you may need to "
             "provide the mmproj")
NO_AUDIO = ("audio input is not supported - hint: if this is unexpected, you may need to "
            "provide the mmproj")


def load_media(messages: list[dict], allow_image: bool, marker: str) -> tuple[list[dict],
                                                                               list[bytes]]:
    """Messages with each image part replaced by a media-marker text part, and the images'
    bytes in prompt order (server-common.cpp: oaicompat_content_load_media)."""
    out, files = [], []
    for m in messages:
        if isinstance(m.get("content"), list):
            m = dict(m, content=[media_part(p, allow_image, marker, files) for p in m["content"]])
        out.append(m)
    return out, files


def media_part(part: dict, allow_image: bool, marker: str, files: list[bytes]) -> dict:
    if part["type"] == "input_audio":
        raise RequestError(NO_AUDIO)
    if part["type"] != "image_url":
        return part
    if not allow_image:
        raise RequestError(NO_IMAGES)
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise RequestError("'image_url' must have a non-empty 'url'")
    files.append(media_bytes(url))
    return {"type": "media_marker", "text": marker}


def media_bytes(url: str) -> bytes:
    """The file a URL carries: a base64 data URL or raw base64 (handle_media). Remote and local
    URLs are refused: this server has no network and no --media-path."""
    if url.startswith("http"):
        raise RequestError("Failed to download image: llamacpy does not fetch remote URLs; "
                           "send the image as a base64 data URL")
    if url.startswith("file://"):
        raise RequestError("file:// URLs are not allowed unless --media-path is specified")
    if url.startswith("data:"):
        parts = url.split(",")
        if len(parts) != 2:
            raise RequestError("Invalid uri-encoded base64 value")
        if not parts[0].startswith(("data:image/", "data:video/", "data:audio/")):
            raise RequestError(f"Invalid uri format: {parts[0]}")
        if not parts[0].endswith("base64"):
            raise RequestError("uri must be base64 encoded")
        url = parts[1]
    return base64_decode(url)


def base64_decode(text: str) -> bytes:
    try:
        data = base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        raise RequestError("Invalid base64 value") from None
    if not data:
        raise RequestError("Invalid base64 value")
    return data
