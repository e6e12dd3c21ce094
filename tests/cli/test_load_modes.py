"""-lm / --load-mode with llama.cpp's semantics: mmap (and auto) map the file, none / mlock / dio
hold the weights in private memory, mlock and mmap+mlock lock them (a refused mlock warns with
llama.cpp's line and the model loads); the older switches set the same modes with llama.cpp's
deprecation line; an unknown mode ends the tool with one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from llamacpy import Llama
from llamacpy.cli import args as flags
from llamacpy.cli import llama_cli, server
from llamacpy.format import open_gguf
from llamacpy.format.reader import LOAD_MODES

TINY = "tests/golden/tiny_hf/llama.gguf"  # 457 KiB: under any RLIMIT_MEMLOCK
ROOT = Path(__file__).resolve().parents[2]


def backing(address: int) -> str:
    """The pathname of the mapping holding `address` in /proc/self/maps ('' if anonymous)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        parts = line.split(maxsplit=5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo <= address < hi:
            return parts[5] if len(parts) > 5 else ""
    raise AssertionError(f"address {address:#x} is not mapped")


def vm_locked_kib() -> int:
    line = next(x for x in Path("/proc/self/status").read_text().splitlines()
                if x.startswith("VmLck:"))
    return int(line.split()[1])


@pytest.mark.parametrize("mode", LOAD_MODES)
def test_each_mode_holds_the_same_bytes_where_llama_cpp_puts_them(mode):
    path = str(Path(TINY).resolve())
    with open_gguf(path, "mmap") as ref:
        expected = {n: t.data.copy() for n, t in ref.tensors.items()}
    locked_before = vm_locked_kib()
    g = open_gguf(path, mode)
    try:
        assert g.load_mode == ("mmap" if mode == "auto" else mode)
        assert set(g.tensors) == set(expected)
        for name, t in g.tensors.items():
            assert np.array_equal(t.data, expected[name]), name
            assert not t.data.flags.writeable
        where = backing(next(iter(g.tensors.values())).data.ctypes.data)
        if mode in ("auto", "mmap", "mmap+mlock"):
            assert g.mapped and where == path  # the file's own pages
        else:
            assert not g.mapped and where == ""  # anonymous private memory
        if mode.endswith("mlock") and g.locked:  # locked: VmLck grew by the file
            assert g.locked == Path(path).stat().st_size
            assert vm_locked_kib() - locked_before >= g.locked // 1024
    finally:
        g.close()


def test_unknown_mode_is_refused():
    with pytest.raises(ValueError, match="unknown load mode: mapped"):
        open_gguf(TINY, "mapped")


@pytest.mark.skipif(not (shutil.which("setpriv") and shutil.which("prlimit")),
                    reason="needs setpriv and prlimit to take CAP_IPC_LOCK away")
@pytest.mark.parametrize("mode", ["mlock", "mmap+mlock"])
def test_a_refused_mlock_warns_and_the_model_still_loads(mode):
    """RLIMIT_MEMLOCK of 64 KiB without CAP_IPC_LOCK: llama_mlock's warning, then it runs."""
    code = (f"from llamacpy import Llama\n"
            f"llm = Llama({TINY!r}, n_ctx=32, load_mode={mode!r}, verbose=False)\n"
            f"print('locked', llm._file.locked, 'text', repr(llm('Hi', max_tokens=3)"
            f"['choices'][0]['text']))\n")
    out = subprocess.run(["setpriv", "--bounding-set=-ipc_lock", "--inh-caps=-ipc_lock", "--",
                          "prlimit", "--memlock=65536:65536", sys.executable, "-c", code],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    size = Path(TINY).stat().st_size
    assert (f"warning: failed to mlock {size}-byte buffer (after previously locking 0 bytes): "
            f"Cannot allocate memory\nTry increasing RLIMIT_MEMLOCK ('ulimit -l' as root).") \
        in out.stderr
    assert out.stdout.startswith("locked 0 text ")


@pytest.mark.parametrize("argv,mode,line", [
    (["--mmap"], "mmap", "--mmap and --no-mmap are deprecated. use --load-mode mmap instead"),
    (["--no-mmap"], "none", "--mmap and --no-mmap are deprecated. use --load-mode mmap instead"),
    (["--mlock"], "mlock", "--mlock is deprecated. use --load-mode mlock instead"),
    (["-dio"], "dio", "--direct-io and --no-direct-io are deprecated. use --load-mode dio "
                      "instead"),
    (["--direct-io"], "dio", "--direct-io and --no-direct-io are deprecated. use --load-mode "
                             "dio instead"),
    (["-lm", "mmap+mlock"], "mmap+mlock", None),
    (["--load-mode", "none"], "none", None),
    ([], "auto", None),
])
def test_flags_and_their_deprecated_spellings(argv, mode, line, capsys):
    for tool, prog in (("server", "llama-server"), ("cli", "llama-cli")):
        args = flags.parse_args(tool, prog, "", ["-m", TINY, *argv])
        assert args.load_mode == mode
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ([f"{prog}: warning: DEPRECATED: {line}"] if line else [])
    assert server.server_config(flags.parse_args("server", "s", "", ["-m", TINY, *argv])
                                ).load_mode == mode
    assert llama_cli.llama_kwargs(flags.parse_args("cli", "c", "", ["-m", TINY, *argv])
                                  )["load_mode"] == mode


def test_later_flag_wins_as_in_llama_cpp(capsys):
    args = flags.parse_args("server", "s", "", ["-m", TINY, "--no-mmap", "--mlock"])
    assert args.load_mode == "mlock"
    args = flags.parse_args("server", "s", "", ["-m", TINY, "--mlock", "-lm", "mmap"])
    assert args.load_mode == "mmap"


@pytest.mark.parametrize("module,prog", [(server, "llama-server"), (llama_cli, "llama-cli")])
def test_unknown_load_mode_ends_the_tool_with_one_line(module, prog, capsys):
    with pytest.raises(SystemExit) as e:
        module.main(["-m", TINY, "-lm", "mapped"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"{prog}: error: argument -lm/--load-mode: unknown load mode: "
                             f"mapped")


def test_env_variable_sets_the_mode(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_LOAD_MODE", "none")
    assert flags.parse_args("server", "s", "", ["-m", TINY]).load_mode == "none"


@pytest.mark.parametrize("kwargs,mode", [({}, "mmap"), ({"use_mmap": False}, "none"),
                                         ({"use_mlock": True}, "mmap+mlock"),
                                         ({"use_mmap": False, "use_mlock": True}, "mlock"),
                                         ({"load_mode": "dio"}, "dio")])
def test_python_api_use_mmap_and_use_mlock(kwargs, mode):
    """llama-cpp-python's mapping of use_mmap / use_mlock onto load modes; same greedy text."""
    llm = Llama(TINY, n_ctx=32, verbose=False, **kwargs)
    assert llm._file.load_mode == mode
    text = llm("Hello", max_tokens=4, temperature=0.0)["choices"][0]["text"]
    ref = Llama(TINY, n_ctx=32, verbose=False)("Hello", max_tokens=4, temperature=0.0)
    assert text == ref["choices"][0]["text"]
