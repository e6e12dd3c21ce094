"""llama-cpp-python code runs unchanged on llamacpy.Llama; the results have the same shapes and,
for tokenization and greedy decoding, the same content as llama.cpp's
(tests/golden/llama_api_golden.json from tests/reference/make_api_golden.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llamacpy import Llama
from tests.api.compat_script import run

GOLDEN = json.loads((Path(__file__).parent.parent / "golden" / "llama_api_golden.json")
                    .read_text())


def shape(value):
    """The structure of a JSON-like value: dict keys and element kinds, not contents."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items() if k not in ("id", "created", "model")}
    if isinstance(value, list):
        return [shape(value[0])] if value and isinstance(value[0], (dict, list)) else "list"
    return type(value).__name__ if value is not None else None


@pytest.fixture(scope="module")
def ours(model_paths):
    out = run(Llama, str(model_paths["smollm2-135m"]))
    out["detokenized"] = out["detokenized"].decode("utf-8")
    return json.loads(json.dumps(out))


def test_vocabulary_calls_match(ours):
    for key in ("n_ctx", "n_vocab", "bos", "eos", "tokens", "tokens_special", "detokenized",
                "n_tokens_after_eval"):
        assert ours[key] == GOLDEN[key], key


@pytest.mark.parametrize("key", ["completion", "chat"])
def test_response_shapes_match(ours, key):
    assert shape(ours[key]) == shape(GOLDEN[key])


def test_stream_chunk_shapes_match(ours):
    assert shape(ours["streamed"][0]) == shape(GOLDEN["streamed"][0])
    first = {k: v for k, v in ours["chat_stream"][0]["choices"][0]["delta"].items()}
    assert first == GOLDEN["chat_stream"][0]["choices"][0]["delta"]  # {"role": "assistant"}
    assert ours["chat_stream"][-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_completion_semantics_match(ours):
    """echo keeps the prompt, the stop string ends the text, usage counts add up. (Greedy texts
    themselves may part from llama.cpp's at near-ties: tests/models/test_greedy.py.)"""
    prompt = "Q: Name the planets in the solar system? A: "
    for out in (ours, GOLDEN):
        text = out["completion"]["choices"][0]["text"]
        assert text.startswith(prompt) and "Q:" not in text[len(prompt):]
        usage = out["completion"]["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert ours["completion"]["usage"]["prompt_tokens"] == \
        GOLDEN["completion"]["usage"]["prompt_tokens"]
    assert ours["chat"]["choices"][0]["message"]["role"] == "assistant"
    assert ours["chat"]["choices"][0]["message"]["content"]
    assert "".join(c["choices"][0]["text"] for c in ours["streamed"])


def test_seeded_sampling_is_reproducible(ours):
    assert ours["sampled_reproducible"] and GOLDEN["sampled_reproducible"]
