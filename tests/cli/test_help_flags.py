"""--help lists every flag a tool accepts, in llama.cpp's spelling: a wrapper script that greps
`llama-server --help` for a flag before passing it (issue 12's script checks these six) must
find each one, or it silently drops the flag."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from llamacpy.cli.args import FLAGS

# what the wrapper greps for, verbatim ("--reasoning " with its space: not --reasoning-budget)
WRAPPER = ["--no-warmup", "--flash-attn", "--no-repack", "--reasoning ", "--reasoning-budget",
           "--cache-type-k"]
# the memory and context flags of the wrapper's command line and of issue 12
MEMORY = ["-lm", "--load-mode", "--mmap", "--no-mmap", "--mlock", "-dio", "-nr", "--repack",
          "--context-shift", "--no-context-shift", "--keep", "--cache-reuse", "-cram",
          "--cache-ram", "-ctk", "-ctv"]


def help_text(tool: str) -> str:
    exe = shutil.which(f"llama-{tool}") or shutil.which(f"llama-{tool}",
                                                        path=sys.prefix + "/bin")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "llamacpy", tool, "--help"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                         env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def server_help() -> str:
    return help_text("server")


@pytest.mark.parametrize("flag", WRAPPER)
def test_the_wrapper_scripts_greps_find_their_flag(server_help, flag):
    assert flag in server_help  # grep -q -- "$flag"


@pytest.mark.parametrize("flag", MEMORY)
def test_memory_and_context_flags_are_listed(server_help, flag):
    assert re.search(rf"(^|[\s,\[]){re.escape(flag)}([\s,=\]]|$)", server_help, re.M), flag


@pytest.mark.parametrize("tool", ["server", "cli"])
def test_every_accepted_flag_is_listed(tool):
    text = help_text(tool)
    names = [n for f in FLAGS if tool in f.tools for n in f.names]
    missing = [n for n in names
               if not re.search(rf"(^|[\s,\[]){re.escape(n)}([\s,=\]]|$)", text, re.M)]
    assert not missing, f"llama-{tool} --help does not list {missing}"
