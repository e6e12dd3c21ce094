"""The flag walk: every flag in cli/args.py FLAGS, in every tool that accepts it, given a value
other than its default, reaches that tool's code, or the tool refuses it with one line and exit
status 2. A flag that is added without an entry here fails `test_every_flag_has_a_landing`.

llama-server: through server_config(args) (the ServerConfig), the objects built from it
(uvicorn's settings, the request defaults) and the functions that read it. llama-cli: through
llama_kwargs(args) (the Llama(...) arguments), sampling_params(args), template_kwargs(args),
verbosity(args), and, for what a turn reads as it runs (the prompt, -n, -r...), the function
that reads it.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from llamacpy.cli import args as flags
from llamacpy.cli import llama_cli, server
from llamacpy.cli.args import FLAGS, NOT_SUPPORTED, SWITCH, build_parser, parse_args
from llamacpy.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
SERVE = server.serve  # the tests below replace it: nothing may start serving


# -- what each flag sets, and where it lands ---------------------------------------------------

class Refused:
    """The tool ends with one line on stderr and status 2."""

    def __init__(self, *argv: str):
        self.argv = list(argv)


class Warned:
    """The tool says the flag cannot take effect here (no GPU) and runs on the CPU."""

    def __init__(self, text: str, *argv: str):
        self.text, self.argv = text, list(argv)


class Reads:
    """Read as the tool runs: `args.<dest>` in these functions (their code is the landing)."""

    def __init__(self, argv: list[str], *functions):
        self.argv, self.functions = argv, functions


# dest -> (argv, SamplingParams field, value); the same for both tools
SAMPLING = {
    "samplers": (["--samplers", "top_k;temperature"], "samplers", ["top_k", "temperature"]),
    "seed": (["-s", "42"], "seed", 42),
    "temp": (["--temp", "0.5"], "temperature", 0.5),
    "top_k": (["--top-k", "7"], "top_k", 7),
    "top_p": (["--top-p", "0.5"], "top_p", 0.5),
    "min_p": (["--min-p", "0.2"], "min_p", 0.2),
    "top_n_sigma": (["--top-nsigma", "1.5"], "top_n_sigma", 1.5),
    "xtc_probability": (["--xtc-probability", "0.5"], "xtc_probability", 0.5),
    "xtc_threshold": (["--xtc-threshold", "0.2"], "xtc_threshold", 0.2),
    "typical_p": (["--typical", "0.9"], "typical_p", 0.9),
    "repeat_last_n": (["--repeat-last-n", "32"], "repeat_last_n", 32),
    "repeat_penalty": (["--repeat-penalty", "1.1"], "repeat_penalty", 1.1),
    "presence_penalty": (["--presence-penalty", "0.3"], "presence_penalty", 0.3),
    "frequency_penalty": (["--frequency-penalty", "0.4"], "frequency_penalty", 0.4),
    "dry_multiplier": (["--dry-multiplier", "0.8"], "dry_multiplier", 0.8),
    "dry_base": (["--dry-base", "2.0"], "dry_base", 2.0),
    "dry_allowed_length": (["--dry-allowed-length", "3"], "dry_allowed_length", 3),
    "dry_penalty_last_n": (["--dry-penalty-last-n", "16"], "dry_penalty_last_n", 16),
    "dry_sequence_breakers": (["--dry-sequence-breaker", "x", "--dry-sequence-breaker", "y"],
                              "dry_sequence_breakers", ["x", "y"]),
    "dynatemp_range": (["--dynatemp-range", "0.5"], "dynatemp_range", 0.5),
    "dynatemp_exponent": (["--dynatemp-exp", "2.0"], "dynatemp_exponent", 2.0),
    "mirostat": (["--mirostat", "2"], "mirostat", 2),
    "mirostat_eta": (["--mirostat-lr", "0.2"], "mirostat_eta", 0.2),
    "mirostat_tau": (["--mirostat-ent", "4.0"], "mirostat_tau", 4.0),
    "logit_bias": (["-l", "15+1", "-l", "16-inf", "-l", "15+0.5"], "logit_bias",
                   {15: 1.5, 16: -math.inf}),
}


def server_sampling(field, value):
    """In the ServerConfig and in the request defaults the server builds from it."""
    from llamacpy.server.state import sampling_overrides

    def check(r):
        defaults = SamplingParams.from_gguf({}, **sampling_overrides(r.cfg))
        return getattr(r.cfg.sampling, field) == value and getattr(defaults, field) == value

    return check


def cli_sampling(field, value):
    def check(r):
        return getattr(llama_cli.sampling_params(r.args), field) == value and \
            reads(llama_cli.run_turn, "sampling_params(args)")

    return check


def writes_log(r):
    print("probe line", file=sys.stderr)
    sys.stderr.flush()
    return "probe line" in Path(r.paths["log"]).read_text()


GBNF, SCHEMA = 'root ::= "yes" | "no"', '{"type": "integer"}'
# dest -> (argv, the grammar's source as the tool keeps it)
GRAMMAR = {
    "grammar": (["--grammar", GBNF], GBNF),
    "grammar_file": (["--grammar-file", "{gbnf}"], GBNF),
    "json_schema": (["-j", SCHEMA.replace("{", "{{").replace("}", "}}")], SCHEMA),
    "json_schema_file": (["-jf", "{schema}"], SCHEMA),
}


def server_grammar(source):
    """In the ServerConfig, and the default of every request that brings no grammar."""
    return lambda r: r.cfg.grammar is not None and r.cfg.grammar_source == source and reads(
        "app", "c.grammar, c.grammar_source = state.grammar, state.cfg.grammar_source")


def cli_grammar(source):
    def check(r):
        grammar, text = flags.grammar_from_args(r.args, "llama-cli")
        return grammar is not None and text == source and reads(
            llama_cli.main, "grammar_from_args(args, TOOL)") and reads(
            llama_cli.run_turn, "args.grammar_compiled.mask(")

    return check


def spec(check, where="server"):
    """The SpecConfig the tool builds (the server's config, llama-cli's Llama(draft_model=))."""
    def landing(r):
        cfg = r.cfg.speculative if where == "server" else r.llama["draft_model"]
        reader = reads("ServerState.load", "build_speculator(cfg.speculative") \
            if where == "server" else reads(llama_cli.llama_kwargs, '"draft_model": spec_config')
        return cfg is not None and check(cfg) and reader

    return landing


SPEC = {  # dest -> (argv, what the SpecConfig holds)
    "spec_type": (["--spec-type", "ngram-simple"],
                  lambda c: c.resolved_types() == ["ngram-simple"]),
    "model_draft": (["-md", "{model}"], lambda c: c.resolved_types() == ["draft-simple"]),
    "draft_max": (["-md", "{model}", "--draft-max", "8"], lambda c: c.n_max == 8),
    "draft_min": (["-md", "{model}", "--spec-draft-n-min", "2"], lambda c: c.n_min == 2),
    "draft_p_min": (["-md", "{model}", "--draft-p-min", "0.5"], lambda c: c.p_min == 0.5),
    "ctx_size_draft": (["-md", "{model}", "-cd", "256"], lambda c: c.n_ctx_draft == 256),
    "draft_vocab": (["-md", "{model}", "--spec-draft-vocab", "0"], lambda c: c.draft_vocab == 0),
    "spec_ngram_size_n": (["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "4"],
                          lambda c: c.ngram_size_n == 4),
    "spec_ngram_size_m": (["--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "9"],
                          lambda c: c.ngram_size_m == 9),
}

SERVER = {
    "model": (["-m", "{model}"], lambda r: r.cfg.model_path == r.paths["model"]),
    "hf_repo": Refused("-hf", "ggml-org/gemma-3-270m-GGUF"),
    "ctx_size": (["-c", "1234"], lambda r: r.cfg.n_ctx == 1234),
    "n_predict": (["-n", "7"], lambda r: r.cfg.n_predict == 7),
    "batch_size": (["-b", "256"], lambda r: r.cfg.n_batch == 256),
    "ubatch_size": (["-ub", "128"], lambda r: r.cfg.n_ubatch == 128),
    "threads": (["-t", "1"], lambda r: r.cfg.n_threads == 1 and reads(
        server.main, "set_threads(args.threads)")),
    "threads_batch": (["-tb", "2"], lambda r: r.cfg.n_threads_batch == 2 and reads(
        "ServerState.load", "cfg.n_threads_batch")),
    "n_gpu_layers": Warned("no GPU available; -ngl 99", "-ngl", "99"),
    "device": Warned("device 'cuda0' not available", "-dev", "cuda0"),
    "jinja": Refused("--no-jinja"),
    "chat_template": (["--chat-template", "chatml"], lambda r: r.cfg.chat_template == "chatml"),
    "chat_template_file": (["--chat-template-file", "{template}"],
                           lambda r: r.cfg.chat_template == TEMPLATE),
    "warmup": (["--no-warmup"], lambda r: r.cfg.warmup is False),
    "ignore_eos": (["--ignore-eos"], lambda r: r.cfg.ignore_eos is True and reads(
        "app", "ignore_eos=state.cfg.ignore_eos")),
    **{dest: (argv, server_sampling(field, value))
       for dest, (argv, field, value) in SAMPLING.items()},
    "cache_type_k": (["-ctk", "f32"], lambda r: r.cfg.type_k == "f32"),
    "cache_type_v": (["-ctv", "f32"], lambda r: r.cfg.type_v == "f32"),
    "flash_attn": (["-fa", "on"], lambda r: r.cfg.flash_attn == "on"),
    "repack": (["--repack"], lambda r: r.cfg.repack is True),
    "load_mode": (["-lm", "none"], lambda r: r.cfg.load_mode == "none" and reads(
        "ServerState.load", "open_gguf(cfg.model_path, cfg.load_mode)")),
    "context_shift": (["--context-shift"], lambda r: r.cfg.context_shift is True and reads(
        "ServerState.load", "context_shift=cfg.context_shift")),
    "n_keep": (["--keep", "-1"], lambda r: r.cfg.n_keep == -1 and reads(
        "app", "n_keep=state.cfg.n_keep if c.n_keep is None else c.n_keep")),
    "cache_reuse": (["--cache-reuse", "256"], lambda r: r.cfg.cache_reuse == 256 and reads(
        "ServerState.load", "n_cache_reuse=cfg.cache_reuse")),
    "cache_ram": (["-cram", "0"], lambda r: r.cfg.cache_ram == 0 and reads(
        "ServerState.load", "cache_ram_mib=cfg.cache_ram")),
    "host": (["--host", "0.0.0.0"], lambda r: r.uvicorn["host"] == "0.0.0.0"),
    "port": (["--port", "9999"], lambda r: r.uvicorn["port"] == 9999),
    "parallel": (["-np", "3"], lambda r: r.cfg.n_parallel == 3),
    "alias": (["-a", "name"], lambda r: r.cfg.alias == "name"),
    "api_key": (["--api-key", "k1,k2"], lambda r: r.cfg.api_keys == ["k1", "k2"]),
    "api_key_file": (["--api-key-file", "{keys}"], lambda r: r.cfg.api_keys == ["k3"]),
    "webui": (["--no-webui"], lambda r: r.cfg.webui is False),
    "static_path": (["--path", "{folder}"], lambda r: r.cfg.static_path == r.paths["folder"]),
    "ollama": (["--ollama"], lambda r: (r.uvicorn["host"], r.uvicorn["port"]) == (
        "127.0.0.1", 11434)),  # OLLAMA_HOST unset: Ollama's own address
    # router mode's flags (tests/server/test_router.py); with -m they would do nothing
    "models_dir": Refused("--models-dir", "models"),
    "models_preset": Refused("--models-preset", "models.ini"),
    "models_max": Refused("--models-max", "2"),
    "models_autoload": Refused("--no-models-autoload"),
    "sleep_idle_seconds": Refused("--sleep-idle-seconds", "5"),
    "metrics": (["--metrics"], lambda r: r.cfg.metrics is True),
    "embedding": (["--embeddings"], lambda r: r.cfg.embedding is True and r.cfg.pooling is None),
    "rerank": (["--reranking"], lambda r: r.cfg.embedding is True and r.cfg.pooling == "rank"),
    "pooling": (["--pooling", "cls"], lambda r: r.cfg.pooling == "cls"),
    "embd_normalize": (["--embd-normalize", "1"], lambda r: r.cfg.embd_normalize == 1),
    "slots": (["--no-slots"], lambda r: r.cfg.slots is False),
    "timeout": (["-to", "5"], lambda r: r.uvicorn["timeout_keep_alive"] == 5),
    "threads_http": (["--threads-http", "3"], lambda r: r.cfg.n_threads_http == 3 and reads(
        SERVE, "with_http_threads(build_app(state), cfg.n_threads_http)")),
    "cont_batching": Refused("-nocb"),
    "chat_template_kwargs": (["--chat-template-kwargs", '{{"a": 1}}'],
                             lambda r: r.cfg.chat_template_kwargs == {"a": 1}),
    "reasoning_format": (["--reasoning-format", "none"],
                         lambda r: r.cfg.reasoning_format == "none"),
    "reasoning": (["-rea", "off"], lambda r: r.cfg.reasoning == "off"),
    "reasoning_budget": (["--reasoning-budget", "5"], lambda r: r.cfg.reasoning_budget == 5),
    "mmproj": (["--mmproj", "p.gguf"], lambda r: r.cfg.mmproj == "p.gguf"),
    "mmproj_offload": Warned("--mmproj-offload has no effect", "--mmproj-offload"),
    "mmproj_device": Warned("mmproj device 'cuda0' not available", "-mmdev", "cuda0"),
    "image_min_tokens": (["--image-min-tokens", "64"], lambda r: r.cfg.image_min_tokens == 64),
    "image_max_tokens": (["--image-max-tokens", "99"], lambda r: r.cfg.image_max_tokens == 99),
    "verbose": (["-v"], lambda r: r.cfg.verbosity > 4 and r.uvicorn["log_level"] == "debug"),
    "verbosity": (["-lv", "4"], lambda r: r.cfg.verbosity == 4 and r.uvicorn["access_log"]),
    "log_disable": (["--log-disable"], lambda r: r.cfg.verbosity < 0
                    and r.uvicorn["log_level"] == "critical"),
    "log_file": (["--log-file", "{log}"], writes_log),
    **{dest: (argv, server_grammar(source)) for dest, (argv, source) in GRAMMAR.items()},
    **{dest: (argv, spec(check)) for dest, (argv, check) in SPEC.items()},
    "n_gpu_layers_draft": Refused("-ngld", "99"),
}

CLI = {
    "model": Reads(["-m", "{model}"], llama_cli.main),
    "hf_repo": Refused("-hf", "ggml-org/gemma-3-270m-GGUF"),
    "ctx_size": (["-c", "1234"], lambda r: r.llama["n_ctx"] == 1234),
    "n_predict": Reads(["-n", "7"], llama_cli.run_turn),
    "batch_size": (["-b", "256"], lambda r: r.llama["n_batch"] == 256),
    "ubatch_size": (["-ub", "128"], lambda r: r.llama["n_ubatch"] == 128),
    "threads": (["-t", "1"], lambda r: r.llama["n_threads"] == 1),
    "threads_batch": (["-tb", "2"], lambda r: r.llama["n_threads_batch"] == 2),
    "n_gpu_layers": Warned("no GPU available; -ngl 99", "-ngl", "99"),
    "device": Warned("device 'cuda0' not available", "-dev", "cuda0"),
    "jinja": Refused("--no-jinja"),
    "chat_template": (["--chat-template", "chatml"], lambda r: flags.chat_template_text(
        r.args) == "chatml" and reads(llama_cli.chat_template, "chat_template_text(args)")),
    "chat_template_file": (["--chat-template-file", "{template}"],
                           lambda r: flags.chat_template_text(r.args) == TEMPLATE),
    "warmup": Reads(["--no-warmup"], llama_cli.main),
    "prompt": Reads(["-p", "hi"], llama_cli.main, llama_cli.conversation, llama_cli.with_images),
    "file": Reads(["-f", "prompt.txt"], llama_cli.main),
    "system_prompt": Reads(["-sys", "be brief"], llama_cli.conversation, llama_cli.image_prompt),
    "conversation": Reads(["-no-cnv"], llama_cli.main),
    "single_turn": Reads(["-st"], llama_cli.conversation),
    "reverse_prompt": Reads(["-r", "User:"], llama_cli.run_turn),
    "ignore_eos": Reads(["--ignore-eos"], llama_cli.run_turn),
    **{dest: (argv, cli_sampling(field, value))
       for dest, (argv, field, value) in SAMPLING.items()},
    "cache_type_k": (["-ctk", "f32"], lambda r: r.llama["type_k"] == "f32"),
    "cache_type_v": (["-ctv", "f32"], lambda r: r.llama["type_v"] == "f32"),
    "flash_attn": (["-fa", "off"], lambda r: r.llama["flash_attn"] == "off"),
    "repack": (["--repack"], lambda r: r.llama["repack"] is True),
    "load_mode": (["--load-mode", "mlock"], lambda r: r.llama["load_mode"] == "mlock"),
    "context_shift": (["--context-shift"], lambda r: r.llama["context_shift"] is True and reads(
        llama_cli.run_turn, "if args.context_shift:")),
    "n_keep": Reads(["--keep", "5"], llama_cli.run_turn),
    "reasoning": (["-rea", "off"], lambda r: flags.template_kwargs(r.args) == {
        "enable_thinking": False} and reads(llama_cli.conversation, "**template_kwargs(args)")
        and reads(llama_cli.image_prompt, "**template_kwargs(args)")),
    "mmproj": Reads(["--mmproj", "p.gguf"], llama_cli.main, llama_cli.with_images),
    "mmproj_offload": Warned("--mmproj-offload has no effect", "--mmproj-offload"),
    "mmproj_device": Warned("mmproj device 'cuda0' not available", "-mmdev", "cuda0"),
    "image_min_tokens": Reads(["--image-min-tokens", "64"], llama_cli.with_images),
    "image_max_tokens": Reads(["--image-max-tokens", "99"], llama_cli.with_images),
    "image": Reads(["--image", "a.png"], llama_cli.main, llama_cli.with_images),
    "verbose": (["-v"], lambda r: r.llama["verbose"] and flags.verbosity(r.args) > 4),
    "verbosity": (["-lv", "1"], lambda r: flags.verbosity(r.args) == 1 and reads(
        llama_cli.main, "Totals(verbosity=verbosity(args))")),
    "log_disable": (["--log-disable"], lambda r: flags.verbosity(r.args) < 0),
    "log_file": (["--log-file", "{log}"], writes_log),
    **{dest: (argv, cli_grammar(source)) for dest, (argv, source) in GRAMMAR.items()},
    **{dest: (argv, spec(check, "cli")) for dest, (argv, check) in SPEC.items()},
    "n_gpu_layers_draft": Refused("-ngld", "99"),
}

TOOLS = {"server": (SERVER, server, "llama-server"), "cli": (CLI, llama_cli, "llama-cli")}


def reads(where, text: str) -> bool:
    """`text` is in the source of `where`: a function, or "app" / "ServerState.load"."""
    if where == "app":  # read, not imported: the routes need not import for this
        return text in (ROOT / "llamacpy" / "server" / "app.py").read_text()
    if where == "ServerState.load":
        from llamacpy.server.state import ServerState

        where = ServerState.load
    return text in inspect.getsource(where)


def cases():
    return [(tool, dest) for tool, (table, _, _) in TOOLS.items() for dest in table]


# -- the walk ----------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def never_serve(monkeypatch):
    """A flag that should have ended llama-server must not leave it serving in the test."""
    monkeypatch.setattr(server, "serve", lambda args, cfg: pytest.fail("llama-server served"))


@pytest.fixture
def paths(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "stderr", sys.stderr)  # --log-file replaces it: put it back
    (tmp_path / "m.gguf").write_bytes(b"")
    (tmp_path / "template.jinja").write_text(TEMPLATE)
    (tmp_path / "keys.txt").write_text("k3\n")
    (tmp_path / "g.gbnf").write_text(GBNF)
    (tmp_path / "s.json").write_text(SCHEMA)
    return {"model": str(tmp_path / "m.gguf"), "template": str(tmp_path / "template.jinja"),
            "keys": str(tmp_path / "keys.txt"), "log": str(tmp_path / "log.txt"),
            "gbnf": str(tmp_path / "g.gbnf"), "schema": str(tmp_path / "s.json"),
            "folder": str(tmp_path)}


def argv_for(entry, paths) -> list[str]:
    argv = entry[0] if isinstance(entry, tuple) else entry.argv
    return [a.format(**paths) for a in argv]


@pytest.mark.parametrize("tool", TOOLS)
def test_every_flag_has_a_landing(tool):
    """The table covers exactly the flags the tool accepts: a new Flag needs its landing."""
    table = TOOLS[tool][0]
    dests = {flag.dest for flag in FLAGS if tool in flag.tools}
    assert set(table) == dests, f"no landing for {dests - set(table)}; stale: {set(table) - dests}"


@pytest.mark.parametrize("tool,dest", cases())
def test_flag_reaches_the_code(tool, dest, paths, capsys):
    table, module, prog = TOOLS[tool]
    entry = table[dest]
    argv = argv_for(entry, paths)
    base = [] if dest == "model" else ["-m", paths["model"]]
    parsed = build_parser(tool, prog, "").parse_args(base + argv)
    default = next(flag.default for flag in FLAGS if flag.dest == dest and tool in flag.tools)
    assert getattr(parsed, dest) != default, f"{argv} leaves {dest} at its default"
    if isinstance(entry, Refused):
        with pytest.raises(SystemExit) as e:
            module.main(base + argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
        return
    args = parse_args(tool, prog, "", base + argv)
    if isinstance(entry, Warned):
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and entry.text in err[0], err
        return
    if isinstance(entry, Reads):
        for function in entry.functions:
            assert reads(function, f"args.{dest}"), f"{function.__name__} does not read {dest}"
        return

    class Landing:
        pass

    r = Landing()
    r.args, r.paths = args, paths
    if tool == "server":
        r.cfg = server.server_config(args)
        r.uvicorn = server.uvicorn_settings(args, r.cfg)
    else:
        r.llama = llama_cli.llama_kwargs(args)
    assert entry[1](r), f"{tool} {argv}: {dest} did not arrive"


def test_no_repack_keeps_the_draft_models_weights(paths):
    """A draft model is repacked (Q5_0 / IQ4_NL as Q8_0) unless --no-repack says otherwise."""
    for argv, repack in (([], True), (["--repack"], True), (["--no-repack"], False)):
        args = parse_args("server", "llama-server", "", ["-m", "m", "-md", paths["model"], *argv])
        assert flags.spec_config(args).repack_draft is repack


def test_sampling_seq_sets_the_sampler_order():
    for argv in (["--sampling-seq", "kt"], ["--sampler-seq", "kt"]):
        args = parse_args("cli", "llama-cli", "", ["-m", "m", *argv])
        assert flags.sampling_params(args).samplers == ["top_k", "temperature"]


def test_sequence_breaker_none_clears_them():
    args = parse_args("server", "llama-server", "", [
        "-m", "m", "--dry-sequence-breaker", "x", "--dry-sequence-breaker", "none"])
    assert flags.sampling_params(args).dry_sequence_breakers == []


@pytest.mark.parametrize("argv", [["-l", "15"], ["-l", "x+1"], ["-l", "15*2"], ["-l", "15+"],
                                  ["--dry-base", "0.5"], ["--repeat-last-n", "-2"],
                                  ["--dry-penalty-last-n", "-5"], ["-rea", "maybe"],
                                  ["-ctk", "q4_k"], ["-ctv", "q8_0", "-fa", "off"],
                                  ["--samplers", "top_k;bogus"],
                                  ["--sampling-seq", "kq"], ["--spec-type", "ngram-mod"],
                                  ["--spec-type", "bogus"], ["--spec-type", "draft-simple"],
                                  ["--draft-max", "8"], ["--spec-ngram-simple-size-n", "4"],
                                  ["--spec-draft-vocab", "4096"],
                                  ["--spec-draft-vocab", "-1"],
                                  ["--spec-type", "ngram-simple",
                                   "--spec-ngram-simple-size-m", "0"]])
def test_bad_values_end_the_tool_with_one_line(argv, paths, capsys):
    for module, prog in ((server, "llama-server"), (llama_cli, "llama-cli")):
        assert module.main(["-m", paths["model"], *argv]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"{prog}: error: "), err


@pytest.mark.parametrize("tool", TOOLS)
def test_unsupported_flags_end_the_tool(tool, capsys):
    for name, takes_value in NOT_SUPPORTED.items():
        with pytest.raises(SystemExit) as e:
            parse_args(tool, "llamacpy", "", ["-m", "m", name, *(["x"] if takes_value else [])])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and err == [f"llamacpy: error: {name} is not supported by "
                                             f"llamacpy yet"]


def test_refused_settings_from_the_environment(monkeypatch, capsys):
    monkeypatch.setenv("LLAMA_ARG_CONT_BATCHING", "0")
    with pytest.raises(SystemExit) as e:
        parse_args("server", "llama-server", "", ["-m", "m"])
    assert e.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


def test_accepted_switches_say_what_always_happens():
    args = parse_args("server", "llama-server", "", ["-m", "m", "-cb", "--jinja",
                                                     "--no-mmproj-offload"])
    assert args.cont_batching and args.jinja and args.mmproj_offload is False


def test_supported_and_unsupported_never_overlap():
    names = {name for flag in FLAGS for name in flag.names}
    assert not names & set(NOT_SUPPORTED)


@pytest.mark.parametrize("tool", TOOLS)
def test_help_lists_every_flag(tool):
    text = build_parser(tool, TOOLS[tool][2], "").format_help()
    for flag in FLAGS:
        if tool in flag.tools:
            for name in flag.names:
                assert name in text


def test_no_tool_ignores_a_flag_and_runs_on():
    for path in (ROOT / "llamacpy").rglob("*.py"):
        assert "ignoring it" not in path.read_text().lower(), path


# -- where the values take effect --------------------------------------------------------------

class StubCache:
    def check_room(self, seq, pos0, n):
        pass

    def commit(self, seq, n):
        pass


class StubModel:
    class args:
        n_vocab = 4

    def make_cache(self, n_ctx, n_seq, type_k, type_v):
        return StubCache()

    def forward(self, ub, cache):
        return np.zeros((int(np.count_nonzero(ub.logits)), 4), np.float32)


def test_prompt_batches_decode_with_threads_batch(monkeypatch):
    import numba

    from llamacpy import kernels
    from llamacpy.engine.context import Context
    from llamacpy.memory.batch import Batch

    monkeypatch.setattr(kernels, "_requested_threads", kernels._requested_threads)
    monkeypatch.setattr(numba.config, "NUMBA_NUM_THREADS", 8)  # as on an 8-core machine
    used, current = [], [numba.get_num_threads()]
    monkeypatch.setattr(numba, "set_num_threads", lambda n: (used.append(n),
                                                             current.__setitem__(0, n)))
    monkeypatch.setattr(numba, "get_num_threads", lambda: current[0])
    monkeypatch.setattr(kernels, "_openblas_setter", lambda: used.append("blas") and None)
    ctx = Context(StubModel(), n_ctx=64, n_threads=2, n_threads_batch=6)
    assert ctx.thread_counts() == (2, 6)
    used.clear()
    ctx.decode(Batch.from_tokens([1, 2, 3]))  # -tb set 6 already
    ctx.decode(Batch.from_tokens([4], pos0=3))
    ctx.decode(Batch.from_tokens([5], pos0=4))  # already at 2: no switch
    ctx.decode(Batch.from_tokens([6, 7], pos0=5))
    assert used == [2, 6] and current[0] == 6
    only_t = Context(StubModel(), n_ctx=64, n_threads=3)  # -tb unset: as -t
    assert only_t.thread_counts() == (3, 3)


def test_threads_http_sizes_the_worker_pools():
    import anyio.to_thread

    seen = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    async def run():
        wrapped = server.with_http_threads(app, 3)
        await wrapped({"type": "lifespan"}, None, None)
        await wrapped({"type": "http"}, None, None)
        loop = asyncio.get_running_loop()
        return loop._default_executor._max_workers, \
            anyio.to_thread.current_default_thread_limiter().total_tokens

    assert asyncio.run(run()) == (3, 3) and seen == ["lifespan", "http"]
    assert server.with_http_threads(app, -1) is app


def test_ignore_eos_is_every_requests_default():
    from llamacpy.server.params import completion_from

    def ignore_eos(body, **default):
        return completion_from({"prompt": "hi", **body}, SamplingParams(), -1, "completion",
                               **default).ignore_eos

    assert ignore_eos({}, ignore_eos=True) is True
    assert ignore_eos({"ignore_eos": False}, ignore_eos=True) is False
    assert ignore_eos({}) is False


def test_cli_warm_up_decodes_every_path_and_forgets():
    from llamacpy import Llama

    llm = Llama("tests/golden/tiny_hf/llama.gguf", n_ctx=64, verbose=False)
    steps = [label for label, _ in llama_cli.warm_up(llm)]
    assert steps[0].startswith("prompt batch") and "one-token decode" in steps
    assert llm.n_tokens == 0 and llm._slot.tokens == [] and llm._ctx.cache.n_past[0] == 0


def test_log_disable_silences_the_timings(capsys):
    llama_cli.print_timings(llama_cli.Totals(verbosity=-1))
    assert capsys.readouterr().err == ""
    llama_cli.print_timings(llama_cli.Totals())
    assert "prompt eval time" in capsys.readouterr().err


def test_switch_flags_are_switches():
    """A switch's const must differ from its default, or giving it changes nothing."""
    for flag in FLAGS:
        if flag.type is SWITCH and flag.default is not None:
            assert flag.const != flag.default or any(
                other.dest == flag.dest and other.const != flag.const for other in FLAGS
                if other is not flag), flag.names


def test_a_sampling_flag_at_its_default_value_still_beats_model_metadata(monkeypatch, paths):
    """--temp 0.8 is llama.cpp's default, yet given by the user it wins over a model's
    general.sampling.temp; a flag left out lets the metadata through."""
    from llamacpy.sampling import SamplingParams
    from llamacpy.server.state import sampling_overrides

    monkeypatch.delenv("LLAMA_ARG_TEMPERATURE", raising=False)
    monkeypatch.delenv("LLAMA_ARG_TOP_K", raising=False)
    meta = {"general.sampling.temp": 0.6, "general.sampling.top_k": 20}
    cfg = server.server_config(parse_args("server", "llama-server", "", ["-m", paths["model"], "--temp", "0.8"]))
    params = SamplingParams.from_gguf(meta, **sampling_overrides(cfg))
    assert params.temperature == 0.8 and params.top_k == 20
    monkeypatch.setenv("LLAMA_ARG_TOP_K", "40")
    cfg = server.server_config(parse_args("server", "llama-server", "", ["-m", paths["model"]]))
    params = SamplingParams.from_gguf(meta, **sampling_overrides(cfg))
    assert params.temperature == 0.6 and params.top_k == 40


@pytest.mark.parametrize("argv", [["--grammar", "root ::= ("], ["-j", "{not json"],
                                  ["-j", '{"type": "nope"}'], ["--grammar-file", "/nonexistent"],
                                  ["--grammar", 'root ::= "a"', "-j", "{}"]])
def test_bad_grammars_end_the_tool_with_one_line(argv, paths, capsys):
    for module, prog in ((server, "llama-server"), (llama_cli, "llama-cli")):
        with pytest.raises(SystemExit) as e:
            module.main(["-m", paths["model"], *argv])
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and len(err) == 1 and err[0].startswith(f"{prog}: error: "), err
