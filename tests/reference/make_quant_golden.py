"""Regenerate tests/golden/quantize_golden.npz: llama.cpp's quantizer output for fixed inputs.

    .venv/bin/python -m tests.reference.make_quant_golden  # needs libggml (llama-cpp-python)

The file holds its own float32 inputs (`x256`, `x512`, `x96`: rows of that length, some sliced
from the catalogue models) and, for every type, the bytes of `ggml_quantize_chunk(type, rows,
imatrix=NULL)` under `<TYPE>_<row length>`; 256-weight block types skip the 96-long rows.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llamacpy.format import GGMLType, open_gguf
from llamacpy.hub import CATALOG, cache_dir
from llamacpy.quants import dequantize, get_quant
from tests.reference.ggml_lib import find_libggml, ggml_quantize

GOLDEN = Path(__file__).parent.parent / "golden" / "quantize_golden.npz"
TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "IQ4_NL", "IQ4_XS"]
# (catalogue model, tensor, row): real weights for the golden inputs
REAL_ROWS = [("gemma3-270m", "blk.0.attn_output.weight", 7),
             ("gemma3-270m", "token_embd.weight", 1000),
             ("qwen2.5-coder-0.5b", "blk.0.ffn_down.weight", 3),
             ("qwen2.5-coder-0.5b", "token_embd.weight", 4242),
             ("smollm2-135m", "blk.0.ffn_down.weight", 11),
             ("smollm2-135m", "blk.1.attn_q.weight", 100)]


def dequantized_rows(model, name: str, start: int, count: int) -> np.ndarray:
    """float32 [count, ne0]: rows start.. of a 2-D tensor, dequantizing only those rows."""
    t = model.tensors[name]
    blocks = t.blocks()[start : start + count]
    return dequantize(blocks, t.ggml_type, (t.ne[0], blocks.shape[0]))


def real_rows(length: int, count: int) -> np.ndarray:
    """`count` rows of `length` weights, each the start of one REAL_ROWS row (cycling)."""
    out = []
    for i in range(count):
        model_name, tensor, row = REAL_ROWS[i % len(REAL_ROWS)]
        model = open_gguf(cache_dir() / CATALOG[model_name].file)
        out.append(dequantized_rows(model, tensor, row + i, 1)[0, :length])
        model.close()
    return np.stack(out)


def synthetic_rows(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Rows of length n that reach the quantizers' corner cases."""
    def normal(scale=1.0):
        return rng.standard_normal(n) * scale

    sparse = np.zeros(n)
    sparse[rng.choice(n, n // 16, replace=False)] = rng.standard_normal(n // 16)
    outliers = normal(0.02)
    outliers[rng.choice(n, 3, replace=False)] = [1.5, -2.0, 0.8]
    half_zero = normal()
    half_zero[: n // 2] = 0
    signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    masked = normal() * (rng.random(n) < 0.05)  # zeros of both signs: -0.0 where x < 0
    halves = (rng.integers(-126, 126, n) + 0.5).astype(np.float32)
    toward = (halves * rng.choice([0, 1, 2], n)).astype(np.float32)
    halves = np.nextafter(halves, toward)  # k + 1/2 and the floats either side of it
    halves[::32] = 127  # Q8_0 scale 1: the halves reach roundf unchanged
    return [
        normal(), normal(), normal(0.02), normal(0.02), normal(30.0),
        rng.uniform(-1, 1, n), rng.uniform(0, 1, n), rng.uniform(-1, 0, n),
        rng.standard_t(2, n), rng.standard_t(1.2, n), outliers, sparse, half_zero,
        masked, halves, halves / 127, -np.zeros(n), np.zeros(n) * signs, np.zeros(n),
        np.full(n, 0.5), np.full(n, -0.5), np.full(n, 3.0),
        normal(1e-8), normal(1e-16), normal(1e5),
        signs * rng.uniform(0.5, 1.0, n), np.concatenate([np.abs(normal())[: n // 2],
                                                          -np.abs(normal())[n // 2 :]]),
        rng.integers(-16, 17, n) / 8.0,  # exact halves and quarters: rounding ties
        np.linspace(-1, 1, n),
    ]


def golden_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20261130)
    inputs = {}
    for n, n_sets, n_real in [(256, 4, 4), (512, 2, 2), (96, 3, 2)]:
        rows = np.stack([r for _ in range(n_sets) for r in synthetic_rows(rng, n)])
        inputs[f"x{n}"] = np.concatenate([rows, real_rows(n, n_real)]).astype(np.float32)
    return inputs


def main() -> None:
    if find_libggml() is None:
        raise SystemExit("libggml-base.so not found: install llama-cpp-python 0.3.36 first")
    golden = golden_inputs()
    for name in TYPES:
        q = get_quant(GGMLType[name])
        for key, x in list(golden.items()):
            if key.startswith("x") and x.shape[1] % q.block_size == 0:
                golden[f"{name}_{x.shape[1]}"] = ggml_quantize(x, q.ggml_type)
    np.savez_compressed(GOLDEN, **golden)
    print(f"{GOLDEN}: {GOLDEN.stat().st_size} bytes, {len(golden)} arrays")


if __name__ == "__main__":
    main()
