"""One generation loop under every tool: llama-server, `Llama` and llama-cli give the same text,
tokens and finish reason for the same greedy request, stop strings included (a stop string
that cuts, one that holds text back and then matches, end of generation, and the length
limit)."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from llamacpy import Llama
from llamacpy.engine.prompt import Prompt
from llamacpy.engine.sequence import Request
from llamacpy.sampling import SamplingParams
from tests.server.conftest import start_server, stop_server

CASES = [  # prompt, stop strings, the finish reason they lead to on SmolLM2-135M-Instruct
    ("The capital of France is", ["."], "stop"),
    ("List three colors:\n1.", ["\n3"], "stop"),
    ("<|im_start|>user\nSay hi<|im_end|>\n<|im_start|>assistant\n", [], "stop"),
    ("Once upon a time", [], "length"),
]
N_PREDICT = 40


@pytest.fixture(scope="module")
def model(model_paths):
    return str(model_paths["smollm2-135m"])


@pytest.fixture(scope="module")
def server(model, tmp_path_factory):
    s = start_server(["-m", model, "-c", "512"], str(tmp_path_factory.mktemp("core") / "log"))
    yield s
    stop_server(s)


@pytest.fixture(scope="module")
def llm(model):
    return Llama(model, n_ctx=512, verbose=False)


def core_tokens(llm: Llama, prompt: str, stop: list[str]) -> list[int]:
    """The tokens the core itself generates (Llama's dicts carry text, not ids)."""
    request = Request(Prompt(llm.tokenize(prompt.encode(), add_bos=True, special=True)),
                      SamplingParams(temperature=0.0), n_predict=N_PREDICT, stop=stop)
    return [e["token"] for e in llm._scheduler.generate(request) if e["type"] == "token"]


@pytest.mark.parametrize("prompt,stop,reason", CASES)
def test_server_llama_and_cli_agree(server, llm, model, prompt, stop, reason):
    body = {"prompt": prompt, "n_predict": N_PREDICT, "temperature": 0, "stop": stop,
            "return_tokens": True, "cache_prompt": False}
    native = httpx.post(f"{server.url}/completion", json=body, timeout=120).json()
    oai = httpx.post(f"{server.url}/v1/completions", timeout=120, json={
        "prompt": prompt, "max_tokens": N_PREDICT, "temperature": 0, "stop": stop}).json()
    api = llm(prompt, max_tokens=N_PREDICT, temperature=0, stop=stop)["choices"][0]
    cli = subprocess.run(
        [sys.executable, "-m", "llamacpy", "cli", "-m", model, "-c", "512", "-no-cnv",
         "-p", prompt, "-n", str(N_PREDICT), "--temp", "0", *(["-r", stop[0]] if stop else [])],
        capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    text = native["content"]
    assert text and api["text"] == text and oai["choices"][0]["text"] == text
    assert cli.stdout == prompt + text + "\n"
    assert api["finish_reason"] == oai["choices"][0]["finish_reason"] == reason
    assert (native["stop_type"] == "limit") == (reason == "length")
    assert native["tokens"] == core_tokens(llm, prompt, stop)
    assert native["tokens_predicted"] == len(native["tokens"]) + (native["stop_type"] == "eos")
