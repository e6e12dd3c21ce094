"""llama-cli --mmproj --image: one question about images, llama-mtmd-cli's single turn.

With a template that passes the user message through, the prompt is the golden's own, so the
greedy first token must be llama.cpp's argmax after that prompt (tests/golden/vision/
mtmd_prompts.*); without a marker in -p, one is put in front per image.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from llamacpy.format import open_gguf
from llamacpy.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "vision"
QWEN, QWEN_MMPROJ = ROOT / "tests/golden/qwen35/qwen35.gguf", GOLDEN / "qwen35.gguf"
CASE = json.loads((GOLDEN / "mtmd_prompts.json").read_text())["cases"]["qwen35-two"]
PASS_THROUGH = "{% for m in messages %}{{ m.content }}{% endfor %}"


def llama_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llamacpy", "cli", "-m", str(QWEN), *args],
                          capture_output=True, text=True, timeout=300)


def test_first_token_is_llamacpp_argmax():
    images = ",".join(str(GOLDEN / "images" / i) for i in CASE["images"])
    r = llama_cli("--mmproj", str(QWEN_MMPROJ), "--image", images, "-p", CASE["prompt"],
                  "--chat-template", PASS_THROUGH, "-n", "1", "--temp", "0")
    assert r.returncode == 0, r.stderr
    logits = np.load(GOLDEN / "mtmd_prompts.npz")["qwen35-two.logits"][0]
    tok = Tokenizer.from_gguf(open_gguf(QWEN))
    expected = tok.detokenize([int(np.argmax(logits))]).decode("utf-8", errors="replace")
    assert r.stdout.rstrip("\n") == expected
    assert "image encode time" in r.stderr and "2 images" in r.stderr


def test_markers_added_and_errors():
    image = str(GOLDEN / "images" / "wide_128x64.png")
    r = llama_cli("--mmproj", str(QWEN_MMPROJ), "--image", image, "-p", "What is it?", "-n", "4",
                  "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert "1 images" in r.stderr
    r = llama_cli("--image", image, "-p", "What is it?")
    assert r.returncode == 1 and "--mmproj" in r.stderr
    r = llama_cli("--mmproj", str(QWEN_MMPROJ), "--image", str(GOLDEN / "mtmd_prompts.json"),
                  "-p", "x")
    assert r.returncode == 1 and "cannot load image" in r.stderr
