"""-ctk / -ctv and -fa in llama-server, llama-cli, llama-perplexity and llama-bench, with llama.cpp's
rules (llama_init_from_model): a quantized V cache turns -fa auto on and says so, -fa off with it
refuses to start with llama.cpp's message and a non-zero status, an unknown type is one line;
llama-server's startup log and /props show the types; llama-bench prints type_k / type_v / fa
columns as llama.cpp's does."""

from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

from llamacpy.cli import bench, llama_cli, perplexity, server
from tests.server.conftest import start_server, stop_server

TINY = "tests/golden/tiny_hf/llama.gguf"
REFUSAL = "quantized V cache requires flash_attn to be enabled"


@pytest.mark.parametrize("module,prog", [(server, "llama-server"), (llama_cli, "llama-cli"),
                                         (perplexity, "llama-perplexity")])
def test_fa_off_with_a_quantized_v_refuses_to_start(module, prog, capsys):
    argv = ["-m", TINY, "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "off"]
    text = ["-f", "tests/golden/perplexity/text.txt", "-c", "128"] if module is perplexity else []
    assert module.main(argv + text) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"{prog}: error: {REFUSAL}", err
    assert len(err) == 1 or module is perplexity  # it reads the text first


@pytest.mark.parametrize("module,prog", [(server, "llama-server"), (llama_cli, "llama-cli")])
def test_unsupported_cache_type_is_one_line(module, prog, capsys):
    assert module.main(["-m", TINY, "-ctk", "q4_k"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{prog}: error: Unsupported cache type: q4_k "
                                               f"(allowed values: f32, f16, bf16, q8_0, q4_0, "
                                               f"q4_1, iq4_nl, q5_0, q5_1)"), err


def test_unknown_fa_value_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        server.main(["-m", TINY, "-fa", "maybe"])
    assert e.value.code == 2
    assert "unknown value for --flash-attn: 'maybe'" in capsys.readouterr().err


def test_server_with_q8_0_cache(model_paths, tmp_path):
    """The wrapper script's flags (-ctk q8_0 -ctv q8_0; -fa left at auto here): the log says
    flash attention was turned on and shows the cache, /props the types, and chat works."""
    srv = start_server(["-m", str(model_paths["smollm2-135m"]), "-c", "512", "-t", "1",
                        "-ctk", "q8_0", "-ctv", "q8_0"], str(tmp_path / "server.log"))
    try:
        props = httpx.get(f"{srv.url}/props", timeout=30).json()
        assert (props["cache_type_k"], props["cache_type_v"], props["flash_attn"]) == \
            ("q8_0", "q8_0", "on")
        r = httpx.post(f"{srv.url}/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 12,
            "temperature": 0})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
        log = srv.log()
        assert "enabling flash_attn since it is required for quantized V cache" in log
        assert "llama_kv_cache: size =" in log and "K (q8_0):" in log and "V (q8_0):" in log
    finally:
        assert stop_server(srv) == 0


def test_llama_cli_runs_on_a_quantized_cache(model_paths):
    out = subprocess.run([sys.executable, "-m", "llamacpy", "cli", "-m",
                          str(model_paths["smollm2-135m"]), "-p", "The sky is", "-n", "6",
                          "-no-cnv", "-ctk", "q4_0", "-ctv", "q8_0", "-fa", "on", "-c", "256",
                          "--temp", "0", "-v"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "type_k = q4_0, type_v = q8_0, flash_attn = on" in out.stderr
    assert "K (q4_0):" in out.stderr and out.stdout.strip()


def test_llama_bench_columns(model_paths, capsys):
    argv = ["-m", str(model_paths["smollm2-135m"]), "-p", "0", "-n", "2", "-r", "1", "-t", "1"]
    assert bench.main(argv + ["-ctk", "f16,q8_0", "-ctv", "q8_0"]) == 0
    out, err = capsys.readouterr()
    head, rule, *rows = out.strip().splitlines()
    assert head.split("|")[5:9] == [" threads ", " type_k ", " type_v ", "            test "]
    assert rule.split("|")[6:8] == [" -----: ", " -----: "]
    assert [r.split("|")[6:8] for r in rows] == [["    f16 ", "   q8_0 "],
                                                 ["   q8_0 ", "   q8_0 "]]
    assert "enabling flash_attn since it is required for quantized V cache" in err
    assert bench.main(argv + ["-ctv", "q8_0", "-fa", "0"]) == 1
    err = capsys.readouterr().err
    assert REFUSAL in err and "main: error: failed to create context with model" in err
    assert bench.main(argv + ["-fa", "1", "-o", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    row = dict(zip(lines[0].split(","), lines[1].split(",")))
    assert (row["type_k"], row["type_v"], row["flash_attn"]) == ("f16", "f16", "1")
