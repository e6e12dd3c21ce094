"""Regenerate tests/golden/accuracy/*.npz: how far llama.cpp is from the exact computation of each
real model, and the exact distributions a test needs to measure llamacpy the same way.

The exact computation is the GGUF's dequantized weights run in fp32 by transformers
(`from_pretrained(folder, gguf_file=name, dtype=float32)`). Over 512 teacher-forced tokens of
tests/data/mixed_text.txt we store, per position, the top-64 token ids and log-probabilities of the
exact model and of llama.cpp, llama.cpp's full-vocabulary KLD and top-1 agreement, and its KLD over
the partition {exact top-64, rest}: the metric the test applies to llamacpy's full logits.

    .venv/bin/python -m tests.reference.make_accuracy_golden   # needs llama-cpp-python, torch
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from llamacpy.hub import CATALOG, pull
from tests.reference.llamacpp import load_llama
from tests.reference.metrics import full_kld, log_softmax, partition_kld, top_k

GOLDEN = Path(__file__).parent.parent / "golden" / "accuracy"
TEXT = Path(__file__).parent.parent / "data" / "mixed_text.txt"
N_TOKENS, TOP_K = 512, 64


def exact_logits(path: Path, tokens: np.ndarray) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name,
                                                 dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor(tokens[None].astype(np.int64))).logits[0].numpy()


def llama_cpp_logits(path: Path) -> tuple[np.ndarray, np.ndarray]:
    llm = load_llama(path, n_ctx=1024, logits_all=True)
    tokens = np.array(llm.tokenize(TEXT.read_bytes(), add_bos=True)[:N_TOKENS])
    assert len(tokens) == N_TOKENS, f"text too short for {path.name}: {len(tokens)} tokens"
    llm.eval(tokens.tolist())
    return tokens, np.array(llm.scores[:N_TOKENS], dtype=np.float32)


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    summary = {}
    for name in CATALOG:
        path = pull(name)
        tokens, lcpp = llama_cpp_logits(path)
        exact = exact_logits(path, tokens)
        lp_exact, lp_lcpp = log_softmax(exact), log_softmax(lcpp)
        ids_e, top_e = top_k(lp_exact, TOP_K)
        ids_l, top_l = top_k(lp_lcpp, TOP_K)
        kld = full_kld(lp_exact, lp_lcpp)
        pkld = partition_kld(ids_e, top_e, lp_lcpp)  # the metric the test applies to llamacpy
        top1 = float((exact.argmax(-1) == lcpp.argmax(-1)).mean())
        summary[name] = {"llama_cpp_kld_mean": float(kld.mean()), "llama_cpp_top1": top1,
                         "llama_cpp_partition_kld_mean": float(pkld.mean())}
        np.savez_compressed(GOLDEN / f"{name}.npz", tokens=tokens, exact_ids=ids_e,
                            exact_logp=top_e, llamacpp_ids=ids_l, llamacpp_logp=top_l,
                            llamacpp_kld_full=kld.astype(np.float32),
                            llamacpp_pkld_exact=pkld.astype(np.float32),
                            llamacpp_top1=np.array(lcpp.argmax(-1), np.int32),
                            exact_top1=np.array(exact.argmax(-1), np.int32))
        print(name, summary[name])
    (GOLDEN / "summary.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
