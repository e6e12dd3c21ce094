"""Router mode's model sources without a server: llama.cpp's --models-dir scan (one level deep,
common/preset.cpp load_from_models_dir), the cache source, --models-preset INI files (keys as
flag names, short names or LLAMA_ARG_* names; [*] for every model; errors for keys llamacpy
cannot honour), and the flags a router passes to its children."""

from __future__ import annotations

import pytest

from llamacpy.cli import server
from llamacpy.hub.catalog import CATALOG
from llamacpy.hub.models_dir import PresetError, discover, read_preset, scan_models_dir
from llamacpy.server.router import child_env, child_flags


def touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")
    return str(path)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    d = tmp_path / "models"
    files = {
        "flat": touch(d / "llama-3.2-1b-Q4_K_M.gguf"),
        "top_mmproj": touch(d / "mmproj-F16.gguf"),  # a companion file alone is no model
        "top_draft": touch(d / "mtp-head.gguf"),
        "vision": touch(d / "gemma-3-4b-it" / "gemma-3-4b-it-Q8_0.gguf"),
        "vision_mmproj": touch(d / "gemma-3-4b-it" / "mmproj-F16.gguf"),
        "shard1": touch(d / "Kimi" / "Kimi-UD-IQ1_S-00001-of-00003.gguf"),
        "shard2": touch(d / "Kimi" / "Kimi-UD-IQ1_S-00002-of-00003.gguf"),
        "shard3": touch(d / "Kimi" / "Kimi-UD-IQ1_S-00003-of-00003.gguf"),
        "draft": touch(d / "withdraft" / "model.gguf"),
        "draft_file": touch(d / "withdraft" / "mtp-model.gguf"),
    }
    touch(d / "empty" / "notes.txt")  # a folder without a model is no model
    (d / "deep" / "inner").mkdir(parents=True)
    touch(d / "deep" / "inner" / "too-deep.gguf")  # two levels down: not scanned
    return d, files


def test_models_dir_scan_one_level_deep(folder):
    d, files = folder
    found = scan_models_dir(d)
    assert sorted(found) == ["Kimi", "gemma-3-4b-it", "llama-3.2-1b-Q4_K_M", "withdraft"]
    assert found["llama-3.2-1b-Q4_K_M"].path == files["flat"]
    assert found["llama-3.2-1b-Q4_K_M"].mmproj == ""
    assert (found["gemma-3-4b-it"].path, found["gemma-3-4b-it"].mmproj) == (
        files["vision"], files["vision_mmproj"])
    assert found["Kimi"].path == files["shard1"]
    assert (found["withdraft"].path, found["withdraft"].draft) == (files["draft"],
                                                                    files["draft_file"])
    assert found["gemma-3-4b-it"].child_args() == ["-m", files["vision"], "--mmproj",
                                                   files["vision_mmproj"]]
    assert {s.source for s in found.values()} == {"models_dir"}


def test_missing_models_dir_is_an_error(tmp_path):
    with pytest.raises(PresetError, match="does not exist or is not a directory"):
        scan_models_dir(tmp_path / "nope")


def test_cache_models_come_first_and_the_folder_wins(folder, tmp_path):
    d, files = folder
    touch(tmp_path / "cache" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    touch(tmp_path / "cache" / "something-else.gguf")  # not a catalogue model: not listed
    touch(tmp_path / "cache" / CATALOG["whisper-tiny.en"].file)  # speech: the audio routes
    found = discover(str(d), None)
    assert found["whisper-tiny.en"].source == "cache"
    assert found["smollm2-135m"].source == "cache"
    assert found["smollm2-135m"].path == str(tmp_path / "cache" /
                                             "SmolLM2-135M-Instruct.Q4_1.gguf")
    assert "something-else" not in found
    (d / "smollm2-135m.gguf").write_bytes(b"GGUF")
    assert discover(str(d), None)["smollm2-135m"].path == str(d / "smollm2-135m.gguf")


PRESET = """version = 1
; global options
[*]
c = 8192
LLAMA_ARG_N_PREDICT = 64

[llama-3.2-1b-Q4_K_M]
chat-template = chatml
jinja = true
no-warmup = true
temp = 0.1
alias = small,tiny
stop-timeout = 3
load-on-startup = true

[custom]
model = {model}
warmup = false
"""


def test_preset_sections_merge_into_models(folder, tmp_path):
    d, files = folder
    ini = tmp_path / "p.ini"
    ini.write_text(PRESET.format(model=files["flat"]))
    found = discover(str(d), str(ini))
    flat = found["llama-3.2-1b-Q4_K_M"]
    # [*] first, then the model's own section: later flags win in the child's parser
    assert flat.options == ["--ctx-size", "8192", "--n-predict", "64", "--chat-template",
                            "chatml", "--jinja", "--no-warmup", "--temperature", "0.1"]
    assert flat.source == "preset" and flat.path == files["flat"]
    assert (flat.aliases, flat.stop_timeout, flat.load_on_startup) == (["small", "tiny"], 3,
                                                                      True)
    custom = found["custom"]
    assert custom.path == files["flat"] and custom.options[-1] == "--no-warmup"
    assert found["Kimi"].options == ["--ctx-size", "8192", "--n-predict", "64"]


@pytest.mark.parametrize("body,message", [
    ("[x]\nmodel = m.gguf\nbogus-key = 1\n", "option 'bogus-key' not recognized in preset 'x'"),
    ("[x]\nmodel = m.gguf\nport = 9\n", "the router's to set"),
    ("[x]\nmodel = m.gguf\napi-key = k\n", "the router's to set"),
    ("[x]\nmodel = m.gguf\nlora = a.gguf\n", "not supported by llamacpy yet"),
    ("[x]\nmodel = m.gguf\njinja = maybe\n", "takes true or false"),
    ("[x]\nmodel = m.gguf\nstop-timeout = soon\n", "takes seconds"),
    ("[x]\nc = 100\n", "names no known model"),
    ("[*]\nmodel = m.gguf\n", "cannot set model files"),
    ("[a]\nmodel = m.gguf\nalias = b\n[b]\nmodel = n.gguf\n", "conflicts with model"),
])
def test_preset_errors_name_the_problem(tmp_path, monkeypatch, body, message):
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    ini = tmp_path / "p.ini"
    ini.write_text(body)
    with pytest.raises(PresetError, match=message):
        discover(None, str(ini))


def test_preset_switches_take_their_opposite(tmp_path):
    ini = tmp_path / "p.ini"
    ini.write_text("[x]\nmodel = m.gguf\nwarmup = false\nno-webui = false\nmetrics = 1\n")
    _, sections = read_preset(ini)
    assert sections["x"].options == ["--no-warmup", "--ui", "--metrics"]


def test_children_get_the_routers_flags_but_not_its_own(monkeypatch):
    argv = ["--models-dir", "./models", "--models-max", "1", "--no-repack", "-c", "3096",
            "--threads", "2", "--host", "0.0.0.0", "--port=8080", "--api-key", "secret",
            "--no-models-autoload", "--sleep-idle-seconds", "30", "--reasoning-budget", "768",
            "--log-file", "router.log", "--no-warmup"]
    assert child_flags(argv) == ["--no-repack", "-c", "3096", "--threads", "2",
                                 "--reasoning-budget", "768", "--no-warmup"]
    monkeypatch.setenv("LLAMA_API_KEY", "secret")
    monkeypatch.setenv("LLAMA_ARG_MODELS_DIR", "./models")
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "1024")
    env = child_env()
    assert "LLAMA_API_KEY" not in env and "LLAMA_ARG_MODELS_DIR" not in env
    assert env["LLAMA_ARG_CTX_SIZE"] == "1024"  # inherited, as llama.cpp's children do


@pytest.mark.parametrize("argv,message", [
    (["-m", "{model}", "--models-max", "2"], "--models-max only applies in router mode"),
    (["-m", "{model}", "--no-models-autoload"], "--models-autoload / --no-models-autoload"),
    (["--mmproj", "p.gguf"], "--mmproj needs -m"),
    (["--alias", "x"], "--alias needs -m"),
    (["-ctk", "q9_9"], "q9_9"),
])
def test_flags_that_cannot_take_effect_end_the_tool(tmp_path, monkeypatch, capsys, argv,
                                                    message):
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path))
    model = touch(tmp_path / "m.gguf")
    monkeypatch.setattr(server, "serve", lambda args, cfg: pytest.fail("served"))
    try:
        code = server.main([a.format(model=model) for a in argv])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and message in err[0], err
