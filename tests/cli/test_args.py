"""Flags with llama.cpp's names, LLAMA_ARG_* environment variables, unsupported flags."""

from __future__ import annotations

import pytest

from llamacpy.cli.args import build_parser, parse_args


def test_env_variables_give_defaults(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "1234")
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "3")
    monkeypatch.setenv("LLAMA_ARG_ENDPOINT_METRICS", "1")
    monkeypatch.setenv("LLAMA_API_KEY", "k1,k2")
    args = build_parser("server", "llama-server", "").parse_args(["-m", "x.gguf"])
    assert (args.ctx_size, args.parallel, args.metrics, args.api_key) == (1234, 3, True, "k1,k2")
    # the command line still wins
    args = build_parser("server", "llama-server", "").parse_args(["-m", "x", "-c", "99"])
    assert args.ctx_size == 99


def test_llama_cpp_spellings():
    args = build_parser("server", "llama-server", "").parse_args(
        ["--model", "m", "--ctx-size", "2048", "--parallel", "2", "--threads", "4",
         "--threads-batch", "4", "--batch-size", "256", "--ubatch-size", "256", "--jinja",
         "-ngl", "0", "--no-webui", "--no-slots", "-a", "name", "-ctk", "f32", "--no-repack"])
    assert (args.ctx_size, args.parallel, args.threads, args.batch_size) == (2048, 2, 4, 256)
    assert not args.webui and not args.slots and args.alias == "name"
    assert args.cache_type_k == "f32" and args.repack is False


def test_repack_only_for_parallel_slots_by_default():
    from llamacpy.cli.server import repack_default

    parse = build_parser("server", "llama-server", "").parse_args
    assert not repack_default(parse(["-m", "x"]))
    assert repack_default(parse(["-m", "x", "-np", "4"]))
    assert not repack_default(parse(["-m", "x", "-np", "4", "--no-repack"]))
    assert repack_default(parse(["-m", "x", "--repack"]))


def test_unsupported_flags_end_the_tool_with_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args("server", "llama-server", "", ["-m", "m", "--lora", "a.gguf", "-c", "8"])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "llama-server: error: --lora is not supported by llamacpy yet"]

