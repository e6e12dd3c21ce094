"""Property tests against a real llama-server: schemathesis over its own /openapi.json (positive
and negative cases, the not_a_server_error check), and hypothesis-made bodies, right and wrong,
for the three completion routes. No 5xx, no hang, and a canary is answered after each case."""

from __future__ import annotations

import httpx
import pytest

from .canary import HANG, assert_error_shape, canary, small_server
from .conftest import stop_server

schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.generation.modes import GenerationMode  # noqa: E402

from llamacpy.server.params import Limits, request_fields  # noqa: E402

SETTINGS = dict(deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))
N_BODY_CASES = 25  # per route and generation mode: the whole file stays within a few minutes


@pytest.fixture(scope="module")
def server(model_paths, tmp_path_factory):
    srv = small_server(model_paths, str(tmp_path_factory.mktemp("fuzz") / "server.log"))
    yield srv
    stop_server(srv)


@pytest.fixture(scope="module")
def api(server):
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json")


def test_document_lists_every_route(server):
    doc = httpx.get(f"{server.url}/openapi.json", timeout=HANG).json()
    assert doc["openapi"].startswith("3.")
    paths = doc["paths"]
    for path in ("/completion", "/v1/completions", "/v1/chat/completions", "/tokenize",
                 "/detokenize", "/apply-template", "/health", "/v1/models", "/props", "/slots",
                 "/metrics", "/openapi.json"):
        assert path in paths, path
        for op in paths[path].values():
            assert "200" in op["responses"] and "400" in op["responses"]
    body = paths["/completion"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["prompt"]
    # the bounds the server validates, for this model and this server's slots
    n_vocab = httpx.get(f"{server.url}/v1/models", timeout=HANG).json()["data"][0]["meta"][
        "n_vocab"]
    assert body["properties"]["id_slot"]["anyOf"][0]["maximum"] == 1  # -np 2
    assert body["properties"]["n_probs"]["anyOf"][0] == {"type": "integer", "minimum": 0,
                                                         "maximum": 100}
    detok = paths["/detokenize"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert detok["properties"]["tokens"]["anyOf"][0]["items"]["maximum"] == n_vocab - 1
    error = doc["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    assert error["properties"]["error"]["required"] == ["code", "message", "type"]


def test_document_is_public(model_paths, tmp_path_factory):
    """With --api-key, /openapi.json needs no key; the routes it describes do."""
    from .conftest import start_server

    log = tmp_path_factory.mktemp("keyed") / "server.log"
    srv = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "512", "-t", "1",
                        "--api-key", "k"], str(log))
    try:
        assert httpx.get(f"{srv.url}/openapi.json", timeout=HANG).status_code == 200
        r = httpx.post(f"{srv.url}/tokenize", json={"content": "a"}, timeout=HANG)
        assert r.status_code == 401 and assert_error_shape(r)["type"] == "authentication_error"
    finally:
        stop_server(srv)


def operations(api):
    for result in api.get_all_operations():
        yield result.ok()


@pytest.mark.slow
def test_schemathesis_finds_no_server_error(server, api):
    """Every operation, positive and negative cases (bodies that break the schema, bad JSON,
    wrong media types): never a 5xx, never a hang, and the canary is answered after each."""
    seen = {}
    for op in operations(api):
        modes = [GenerationMode.POSITIVE]
        if op.method.upper() == "POST":
            modes.append(GenerationMode.NEGATIVE)  # a GET has nothing to break
        for mode in modes:
            @settings(max_examples=N_BODY_CASES, **SETTINGS)
            @given(case=op.as_strategy(generation_mode=mode))
            def run(case):
                response = case.call_and_validate(checks=[not_a_server_error], timeout=HANG)
                seen[(op.path, mode.value, response.status_code // 100)] = True
                if op.method.upper() == "POST":
                    canary(server)

            run()
    canary(server)
    # the positive cases reached the engine: completions and chats were answered with a 200
    for path in ("/completion", "/v1/completions", "/v1/chat/completions"):
        assert (path, "positive", 2) in seen, sorted(seen)
        assert (path, "negative", 4) in seen, sorted(seen)


# -- hypothesis-made bodies ----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=8)


def near(schema: dict):
    """Values around what a field's schema allows: its edges and just past them, its enum, and
    the right type; JSON of any other type comes from JSON."""
    if "anyOf" in schema:
        return st.one_of([near(s) for s in schema["anyOf"] if "type" in s])
    kind = schema.get("type")
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if kind == "integer":
        lo, hi = schema.get("minimum", -(2**31)), schema.get("maximum", 2**31 - 1)
        return st.sampled_from([lo, hi, lo - 1, hi + 1, 0, 1, -1]) | st.integers(lo, hi)
    if kind == "number":
        return st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-45, 1e-320, 3.4e38, -3.4e38, 1e300]) \
            | st.floats(-1e6, 1e6)
    if kind == "boolean":
        return st.booleans()
    if kind == "string":
        return st.text(max_size=16)
    if kind == "array":
        return st.lists(near(schema["items"]) if "items" in schema else JSON, max_size=4)
    return JSON


# fields whose valid values a type alone does not make (a grammar, a schema): some right ones,
# so that bodies holding them still reach the engine
VALID = {
    "grammar": st.sampled_from(["", 'root ::= "a" | "b"', "root ::= [0-9]{1,3}"]),
    "json_schema": st.sampled_from([{}, {"type": "integer"}, {"enum": ["x", "y"]}]),
    "response_format": st.sampled_from([{"type": "text"}, {"type": "json_object"}, {
        "type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "boolean"}}}]),
    "tool_choice": st.sampled_from(["auto", "none"]),
    "preserved_tokens": st.just([]),
}


def field_values(route: str):
    fields, _ = request_fields(route, Limits(n_vocab=49152, n_slots=2, n_ctx_slot=512))
    return {name: (VALID[name] | near(schema) if name in VALID else near(schema)) | JSON
            for name, schema in fields.items()}


MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "tool"]) | JSON},
    optional={"content": st.text(max_size=30) | st.none() | st.lists(st.fixed_dictionaries(
                  {"type": st.sampled_from(["text", "image_url", "input_audio"])},
                  optional={"text": st.text(max_size=10) | JSON}), max_size=3) | JSON,
              "tool_calls": st.lists(st.fixed_dictionaries({"function": st.fixed_dictionaries(
                  {"name": st.text(max_size=8)}, optional={"arguments": JSON})}), max_size=2)
              | JSON,
              "name": st.text(max_size=8) | JSON})
# half the chats start from messages a template can render, so that the other fields decide
PLAIN_MESSAGES = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "system"]),
                                                 "content": st.text(max_size=30)}),
                          min_size=1, max_size=3)
PROMPT = st.text(max_size=40) | st.lists(st.integers(-2, 49155) | st.text(max_size=8),
                                         max_size=8) | JSON


def bodies(route: str):
    values = field_values(route)
    head = {"prompt": PROMPT} if route != "chat" else \
        {"messages": PLAIN_MESSAGES | st.lists(MESSAGE, min_size=1, max_size=4) | JSON}
    values = {k: v for k, v in values.items() if k not in head}
    # a few fields at a time, so that some bodies are right and reach the engine
    names = st.lists(st.sampled_from(sorted(values)), max_size=5, unique=True)
    return names.flatmap(lambda keys: st.fixed_dictionaries(
        head, optional={k: values[k] for k in keys}))


@pytest.mark.slow
@pytest.mark.parametrize("path, route", [("/completion", "completion"),
                                         ("/v1/completions", "completions"),
                                         ("/v1/chat/completions", "chat")])
def test_generated_bodies(server, path, route):
    statuses = []

    @settings(max_examples=4 * N_BODY_CASES, **SETTINGS)
    @given(body=bodies(route))
    def run(body):
        r = httpx.post(server.url + path, json=body, timeout=HANG)
        statuses.append(r.status_code)
        assert r.status_code < 500, (body, r.text[:500])
        if r.status_code >= 400:
            assert_error_shape(r)
        elif body.get("stream") is not True:
            choice = r.json() if path == "/completion" else r.json()["choices"][0]
            text = choice.get("content", choice.get("text", choice.get("message", {})
                                                    .get("content")))
            assert isinstance(text, str)
        canary(server)

    run()
    assert 200 in statuses and any(400 <= s < 500 for s in statuses), statuses
