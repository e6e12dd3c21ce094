"""llama-cli --context-shift / --keep: a completion runs past a full context (llama.cpp's
llama-cli shifts as its server does); without the flag it ends where the context ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llamacpy.format import open_gguf
from llamacpy.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "Count from one to one hundred, in words: one, two, three,"


def cli(model: str, *flags: str) -> str:
    out = subprocess.run([sys.executable, "-m", "llamacpy", "cli", "-m", model, "-c", "64",
                          "-no-cnv", "-p", PROMPT, "--temp", "0", "--ignore-eos", "-n", "100",
                          "--no-warmup", "-t", "2", *flags], capture_output=True, text=True,
                         timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_context_shift_runs_past_a_full_context(model_paths):
    path = str(model_paths["smollm2-135m"])
    tok = Tokenizer.from_gguf(open_gguf(path))
    n_prompt = len(tok.tokenize(PROMPT, add_special=True))
    plain = cli(path)
    shifted = cli(path, "--context-shift", "--keep", "8")
    n_plain = len(tok.tokenize(plain.removeprefix(PROMPT), add_special=False))
    n_shifted = len(tok.tokenize(shifted.removeprefix(PROMPT), add_special=False))
    assert n_plain <= 64 - n_prompt + 2  # the context's room (retokenized text: +-2)
    assert n_shifted >= 95  # -n 100 tokens, well past the 64-token context
    assert shifted.startswith(plain[: len(PROMPT) + 40])
