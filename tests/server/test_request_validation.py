"""params.py without a server: strict body parsing, the JSON Schema checks, the fields refused as
not implemented, and what a valid request turns into; openapi.py publishes the same schemas."""

from __future__ import annotations

import math

import pytest

from llamacpy.sampling import SamplingParams
from llamacpy.server.openapi import document
from llamacpy.server.params import (MAX_DEPTH, NOT_IMPLEMENTED_FIELDS, Limits, NotSupported,
                                    RequestError, check, completion_from, integer,
                                    logit_bias_from, messages_from, parse_body, request_fields,
                                    validate)

LIMITS = Limits(n_vocab=1000, n_slots=2, n_ctx_slot=256)
BASE = SamplingParams()


def build(data: dict, route: str = "completion", default_n_predict: int = -1, **kw):
    return completion_from(data, BASE, default_n_predict, route, LIMITS, **kw)


@pytest.mark.parametrize("raw", [
    b'{"a": NaN}', b'{"a": Infinity}', b'{"a": -Infinity}', b'{"a": 1e999}', b'{"a": -2e308}',
    b'{"a": 1' + b"0" * 5000 + b"}", b'{"a": "\\ud800"}', b'{"\\udc00": 1}', b'{"a": "\xff"}',
    b"[" * 100_000 + b"]" * 100_000, b'{"a": ' + b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1)
    + b"}", b"", b"  ", b"[]", b'"x"', b"null", b"{", b"a=1&b=2",
])
def test_unparseable_bodies(raw):
    with pytest.raises(RequestError) as e:
        parse_body(raw)
    assert e.value.status == 400 and e.value.kind == "invalid_request_error"


def test_parse_body_keeps_what_is_valid():
    assert parse_body(b'\xef\xbb\xbf{"a": "\\ud83d\\ude00", "b": 1.5e308}') == \
        {"a": "\U0001f600", "b": 1.5e308}
    deep = b"[" * (MAX_DEPTH - 1) + b"]" * (MAX_DEPTH - 1)
    assert parse_body(b'{"a": ' + deep + b"}")


def test_check_normalizes_and_points_at_the_field():
    data = {"n": 2.0, "xs": [1.0, 3], "skip": None}
    schema = {"type": "object", "properties": {"n": integer(), "xs": {"type": "array",
                                                                      "items": integer(0, 5)},
                                               "skip": integer()}}
    assert check(data, schema, "") == {"n": 2, "xs": [1, 3], "skip": None}
    assert isinstance(data["n"], int) and isinstance(data["xs"][0], int)
    with pytest.raises(RequestError, match=r"'xs\[1\]' must be an integer from 0 to 5"):
        check({"xs": [1, 9]}, schema, "")
    with pytest.raises(RequestError, match=r"'prompt\[2\]' must be an integer from 0 to 999"):
        validate({"prompt": [1, 2, 1000]}, "completion", LIMITS)
    with pytest.raises(RequestError, match="'n' must be an integer"):
        check({"n": 1.5}, schema, "")


@pytest.mark.parametrize("data", [
    {"prompt": "a", "temperature": "hot"}, {"prompt": "a", "temperature": 1e39},
    {"prompt": "a", "top_k": 2**31}, {"prompt": "a", "n_probs": 101},
    {"prompt": "a", "seed": 2**32}, {"prompt": "a", "mirostat": 3},
    {"prompt": "a", "repeat_penalty": 0}, {"prompt": "a", "id_slot": 2},
    {"prompt": "a", "id_slot": -2}, {"prompt": "a", "n_keep": -2}, {"prompt": "a", "stop": [1]},
    {"prompt": "a", "logit_bias": {"1": "x"}}, {"prompt": "a", "samplers": [1]},
    {"prompt": "a", "samplers": ["nope"]}, {"prompt": "a", "samplers": "kz"},
    {"prompt": "a", "dry_sequence_breakers": []}, {"prompt": {"text": "a"}}, {"prompt": [True]},
    {"n_predict": 3}, {"prompt": "a", "n": 0},
])
def test_invalid_fields(data):
    with pytest.raises(RequestError) as e:
        build(data)
    assert e.value.kind == "invalid_request_error"


@pytest.mark.parametrize("route, data", [
    ("completion", {"prompt": "a", "lora": [{"id": 0, "scale": 1}]}),
    ("completion", {"prompt": "a", "n_cmpl": 2}),
    ("completion", {"prompt": "a", "samplers": ["infill"]}),
    ("completion", {"prompt": "a", "samplers": "ta"}),
    ("completions", {"prompt": "a", "echo": True}),
    ("completions", {"prompt": "a", "suffix": "x"}),
    ("completions", {"prompt": "a", "best_of": 2}),
    ("chat", {"messages": [{"role": "user", "content": "a"}], "n": 2}),
])
def test_not_implemented_fields(route, data):
    with pytest.raises(NotSupported) as e:
        build(data, route)
    assert e.value.kind == "not_supported_error" and e.value.status == 400


def test_not_implemented_tests_read_any_type():
    """Those checks run before the type checks: junk of any type must not raise there."""
    for asks, _ in NOT_IMPLEMENTED_FIELDS.values():
        for junk in (None, 0, -1, 1.5, "x", "", [], [1], {}, {"type": 5}, True, False):
            asks(junk)


def test_a_valid_request():
    c = build({"prompt": [1, "a"], "n_predict": 500, "temperature": 1, "top_k": 3.0,
               "repeat_last_n": -1, "stop": ["", "x"], "id_slot": 1, "seed": -1,
               "logit_bias": {"5": False, "7": True, "hi": 2}, "stream": True},
              default_n_predict=16, tokenize=lambda text: [8, 9], ignore_eos=True)
    assert c.n_predict == 16  # the server's -n caps a request
    assert c.stop == ["x"] and c.id_slot == 1 and c.stream and c.ignore_eos
    p = c.params
    assert isinstance(p.temperature, float) and p.top_k == 3 and p.repeat_last_n == 256
    assert p.logit_bias == {5: -math.inf, 8: 2.0, 9: 2.0}
    assert build({"prompt": "a"}, default_n_predict=16).n_predict == 16
    assert build({"prompt": "a", "n_predict": 4}, default_n_predict=16).n_predict == 4
    assert build({"prompt": "a", "ignore_eos": False}, ignore_eos=True).ignore_eos is False


def test_logprobs_forms():
    msgs = [{"role": "user", "content": "a"}]
    c = build({"messages": msgs, "logprobs": True}, "chat")
    assert (c.logprobs, c.top_logprobs, c.n_probs) == (True, 0, 1)  # the chosen token's own
    c = build({"messages": msgs, "logprobs": True, "top_logprobs": 3}, "chat")
    assert (c.top_logprobs, c.n_probs, c.params.n_probs) == (3, 3, 3)
    c = build({"messages": msgs, "logprobs": False, "top_logprobs": 3}, "chat")
    assert (c.logprobs, c.n_probs) == (False, 0)
    c = build({"prompt": "a", "logprobs": 0}, "completions")
    assert (c.logprobs, c.top_logprobs, c.n_probs) == (True, 0, 1)
    assert build({"prompt": "a", "logprobs": 4}, "completion").n_probs == 4


def test_logit_bias_tokens_must_be_in_the_vocabulary():
    for value in ({"1000": 1}, [[1000, 1]], [[-1, 1]], {"9" * 40: 1}):
        with pytest.raises(RequestError, match="vocabulary"):
            logit_bias_from(value, LIMITS, None)
    with pytest.raises(RequestError, match="vocabulary"):
        logit_bias_from({"text": 1}, LIMITS, lambda text: [5000])
    assert logit_bias_from([[3, 1], [3, 0.5]], LIMITS, None) == {3: 1.5}


def test_messages():
    call = {"type": "function", "function": {"name": "f", "arguments": "{}"}}
    data = {"messages": [{"role": "user", "content": "a"},
                         {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "assistant", "tool_calls": [call]}]}
    out = messages_from(data)
    assert [m["content"] for m in out] == ["a", "", ""]
    assert out[1]["tool_calls"] == [call]  # what the chat template gets
    for bad in ([{"role": "user"}], [{"role": "user", "content": None}],
                [{"role": "assistant", "content": None, "tool_calls": []}],
                [{"role": "user", "content": [{"type": "text"}]}], [], "hi", None,
                [{"role": "assistant", "tool_calls": [{"function": {}}]}]):
        with pytest.raises(RequestError):
            messages_from({"messages": bad})
    for key in ("messages", "add_generation_prompt", "tools"):
        with pytest.raises(RequestError, match=key):
            messages_from({"messages": data["messages"][:1], "chat_template_kwargs": {key: 1}})


def test_the_document_publishes_the_validated_schemas():
    doc = document(LIMITS, "m")
    routes = {"/completion": "completion", "/v1/completions": "completions",
              "/v1/chat/completions": "chat", "/tokenize": "tokenize",
              "/detokenize": "detokenize", "/apply-template": "apply-template"}
    for path, route in routes.items():
        body = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        fields, required = request_fields(route, LIMITS)
        assert body.get("required", []) == required
        for name, schema in fields.items():
            published = body["properties"][name]
            assert published == schema or published == {"anyOf": [schema, {"type": "null"}]}
