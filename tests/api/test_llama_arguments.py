"""The Python API honours or refuses every argument: llama-cpp-python arguments whose effect
llamacpy does not provide raise NotSupportedError, unknown ones TypeError, GPU placement warns."""

from __future__ import annotations

import pytest

from llamacpy import Llama
from llamacpy.llama import NotSupportedError

TINY = "tests/golden/tiny_hf/llama.gguf"


@pytest.fixture(scope="module")
def llm():
    return Llama(TINY, n_ctx=64, verbose=False)


@pytest.mark.parametrize("kwargs", [{"lora_path": "x.gguf"},
                                    {"numa": True}, {"rope_freq_base": 1e6},
                                    {"chat_format": "chatml"}, {"draft_model": object()},
                                    {"kv_overrides": {"a": 1}}])
def test_constructor_refuses_what_it_would_ignore(kwargs):
    with pytest.raises(NotSupportedError, match=next(iter(kwargs))):
        Llama(TINY, **kwargs)


def test_constructor_refuses_unknown_arguments_and_warns_for_gpu_layers():
    with pytest.raises(TypeError, match="n_ctxx"):
        Llama(TINY, n_ctxx=64)
    with pytest.warns(UserWarning, match="no GPU"):
        llm = Llama(TINY, n_ctx=64, n_gpu_layers=-1, use_mmap=True, offload_kqv=True)
    assert llm.n_ctx() == 64


@pytest.mark.parametrize("kwargs", [{"suffix": "}"},
                                    {"logits_processor": [lambda ids, s: s]}, {"tfs_z": 0.5}])
def test_completion_refuses_what_it_would_ignore(llm, kwargs):
    with pytest.raises(NotSupportedError, match=next(iter(kwargs))):
        llm("Hello", max_tokens=2, **kwargs)


def test_completion_refuses_unknown_arguments(llm):
    with pytest.raises(TypeError, match="max_tokenz"):
        llm("Hello", max_tokenz=2)


@pytest.mark.parametrize("kwargs", [{"functions": [{"name": "f"}]}])
def test_chat_refuses_what_it_would_ignore(llm, kwargs):
    with pytest.raises(NotSupportedError):
        llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2, **kwargs)


def test_accepted_defaults_still_generate(llm):
    out = llm("Hello", max_tokens=3, temperature=0, tfs_z=1.0, suffix=None,
              logits_processor=None)
    assert out["usage"]["completion_tokens"] >= 1
    chat = llm.create_chat_completion([{"role": "user", "content": "hi"}], max_tokens=2,
                                      response_format={"type": "text"}, tool_choice="auto")
    assert chat["choices"][0]["message"]["role"] == "assistant"
