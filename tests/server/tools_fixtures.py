"""Tools, stream readers and checks for tests/server/test_tools_openai.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx
import jsonschema


def tool(name: str, properties: dict, description: str = "", closed: bool = True) -> dict:
    """An OpenAI function tool whose arguments need every property; closed: no other keys
    (`additionalProperties: false`, as OpenAI's strict schemas say)."""
    params = {"type": "object", "properties": properties, "required": list(properties)}
    if closed:
        params["additionalProperties"] = False
    return {"type": "function",
            "function": {"name": name, "description": description, "parameters": params}}


CITY = {"city": {"type": "string", "description": "The city's name"}}
WEATHER = tool("get_weather", CITY, "Get the current weather in a city")
LOCAL_TIME = tool("get_time", CITY, "Get the current local time in a city")
# for random weights: every value bounded, so only the grammar decides when a call ends
TIMER = tool("set_timer", {"minutes": {"type": "integer", "minimum": 1, "maximum": 60},
                           "loud": {"type": "boolean"}}, "Start a kitchen timer")
FORECAST = tool("get_forecast", {"city": {"type": "string", "maxLength": 12},
                                 "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "The weather for the next days")


def check_calls(calls: list[dict], tools: list[dict]) -> list[dict]:
    """OpenAI tool calls (dicts): unique non-empty ids, a given tool's name, arguments a JSON
    string valid against that tool's parameters schema. Returns the parsed arguments."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    ids = [c["id"] for c in calls]
    assert all(isinstance(i, str) and i for i in ids) and len(set(ids)) == len(ids), ids
    parsed = []
    for call in calls:
        assert call["type"] == "function", call
        fn = call["function"]
        assert fn["name"] in schemas, call
        assert isinstance(fn["arguments"], str), call
        args = json.loads(fn["arguments"])
        jsonschema.validate(args, schemas[fn["name"]])
        parsed.append(args)
    return parsed


def message_calls(message) -> list[dict]:
    """An openai ChatCompletionMessage's tool calls as plain dicts."""
    return [c.model_dump() for c in message.tool_calls or []]


@dataclass
class Streamed:
    """A chat stream put back together."""

    content: str = ""
    reasoning: str = ""
    calls: dict[int, dict] = field(default_factory=dict)  # index -> call as the message has it
    fragments: dict[int, int] = field(default_factory=dict)  # index -> argument deltas
    finish_reasons: list[str] = field(default_factory=list)
    done: bool = False  # the stream ended with `data: [DONE]`

    def feed(self, chunk: dict) -> None:
        """One chunk (a dict), checking the shape of its tool-call deltas."""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            self.content += delta.get("content") or ""
            self.reasoning += delta.get("reasoning_content") or ""
            for d in delta.get("tool_calls") or []:
                self._tool_delta(d)
            if choice.get("finish_reason"):
                self.finish_reasons.append(choice["finish_reason"])

    def _tool_delta(self, d: dict) -> None:
        i, fn = d["index"], d.get("function") or {}
        if i not in self.calls:  # a call's first delta says what it is
            assert i == len(self.calls), f"call index {i} after {len(self.calls)} calls"
            assert d.get("id") and d.get("type") == "function" and fn.get("name"), d
            self.calls[i] = {"id": d["id"], "type": "function",
                             "function": {"name": fn["name"], "arguments": ""}}
            self.fragments[i] = 0
        else:
            assert not d.get("id") and not fn.get("name"), f"call {i} announced twice: {d}"
        if fn.get("arguments"):
            self.calls[i]["function"]["arguments"] += fn["arguments"]
            self.fragments[i] += 1

    @property
    def call_list(self) -> list[dict]:
        return [self.calls[i] for i in sorted(self.calls)]


def read_openai_stream(stream) -> Streamed:
    """An openai client stream (extra fields such as reasoning_content kept)."""
    out = Streamed()
    for chunk in stream:
        out.feed(chunk.model_dump())
    return out


def read_sse(url: str, body: dict, timeout: float = 300) -> Streamed:
    """POST `body` with stream on and read the raw server-sent events: every `data:` line a JSON
    chunk, the last one `[DONE]`."""
    out = Streamed()
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=timeout) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith("data: ") and not out.done, line
            if line == "data: [DONE]":
                out.done = True
            else:
                out.feed(json.loads(line[len("data: "):]))
    return out


def assert_same_calls(streamed: list[dict], whole: list[dict]) -> None:
    """Streamed calls equal the non-streamed ones (ids aside: each response makes its own)."""
    def shape(calls):
        return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
    assert shape(streamed) == shape(whole)
