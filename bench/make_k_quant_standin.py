"""A 1.5B K-quant stand-in: random weights in Qwen2.5-1.5B's shapes, quantized to Q4_K_M by
llama.cpp's own quantizer, for prompt and decode speed where K-quants are used throughout.

    .venv/bin/python bench/make_k_quant_standin.py [--out PATH]

Qwen2.5-1.5B's shapes: hidden 1536, 28 layers, FFN 8960, 12 query / 2 KV heads of 128, q/k/v
biases, tied embedding, vocabulary 151936. Every row length (1536, 8960) is a multiple of 256,
so Q4_K_M gives Q4_K and Q6_K tensors only, unlike the catalogue's small models whose odd rows
fall back to Q5_0/Q8_0. The tokenizer and chat template are Qwen2.5-Coder-0.5B's (the same
151936-token vocabulary), copied from the catalogue model. Weights are N(0, 1/fan_in); the tied
embedding is N(0, 0.2) so logits are peaked as a trained model's are.

Steps: F16 GGUF written with gguf-py -> llama_model_quantize Q4_K_M (llama-cpp-python 0.3.36),
written to ~/.cache/llama.cpp/qwen2.5-1.5b-random-q4_k_m.gguf (not committed). Needs the catalogue
model qwen2.5-coder-0.5b (`llamacpy pull qwen2.5-coder-0.5b`) and llama-cpp-python; no torch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.reference.llamacpp import model_quantize  # noqa: E402

STANDIN = Path.home() / ".cache" / "llama.cpp" / "qwen2.5-1.5b-random-q4_k_m.gguf"
TOKENIZER_SOURCE = Path.home() / ".cache" / "llama.cpp" / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
LLAMA_FTYPE_MOSTLY_Q4_K_M = 15
SEED = 15
HIDDEN, LAYERS, FFN, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 1536, 28, 8960, 12, 2, 128, 151936


def copy_tokenizer(writer: gguf.GGUFWriter, source: Path) -> None:
    """Every tokenizer.* key of the source model, with its type."""
    reader = gguf.GGUFReader(source)
    for field in reader.fields.values():
        if not field.name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            sub = field.types[1]
            values = [field.contents(i) for i in range(len(field.data))] \
                if sub == gguf.GGUFValueType.STRING else list(field.contents())
            writer.add_key_value(field.name, values, kind, sub_type=sub)
        else:
            writer.add_key_value(field.name, field.contents(), kind)


def random_tensors(rng: np.random.Generator):
    """(name, float16 array [rows, n]) in Qwen2.5-1.5B's shapes, N(0, 1/n)."""
    def w(rows, n):
        return (rng.standard_normal((rows, n), dtype=np.float32) / np.sqrt(n)).astype(np.float16)

    yield "token_embd.weight", (rng.standard_normal((VOCAB, HIDDEN), dtype=np.float32)
                                * 0.2).astype(np.float16)
    yield "output_norm.weight", np.ones(HIDDEN, np.float32)
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    for i in range(LAYERS):
        b = f"blk.{i}."
        yield b + "attn_norm.weight", np.ones(HIDDEN, np.float32)
        yield b + "ffn_norm.weight", np.ones(HIDDEN, np.float32)
        for name, rows in (("attn_q", q), ("attn_k", kv), ("attn_v", kv)):
            yield b + name + ".weight", w(rows, HIDDEN)
            yield b + name + ".bias", (rng.standard_normal(rows, dtype=np.float32) * 0.02)
        yield b + "attn_output.weight", w(HIDDEN, q)
        yield b + "ffn_gate.weight", w(FFN, HIDDEN)
        yield b + "ffn_up.weight", w(FFN, HIDDEN)
        yield b + "ffn_down.weight", w(HIDDEN, FFN)


def write_f16(path: Path) -> None:
    writer = gguf.GGUFWriter(path, "qwen2")
    writer.add_name("Qwen2.5 1.5B random (K-quant stand-in)")
    writer.add_block_count(LAYERS)
    writer.add_context_length(32768)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(1000000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    copy_tokenizer(writer, TOKENIZER_SOURCE)
    for name, data in random_tensors(np.random.default_rng(SEED)):
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=STANDIN)
    args = ap.parse_args()
    if not TOKENIZER_SOURCE.exists():
        sys.exit(f"needs {TOKENIZER_SOURCE}: run `llamacpy pull qwen2.5-coder-0.5b` first")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out.parent) as tmp:
        f16 = Path(tmp) / "f16.gguf"
        t0 = time.perf_counter()
        write_f16(f16)
        print(f"F16 written in {time.perf_counter() - t0:.0f} s ({f16.stat().st_size >> 20} MiB)")
        t0 = time.perf_counter()
        model_quantize(f16, args.out, LLAMA_FTYPE_MOSTLY_Q4_K_M)
        print(f"Q4_K_M {args.out} in {time.perf_counter() - t0:.0f} s "
              f"({args.out.stat().st_size >> 20} MiB)")


if __name__ == "__main__":
    main()
