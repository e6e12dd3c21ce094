"""Regenerate tests/golden/greedy_golden.json: llama.cpp's greedy 64-token continuations of ten
prompts on each real model (token ids and text).

    .venv/bin/python -m tests.reference.make_greedy_golden   # needs llama-cpp-python 0.3.36
"""

from __future__ import annotations

import json
from pathlib import Path

from llamacpy.hub import CATALOG, pull
from tests.reference.llamacpp import load_llama

GOLDEN = Path(__file__).parent.parent / "golden" / "greedy_golden.json"
N_TOKENS = 64
PROMPTS = [
    "The capital of France is",
    "def quicksort(arr):",
    "Once upon a time, in a small village by the sea,",
    "The three laws of thermodynamics are",
    "Here is a recipe for pancakes:\n",
    "In 1969, the first humans",
    "import numpy as np\n\n# compute the mean of each row\n",
    "Les avantages du vélo en ville sont",
    "Q: What is 17 times 23?\nA:",
    "The most important thing to remember when learning a new language is",
]


def main() -> None:
    golden = {}
    for name in CATALOG:
        llm = load_llama(pull(name), n_ctx=512, n_threads=2)
        runs = []
        for prompt in PROMPTS:
            tokens = llm.tokenize(prompt.encode(), add_bos=True, special=False)
            out = []
            llm.reset()
            for tok in llm.generate(tokens, temp=0.0, top_k=1):
                if tok == llm.token_eos() or len(out) == N_TOKENS:
                    break
                out.append(tok)
            runs.append({"prompt": prompt, "prompt_tokens": tokens, "tokens": out,
                         "text": llm.detokenize(out).decode("utf-8", errors="replace")})
        golden[name] = runs
        print(name, "done")
    GOLDEN.write_text(json.dumps(golden, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
