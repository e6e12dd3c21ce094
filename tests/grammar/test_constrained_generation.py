"""Constrained generation with a real model (Qwen2.5-Coder-0.5B-Instruct), checked by parties
that share no code with the sampler: every JSON-schema output is parsed by `json` and validated
by `jsonschema` (Draft 2020-12, formats checked), every GBNF output by the independent
recognizer (tests/grammar/recognizer.py), and each must end by the grammar, not the length
limit. Through llama-server's /completion (`json_schema`, `grammar`), /v1/completions and chat
`response_format` (both forms), the Python API (LlamaGrammar, response_format) and llama-cli
(-j, --grammar-file); two slots with different grammars in one batch.

Sampling is at temperature 0.7 with several seeds, so the model wanders where the grammar lets
it. One server (-np 2) holds the model; the /completion cases run two at a time to fill both
slots.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date

import httpx
import pytest

from tests.grammar import recognizer
from tests.grammar.schemas import (BY_NAME, CASES, CHAT_JSON_OBJECT, CHAT_JSON_SCHEMA,
                                   PYTHON_API, SchemaCase, closed)
from tests.grammar.vectors import gbnf_files
from tests.server.conftest import start_server, stop_server

jsonschema = pytest.importorskip("jsonschema")

pytestmark = pytest.mark.slow

MODEL = "qwen2.5-coder-0.5b"
SEEDS = (11, 22, 33)
N_PREDICT = 160  # every schema's valid outputs are far shorter
COMPLETION_CASES = [c.name for c in CASES
                    if c.name not in CHAT_JSON_OBJECT + CHAT_JSON_SCHEMA + PYTHON_API]


# -- checking -------------------------------------------------------------------------------

def formats() -> jsonschema.FormatChecker:
    """jsonschema's own date, uuid and email checks; RFC 3339 date-time and time written here
    (jsonschema's need an optional package)."""
    checker = jsonschema.FormatChecker(formats=("date", "uuid", "email"))
    checker.checks("date-time")(is_date_time)
    checker.checks("time")(is_time)
    return checker


_TIME = r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"


def is_time(value) -> bool:
    return not isinstance(value, str) or re.fullmatch(_TIME, value) is not None


def is_date_time(value) -> bool:
    if not isinstance(value, str):
        return True
    m = re.fullmatch(r"(\d{4}-\d{2}-\d{2})[Tt](.*)", value)
    if m is None or not is_time(m.group(2)):
        return False
    try:
        date.fromisoformat(m.group(1))
    except ValueError:
        return False
    return True


FORMATS = formats()


def check_json(case: SchemaCase, text: str):
    """The output parses as JSON on its own (no fences, no prose) and meets the schema as
    llama.cpp reads it."""
    assert "```" not in text, text
    value = json.loads(text)
    jsonschema.Draft202012Validator(closed(case.schema), format_checker=FORMATS).validate(value)
    return value


def chatml(task: str) -> str:
    return (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
            f"{task}<|im_end|>\n<|im_start|>assistant\n")


def ask_for(case: SchemaCase) -> str:
    return (f"Give {case.task} as JSON matching this schema: "
            f"{json.dumps(case.schema, separators=(',', ':'))}")


# -- the server -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def model(model_paths) -> str:
    return str(model_paths[MODEL])


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    log = tmp_path_factory.mktemp("constrained") / "server.log"
    s = start_server(["-m", model, "-c", "2048", "-np", "2", "-t", "2", "--metrics"], str(log))
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def pool():
    with ThreadPoolExecutor(2) as ex:  # one request per slot
        yield ex


def post(server, path: str, body: dict) -> dict:
    r = httpx.post(f"{server.url}{path}", json=body, timeout=600)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def completions(server, pool) -> dict:
    """name -> [(seed, future of the /completion body)], every case queued at once so that
    both slots stay busy while the tests below look at one case each."""
    def body(case, seed):
        return {"prompt": chatml(ask_for(case)), "json_schema": case.schema,
                "n_predict": N_PREDICT, "temperature": 0.7, "seed": seed}
    return {name: [(seed, pool.submit(post, server, "/completion", body(BY_NAME[name], seed)))
                   for seed in SEEDS] for name in COMPLETION_CASES}


def test_the_schema_set_covers_the_brief():
    assert len(CASES) >= 20
    text = json.dumps([c.schema for c in CASES])
    for keyword in ("additionalProperties", "enum", "const", "exclusiveMinimum", "minLength",
                    "pattern", '"date"', "date-time", '"time"', "uuid", "email", "minItems",
                    "anyOf", "oneOf", "allOf", "$ref", "$defs", '["string", "null"]'):
        assert keyword in text, keyword


@pytest.mark.parametrize("name", COMPLETION_CASES)
def test_completion_json_schema(completions, name):
    case = BY_NAME[name]
    for seed, future in completions[name]:
        body = future.result()
        text = body["content"]
        assert body["stop_type"] == "eos", (seed, text)  # ended by the grammar
        assert 0 < body["tokens_predicted"] < N_PREDICT, (seed, text)
        check_json(case, text)


@pytest.mark.parametrize("form,name", [("json_object", n) for n in CHAT_JSON_OBJECT]
                         + [("json_schema", n) for n in CHAT_JSON_SCHEMA])
def test_chat_response_format(server, pool, form, name):
    case = BY_NAME[name]
    fmt = {"type": "json_object", "schema": case.schema} if form == "json_object" else {
        "type": "json_schema", "json_schema": {"name": name, "schema": case.schema,
                                               "strict": True}}
    bodies = [{"messages": [{"role": "user", "content": ask_for(case)}],
               "response_format": fmt, "max_tokens": N_PREDICT, "temperature": 0.7,
               "seed": seed} for seed in SEEDS]
    for reply in pool.map(lambda b: post(server, "/v1/chat/completions", b), bodies):
        choice = reply["choices"][0]
        content = choice["message"]["content"]
        assert choice["finish_reason"] == "stop", content
        assert content.lstrip()[:1] in "{[", content  # pure JSON, no prose or fences
        check_json(case, content)
        assert reply["usage"]["completion_tokens"] < N_PREDICT


# -- the Python API ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def llm(model):
    from llamacpy import Llama
    return Llama(model, n_ctx=1024, n_threads=2, verbose=False)


def test_python_api_grammar_from_json_schema(llm):
    from llamacpy import LlamaGrammar
    case = BY_NAME[PYTHON_API[0]]
    grammar = LlamaGrammar.from_json_schema(json.dumps(case.schema))
    for seed in SEEDS:
        out = llm.create_completion(chatml(ask_for(case)), grammar=grammar,
                                    max_tokens=N_PREDICT, temperature=0.7, seed=seed)
        choice = out["choices"][0]
        assert choice["finish_reason"] == "stop", choice["text"]
        check_json(case, choice["text"])


def test_python_api_response_format(llm):
    case = BY_NAME[PYTHON_API[1]]
    for seed, fmt in zip(SEEDS, ({"type": "json_object", "schema": case.schema},
                                 {"type": "json_schema", "json_schema": {
                                     "name": case.name, "schema": case.schema, "strict": True}},
                                 {"type": "json_object", "schema": case.schema})):
        out = llm.create_chat_completion([{"role": "user", "content": ask_for(case)}],
                                         response_format=fmt, max_tokens=N_PREDICT,
                                         temperature=0.7, seed=seed)
        choice = out["choices"][0]
        assert choice["finish_reason"] == "stop", choice["message"]["content"]
        check_json(case, choice["message"]["content"])


# -- GBNF -------------------------------------------------------------------------------------

GBNF_RUNS = [  # llama.cpp's grammars/*.gbnf, what to ask for, the token budget
    ("json.gbnf", "Give a JSON object describing a cat with three short fields.", 96),
    ("json_arr.gbnf", "Give a JSON array of two small objects, each with a name.", 96),
    ("list.gbnf", "List three fruits, one per line, each line starting with '- '.", 40),
    ("arithmetic.gbnf", "Write two short arithmetic equations such as 2+3=5, one per line.",
     40),
    ("chess.gbnf", "Write the first three moves of a chess game in PGN notation.", 40),
    ("c.gbnf", "Write a tiny C function that adds two ints.", 64),
]


@pytest.mark.parametrize("file,task,n_predict", GBNF_RUNS, ids=[r[0] for r in GBNF_RUNS])
def test_gbnf_file_outputs_match_the_recognizer(server, pool, file, task, n_predict):
    source = gbnf_files()[file]
    reference = recognizer.parse(source)
    bodies = [{"prompt": chatml(task), "grammar": source, "n_predict": n_predict,
               "temperature": 0.7, "seed": seed} for seed in SEEDS[:2]]
    for body in pool.map(lambda b: post(server, "/completion", b), bodies):
        text = body["content"]
        assert body["stop_type"] in ("eos", "limit"), text
        if body["stop_type"] == "eos":
            assert recognizer.accepts(reference, text), text
        else:
            assert body["tokens_predicted"] == n_predict
            assert recognizer.is_prefix(reference, text), text


def test_a_grammar_that_ends_stops_before_the_limit(server):
    grammar = 'root ::= "yes" | "no"'
    body = post(server, "/completion", {"prompt": chatml("Is the sky blue? Answer yes or no."),
                                        "grammar": grammar, "n_predict": 32,
                                        "temperature": 0.7, "seed": 1})
    assert body["content"] in ("yes", "no") and body["stop_type"] == "eos"
    oai = post(server, "/v1/completions", {"prompt": chatml("Is fire cold?"), "grammar": grammar,
                                           "max_tokens": 32, "temperature": 0.7, "seed": 2})
    choice = oai["choices"][0]
    assert choice["text"] in ("yes", "no") and choice["finish_reason"] == "stop"


def test_a_grammar_cut_by_the_limit_says_length(server):
    grammar = "root ::= [0-9]{40}"  # Qwen writes one digit per token: 5 tokens cannot finish
    body = post(server, "/completion", {"prompt": chatml("Write a long number."),
                                        "grammar": grammar, "n_predict": 5, "temperature": 0.7,
                                        "seed": 1})
    assert body["stop_type"] == "limit" and body["tokens_predicted"] == 5
    assert re.fullmatch(r"[0-9]{5}", body["content"]), body["content"]
    assert recognizer.is_prefix(recognizer.parse(grammar), body["content"])
    oai = post(server, "/v1/completions", {"prompt": chatml("Write a long number."),
                                           "grammar": grammar, "max_tokens": 5,
                                           "temperature": 0.7, "seed": 2})
    assert oai["choices"][0]["finish_reason"] == "length"


# -- two slots, two grammars, one batch -----------------------------------------------------

def metric(server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    return float(re.search(rf"^llamacpp:{name} (\S+)$", text, re.M).group(1))


def busy_and_decodes(server) -> tuple[float, float]:
    n_decode = metric(server, "n_decode_total")
    return metric(server, "n_busy_slots_per_decode") * n_decode, n_decode


def test_two_slots_with_different_schemas_in_one_batch(server):
    cases = [BY_NAME["nested_objects"], BY_NAME["patterns_in_object"]]
    start, results = threading.Barrier(2), {}

    def run(case):
        start.wait()
        t0 = time.monotonic()
        body = post(server, "/completion", {
            "prompt": chatml(ask_for(case)), "json_schema": case.schema, "n_predict": N_PREDICT,
            "temperature": 0.7, "seed": 5, "cache_prompt": False})
        results[case.name] = (t0, time.monotonic(), body)

    busy0, decodes0 = busy_and_decodes(server)
    threads = [threading.Thread(target=run, args=(c,)) for c in cases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    busy1, decodes1 = busy_and_decodes(server)
    (a0, a1, a), (b0, b1, b) = results[cases[0].name], results[cases[1].name]
    for case in cases:
        body = results[case.name][2]
        assert body["stop_type"] == "eos", body["content"]
        check_json(case, body["content"])
    assert a["id_slot"] != b["id_slot"] and a0 < b1 and b0 < a1
    # decodes that carried both slots: at least half of the shorter generation's steps
    shared = round((busy1 - busy0) - (decodes1 - decodes0))
    assert shared >= min(a["tokens_predicted"], b["tokens_predicted"]) // 2, shared


# -- llama-cli ----------------------------------------------------------------------------------

def llama_cli(model: str, prompt: str, n: int, *flags: str) -> tuple[str, int]:
    """`llama-cli -no-cnv -p PROMPT -n N FLAGS`: the generated text (stdout echoes the prompt
    first and ends with a newline) and the number of tokens generated (from the timings)."""
    cli = subprocess.run(
        [sys.executable, "-m", "llamacpy", "cli", "-m", model, "-c", "512", "-t", "2",
         "--no-warmup", "-no-cnv", "-p", prompt, "-n", str(n), "--temp", "0.7", "--seed", "3",
         *flags], capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(prompt) and cli.stdout.endswith("\n"), cli.stdout
    n_gen = re.search(r" eval time = .*/\s*(\d+) runs", cli.stderr)
    assert n_gen, cli.stderr
    return cli.stdout[len(prompt):-1], int(n_gen.group(1))


def test_llama_cli_json_schema(model):
    case = BY_NAME["integer_bounds"]
    text, n_gen = llama_cli(model, chatml(ask_for(case)), N_PREDICT, "-j",
                            json.dumps(case.schema))
    check_json(case, text)
    assert n_gen < N_PREDICT, text


def test_llama_cli_grammar_file(model):
    from tests.grammar.vectors import source_dir
    path = source_dir() / "grammars" / "arithmetic.gbnf"
    text, n_gen = llama_cli(model, chatml("Write one arithmetic equation such as 2+3=5."), 24,
                     "--grammar-file", str(path))
    reference = recognizer.parse(path.read_text(encoding="utf-8"))
    if n_gen < 24:  # ended by the grammar
        assert recognizer.accepts(reference, text), text
    else:
        assert recognizer.is_prefix(reference, text), text


# -- llama.cpp's reading of schemas ------------------------------------------------------------

def test_all_of_objects_merge_their_properties():
    """llama.cpp merges allOf's object parts into one closed object (json-schema-to-grammar.cpp);
    closing each part before intersecting them would allow no key at all."""
    from llamacpy.grammar import Grammar
    from tests.engine.stub import tokenizer

    grammar = Grammar.from_json_schema({"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
        {"$ref": "#/$defs/b"}], "$defs": {"b": {
            "type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}}})
    tok = tokenizer()
    assert grammar.accepts(tok, '{"a": 1, "b": true}')
    assert not grammar.accepts(tok, '{"a": 1}')
    assert not grammar.accepts(tok, '{"a": 1, "b": true, "c": 2}')
