"""Few-token kernels on a model's own layers: every layer's matrix of one kind in layer order
(the decode access pattern), one token's kernel against the few-token kernels and the VNNI GEMM,
1 thread, medians.

    python bench/few_token_layers.py MODEL [--kinds ffn_gate:Q4_K,ffn_down:Q6_K] [-T 2,4,8,16]
                                     [-r 5] [--max-matrices 28]

Per kind and token count prints ms for: `one` (the one-token kernel on the first token), `int16`
(kernels/matmul.py's int16 `multi_*` kernel), `tokens` (kernels/kquant_tokens.py, Q4_K / Q6_K
on AVX-512BW) and `gemm` (kernels/vnni.py, where the CPU has VNNI): where `SMALL_BATCH_VNNI*`
should hand over to the GEMM, and which few-token kernel `MULTI_KERNELS` should hold. Output
matrices (output.weight, token_embd.weight) are timed in chunks of 8192 rows.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llamacpy.format import open_gguf  # noqa: E402
from llamacpy.format.constants import GGMLType  # noqa: E402
from llamacpy.hub import resolve_model  # noqa: E402
from llamacpy.kernels import kquant_tokens, set_threads, simd  # noqa: E402
from llamacpy.kernels.dequant import call_kernel, row_length, weight_view  # noqa: E402
from llamacpy.kernels.vnni import vnni_enabled, vnni_matmul  # noqa: E402

mm = importlib.import_module("llamacpy.kernels.matmul")
mv = importlib.import_module("llamacpy.kernels.matvec")
TOKENS = {GGMLType.Q4_K: kquant_tokens.tokens_q4_k, GGMLType.Q6_K: kquant_tokens.tokens_q6_k}
INT16 = {GGMLType.Q4_K: mm.multi_q4_k, GGMLType.Q6_K: mm.multi_q6_k}


def matrices(gguf, name: str, t: GGMLType, limit: int) -> list[np.ndarray]:
    found = [x.blocks() for k, x in gguf.tensors.items()
             if k.split(".")[-2:-1] == [name] or k == f"{name}.weight"
             if x.ggml_type == t]
    if name in ("output", "token_embd") and found:
        return [found[0][i:i + 8192] for i in range(0, min(len(found[0]), 8192 * 6), 8192)]
    return found[:limit]


def kernels(t: GGMLType, T: int, mats: list[np.ndarray], X: np.ndarray, Y: np.ndarray) -> dict:
    view = [weight_view(w, t) for w in mats]
    out = {"one": lambda: [call_kernel(mv.MATVEC_KERNELS[t], w, X[0], Y[0]) for w in view]}
    int16 = INT16.get(t) or mm.multi_kernel(t, T)
    out["int16" if t in INT16 else int16.__name__] = \
        lambda: [call_kernel(int16, w, X, Y, 1) for w in view]
    if t in TOKENS and simd.HAS_AVX512BW:
        out["tokens"] = lambda: [call_kernel(TOKENS[t], w, X, Y, 1) for w in view]
    if vnni_enabled() and mm.vnni_supports(t, T, X.shape[1]):
        out["gemm"] = lambda: [vnni_matmul(w, t, X, Y, -1) for w in mats]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--kinds", default="ffn_gate:Q4_K,ffn_down:Q6_K,ffn_down:Q4_K")
    ap.add_argument("-T", "--tokens", default="2,4,8,16")
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--max-matrices", type=int, default=28)
    args = ap.parse_args()
    set_threads(1)
    gguf = open_gguf(resolve_model(args.model))
    for kind in args.kinds.split(","):
        name, type_name = kind.split(":")
        t = GGMLType[type_name]
        mats = matrices(gguf, name, t, args.max_matrices)
        if not mats:
            print(f"{kind}: no such matrices")
            continue
        rows, n = mats[0].shape[0], row_length(mats[0].shape[1], t)
        for T in (int(v) for v in args.tokens.split(",")):
            X = np.random.default_rng(T).standard_normal((T, n)).astype(np.float32)
            Y = np.empty((T, rows), np.float32)
            fns = kernels(t, T, mats, X, Y)
            times = {k: [] for k in fns}
            for fn in fns.values():
                fn()
            for _ in range(args.rounds):  # interleaved
                for k, fn in fns.items():
                    t0 = time.perf_counter()
                    fn()
                    times[k].append(time.perf_counter() - t0)
            cells = "  ".join(f"{k} {1e3 * statistics.median(v):.2f}" for k, v in times.items())
            print(f"{len(mats)} x {name} {type_name} {rows}x{n} T={T}: {cells} ms", flush=True)


if __name__ == "__main__":
    main()
