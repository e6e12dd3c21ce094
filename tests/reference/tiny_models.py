"""Small F32/F16 GGUF models cut deterministically out of the real catalogue models.

Their weights are crops of real (dequantized) tensors, so they quantize like real models while
staying small enough for CI. Same inputs -> same bytes: golden files record each input's sha256.

- `llama-f32`: SmolLM2 crops, 8 layers, n_embd 320 (not a multiple of 256: fallbacks), gqa 5,
  tied embeddings.
- `qwen2-f16`: Qwen2.5-Coder crops, 8 layers, n_embd 512 (multiple of 256), gqa 4, separate
  output.weight, attention biases.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from llamacpy.format import GGMLType, TensorToWrite, ValueType, open_gguf, write_gguf
from llamacpy.hub import pull
from llamacpy.quants import dequantize


@dataclass(frozen=True)
class TinySpec:
    source: str  # catalogue model
    arch: str
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_vocab: int
    dtype: GGMLType


SPECS = {
    "llama-f32": TinySpec("smollm2-135m", "llama", 8, 320, 768, 5, 1, 64, 2048, GGMLType.F32),
    "qwen2-f16": TinySpec("qwen2.5-coder-0.5b", "qwen2", 8, 512, 1024, 8, 2, 64, 2048,
                          GGMLType.F16),
}
KEEP_KEYS = ("context_length", "rope.freq_base", "attention.layer_norm_rms_epsilon")


def crop(src, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The leading block of a real tensor, dequantized exactly (numpy order shape)."""
    t = src.tensor(name)
    n_rows = shape[0] if len(shape) == 2 else 1
    raw = t.blocks()[:n_rows]
    full = dequantize(raw, t.ggml_type, (t.ne[0], n_rows))
    return np.ascontiguousarray(full[..., : shape[-1]].reshape(shape), dtype=np.float32)


def tensor_shapes(s: TinySpec, names: list[str]) -> dict[str, tuple[int, ...]]:
    """Numpy-order shape of every tensor the tiny model keeps."""
    kv = s.n_head_kv * s.head_dim
    per_layer = {
        "attn_norm.weight": (s.n_embd,), "ffn_norm.weight": (s.n_embd,),
        "attn_q.weight": (s.n_head * s.head_dim, s.n_embd), "attn_k.weight": (kv, s.n_embd),
        "attn_v.weight": (kv, s.n_embd), "attn_output.weight": (s.n_embd, s.n_head * s.head_dim),
        "ffn_gate.weight": (s.n_ff, s.n_embd), "ffn_up.weight": (s.n_ff, s.n_embd),
        "ffn_down.weight": (s.n_embd, s.n_ff), "attn_q.bias": (s.n_head * s.head_dim,),
        "attn_k.bias": (kv,), "attn_v.bias": (kv,),
    }
    shapes = {"token_embd.weight": (s.n_vocab, s.n_embd), "output_norm.weight": (s.n_embd,)}
    if "output.weight" in names:
        shapes["output.weight"] = (s.n_vocab, s.n_embd)
    for i in range(s.n_layer):
        for suffix, shape in per_layer.items():
            if f"blk.{i}.{suffix}" in names:
                shapes[f"blk.{i}.{suffix}"] = shape
    return shapes


def build(name: str, path: Path) -> Path:
    """Write tiny model `name` to `path` (F32 or F16 2-D weights, F32 norms and biases)."""
    s = SPECS[name]
    src = open_gguf(pull(s.source, quiet=True))
    a = s.arch
    metadata = {"general.architecture": a, "general.name": f"tiny-{name}",
                f"{a}.block_count": s.n_layer, f"{a}.embedding_length": s.n_embd,
                f"{a}.feed_forward_length": s.n_ff, f"{a}.attention.head_count": s.n_head,
                f"{a}.attention.head_count_kv": s.n_head_kv,
                f"{a}.rope.dimension_count": s.head_dim, f"{a}.vocab_size": s.n_vocab,
                "general.file_type": 0 if s.dtype == GGMLType.F32 else 1}
    for key in KEEP_KEYS:
        metadata[f"{a}.{key}"] = src.require(f"{a}.{key}")
    tensors = []
    for tname, shape in tensor_shapes(s, list(src.tensors)).items():
        data = crop(src, tname, shape)
        ttype = s.dtype if len(shape) == 2 else GGMLType.F32
        out = data.astype(np.float16) if ttype == GGMLType.F16 else data
        tensors.append(TensorToWrite(tname, ttype, tuple(reversed(shape)),
                                     lambda out=out: out))
    path.parent.mkdir(parents=True, exist_ok=True)
    # llama.cpp reads every integer hyper-parameter as uint32
    write_gguf(path, metadata, tensors,
               value_types={k: ValueType.UINT32 for k, v in metadata.items() if type(v) is int})
    src.close()
    return path


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
