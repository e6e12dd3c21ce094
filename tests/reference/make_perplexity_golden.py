"""Regenerate tests/golden/perplexity/golden.json: llama.cpp's perplexity (llama-perplexity's
method) of catalogue models over tests/golden/perplexity/text.txt (llama.cpp's README.md from
the llama-cpp-python 0.3.36 sdist, MIT), and the same from the exact fp32 computation.

    .venv/bin/python -m tests.reference.make_perplexity_golden
    # needs llama-cpp-python 0.3.36, and torch==2.13.0 transformers accelerate for the exact run

llama-cpp-python ships no llama-perplexity binary, so this applies perplexity.cpp's perplexity()
to llama.cpp's own logits: the text tokenized whole (common_tokenize with add_special), chunks
of N_CTX tokens whose first token becomes BOS when the vocabulary adds one, each chunk decoded
alone on a cleared cache with all logits, and -log p of tokens first+1..n_ctx-1 (first =
n_ctx/2) from a log-softmax whose sum runs in double; [i] is exp(mean) over chunks 1..i, and
the final error is perplexity.cpp's sqrt(var/(count-1)) * ppl.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from llamacpy.hub import pull

HERE = Path(__file__).resolve().parents[1] / "golden" / "perplexity"
GOLDEN = HERE / "golden.json"
TEXT = HERE / "text.txt"
N_CTX = 128
RUNS = {"smollm2-135m": 3, "gemma3-270m": 2}  # model -> chunks


def read_text() -> bytes:
    """The text as llama-perplexity -f reads it (one trailing newline dropped)."""
    text = TEXT.read_bytes()
    return text[:-1] if text.endswith(b"\n") else text


def chunk_nll(logits: np.ndarray, chunk: list[int], n_ctx: int) -> np.ndarray:
    """-log p of chunk[j + 1] from logits row j, j = n_ctx/2 .. n_ctx-2 (float max and
    differences, double sum of exps: perplexity.cpp's log_softmax)."""
    first = n_ctx // 2
    rows = logits[first:n_ctx - 1].astype(np.float32)
    mx = rows.max(axis=1)
    sum_exp = np.exp(rows - mx[:, None]).sum(axis=1, dtype=np.float64)
    targets = np.asarray(chunk[first + 1:n_ctx])
    return -((rows[np.arange(len(rows)), targets] - mx) - np.log(sum_exp))


def llamacpp_perplexity(path: Path, text: bytes, n_ctx: int, n_chunk: int) -> dict:
    """llama.cpp's logits for each chunk, scored as perplexity() does."""
    import llama_cpp

    from tests.reference.llamacpp import load_llama

    llm = load_llama(path, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, logits_all=True,
                     n_threads=2)
    tokens = llm.tokenize(text, add_bos=True, special=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    add_bos = bool(llama_cpp.llama_vocab_get_add_bos(vocab))
    nll, running = [], []
    for i in range(n_chunk):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx]
        fed = [llm.token_bos()] + chunk[1:] if add_bos else chunk
        llm.reset()
        llm.eval(fed)
        nll.append(chunk_nll(np.array(llm.scores[:n_ctx]), chunk, n_ctx))
        running.append(float(np.exp(np.concatenate(nll).mean())))
    v = np.concatenate(nll)
    ppl = float(np.exp(v.mean()))
    err = float(np.sqrt((np.mean(v * v) - v.mean() ** 2) / (len(v) - 1)) * ppl)
    return {"file": path.name, "n_ctx": n_ctx, "n_chunk": n_chunk, "add_bos": add_bos,
            "bos": llm.token_bos(),
            "n_tokens": len(tokens), "tokens": tokens[:n_chunk * n_ctx], "chunks": running,
            "ppl": ppl, "ppl_err": err}


def exact_perplexity(path: Path, run: dict) -> dict:
    """The same chunks scored from the exact computation: the GGUF's dequantized weights in
    fp32, run by transformers (needs torch, transformers and accelerate)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                 dtype=torch.float32)
    n_ctx, tokens, nll, running = run["n_ctx"], run["tokens"], [], []
    for i in range(run["n_chunk"]):
        chunk = tokens[i * n_ctx:(i + 1) * n_ctx]
        fed = [run["bos"]] + chunk[1:] if run["add_bos"] else chunk
        with torch.no_grad():
            logits = model(torch.tensor([fed])).logits[0].float().numpy()
        nll.append(chunk_nll(logits, chunk, n_ctx))
        running.append(float(np.exp(np.concatenate(nll).mean())))
    return {"chunks": running, "ppl": running[-1]}


def main() -> None:
    text = read_text()
    golden = {"reference": "llama-cpp-python 0.3.36 logits, perplexity.cpp's perplexity()",
              "text": TEXT.name, "text_sha256": hashlib.sha256(TEXT.read_bytes()).hexdigest(),
              "models": {}}
    for name, n_chunk in RUNS.items():
        run = golden["models"][name] = llamacpp_perplexity(pull(name), text, N_CTX, n_chunk)
        run["exact"] = exact_perplexity(pull(name), run)
        print(name, "llama.cpp", run["chunks"], "exact fp32", run["exact"]["chunks"])
    GOLDEN.write_text(json.dumps(golden, indent=1) + "\n")


if __name__ == "__main__":
    main()
