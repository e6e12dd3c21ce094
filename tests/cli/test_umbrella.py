"""`llamacpy <tool>`: every console script is reachable through the umbrella, and each tool's
module has the main(argv) it dispatches to."""

import importlib
import tomllib
from pathlib import Path

import pytest

from llamacpy.cli.main import TOOLS, main

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def test_every_console_script_has_an_umbrella_tool():
    umbrella = {f"llamacpy.cli.{module}:main" for module, _ in TOOLS.values()}
    missing = {name: target for name, target in SCRIPTS.items()
               if name != "llamacpy" and target not in umbrella}
    assert not missing


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_tool_module_has_main(tool):
    assert callable(importlib.import_module(f"llamacpy.cli.{TOOLS[tool][0]}").main)


def test_help_lists_the_whisper_tools(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "whisper-cli" in out and "whisper-server" in out


def test_unknown_tool_is_one_line_and_fails(capsys):
    assert main(["no-such-tool"]) == 1
    assert capsys.readouterr().err.count("\n") == 1
