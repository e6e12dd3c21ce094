"""CTranslate2 whisper folders (model.bin, vocabulary.txt, config.json) -> our whisper GGUF.

model.bin (binary version 6, CTranslate2 python/ctranslate2/specs/model_spec.py `_serialize`):
u32 version, string spec name, u32 spec revision, u32 n_variables, then per variable a string
name, u8 rank, u32 dims[rank], u8 dtype id, u32 byte count and the raw data; then u32 n_aliases
and (alias, target) string pairs. A string is a u16 length (with its NUL) and the bytes + NUL.
The GGUF layout written here is documented in docs/WHISPER.md.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from ..format.constants import GGMLType
from ..format.writer import TensorToWrite, write_gguf

# CTranslate2 DataType ids (include/ctranslate2/types.h)
CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: None}
CT2_GELU = 3  # ctranslate2.specs.common_spec.Activation.GELU
SPECIAL_NAMES = {  # our whisper.token.* key -> the token's text in the vocabulary
    "sot": "<|startoftranscript|>", "eot": "<|endoftext|>", "translate": "<|translate|>",
    "transcribe": "<|transcribe|>", "sot_lm": "<|startoflm|>", "sot_prev": "<|startofprev|>",
    "no_speech": "<|nocaptions|>", "no_timestamps": "<|notimestamps|>",
    "timestamp_begin": "<|0.00|>",
}


class CT2Error(ValueError):
    pass


class _Reader:
    def __init__(self, buf: memoryview, path: str):
        self.buf, self.pos, self.path = buf, 0, path

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.buf):
            raise CT2Error(f"{self.path}: truncated at byte {self.pos} (wanted {n} more)")
        self.pos += n
        return self.buf[self.pos - n:self.pos]

    def unpack(self, fmt: str):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt)))

    def string(self) -> str:
        (n,) = self.unpack("H")
        return bytes(self.take(n)).rstrip(b"\0").decode("utf-8")


def read_model_bin(path: str | Path) -> tuple[str, dict[str, np.ndarray]]:
    """(spec name, {variable name: array}) of a CTranslate2 model.bin; aliases point at their
    target's array. Arrays are views of the mapped file."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    r = _Reader(memoryview(raw), str(path))
    (version,) = r.unpack("I")
    if version != 6:
        raise CT2Error(f"{path}: CTranslate2 binary version {version}; only version 6 is read")
    spec, _revision, n = r.string(), *r.unpack("II")
    variables: dict[str, np.ndarray] = {}
    for _ in range(n):
        name = r.string()
        (rank,) = r.unpack("B")
        dims = r.unpack(f"{rank}I")
        dtype_id, nbytes = r.unpack("BI")
        dtype = CT2_DTYPES.get(dtype_id)
        if dtype is None:
            raise CT2Error(f"{path}: variable '{name}' has unsupported dtype id {dtype_id}")
        start = r.pos
        r.take(nbytes)
        variables[name] = raw[start:start + nbytes].view(dtype).reshape(dims)
    (n_alias,) = r.unpack("I")
    for _ in range(n_alias):
        alias, target = r.string(), r.string()
        variables[alias] = variables[target]
    return spec, variables


def _scalar(v: dict, name: str) -> int:
    if name not in v:
        raise CT2Error(f"model.bin has no '{name}'")
    return int(v[name].reshape(-1)[0])


def _check_whisper(spec: str, v: dict) -> None:
    if spec != "WhisperSpec":
        raise CT2Error(f"model.bin holds a {spec}, not a WhisperSpec")
    expect = {"decoder/pre_norm": 1, "decoder/scale_embeddings": 0, "decoder/alibi": 0,
              "decoder/activation": CT2_GELU}
    for name, want in expect.items():
        if name in v and _scalar(v, name) != want:
            raise CT2Error(f"model.bin: {name} = {_scalar(v, name)}, whisper has {want}")


class _Tensors:
    """Collects GGUF tensors: matrices keep the source type (F16/F32), vectors become F32."""

    def __init__(self):
        self.items: list[TensorToWrite] = []

    def add(self, name: str, a: np.ndarray, force_f32: bool = False) -> None:
        a = np.asarray(a)
        if a.dtype not in (np.float16, np.float32):
            raise CT2Error(f"tensor {name}: {a.dtype} weights are not supported (float16/32 only)")
        if a.ndim == 1 or force_f32:
            a = a.astype(np.float32)
        kind = GGMLType.F16 if a.dtype == np.float16 else GGMLType.F32
        self.items.append(TensorToWrite(name, kind, tuple(reversed(a.shape)),
                                        lambda a=a: np.ascontiguousarray(a)))

    def norm(self, name: str, v: dict, src: str) -> None:
        self.add(f"{name}.weight", v[f"{src}/gamma"])
        self.add(f"{name}.bias", v[f"{src}/beta"])

    def linear(self, name: str, w: np.ndarray, b: np.ndarray | None) -> None:
        self.add(f"{name}.weight", w)
        if b is not None and np.any(b):  # whisper's K projections have no bias (stored as 0)
            self.add(f"{name}.bias", b)


def _split(v: dict, src: str, parts: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A fused projection (Q|K|V or K|V stacked on the output axis) split into its parts."""
    w, b = v[f"{src}/weight"], v[f"{src}/bias"]
    n = w.shape[0] // parts
    return [(w[i * n:(i + 1) * n], b[i * n:(i + 1) * n]) for i in range(parts)]


def _block(t: _Tensors, v: dict, src: str, dst: str, cross: bool) -> None:
    sa = f"{src}/self_attention"
    t.norm(f"{dst}.attn_norm", v, f"{sa}/layer_norm")
    for x, (w, b) in zip("qkv", _split(v, f"{sa}/linear_0", 3)):
        t.linear(f"{dst}.attn_{x}", w, b)
    t.linear(f"{dst}.attn_output", v[f"{sa}/linear_1/weight"], v[f"{sa}/linear_1/bias"])
    if cross:
        ca = f"{src}/attention"
        t.norm(f"{dst}.cross_attn_norm", v, f"{ca}/layer_norm")
        t.linear(f"{dst}.cross_attn_q", v[f"{ca}/linear_0/weight"], v[f"{ca}/linear_0/bias"])
        for x, (w, b) in zip("kv", _split(v, f"{ca}/linear_1", 2)):
            t.linear(f"{dst}.cross_attn_{x}", w, b)
        t.linear(f"{dst}.cross_attn_output", v[f"{ca}/linear_2/weight"],
                 v[f"{ca}/linear_2/bias"])
    t.norm(f"{dst}.ffn_norm", v, f"{src}/ffn/layer_norm")
    t.linear(f"{dst}.ffn_up", v[f"{src}/ffn/linear_0/weight"], v[f"{src}/ffn/linear_0/bias"])
    t.linear(f"{dst}.ffn_down", v[f"{src}/ffn/linear_1/weight"], v[f"{src}/ffn/linear_1/bias"])


def _n_layers(v: dict, side: str) -> int:
    n = 0
    while f"{side}/layer_{n}/ffn/linear_0/weight" in v:
        n += 1
    return n


def whisper_tensors(v: dict) -> list[TensorToWrite]:
    """Our GGUF tensors from CTranslate2 whisper variables (docs/WHISPER.md names them)."""
    t = _Tensors()
    for c in ("conv1", "conv2"):  # [out, in, kernel] as in PyTorch; ggml ne = (kernel, in, out)
        t.add(f"enc.{c}.weight", v[f"encoder/{c}/weight"])
        t.add(f"enc.{c}.bias", v[f"encoder/{c}/bias"])
    t.add("enc.position_embd.weight", v["encoder/position_encodings/encodings"], force_f32=True)
    for il in range(_n_layers(v, "encoder")):
        _block(t, v, f"encoder/layer_{il}", f"enc.blk.{il}", cross=False)
    t.norm("enc.output_norm", v, "encoder/layer_norm")
    t.add("dec.token_embd.weight", v["decoder/embeddings/weight"])
    t.add("dec.position_embd.weight", v["decoder/position_encodings/encodings"], force_f32=True)
    for il in range(_n_layers(v, "decoder")):
        _block(t, v, f"decoder/layer_{il}", f"dec.blk.{il}", cross=True)
    t.norm("dec.output_norm", v, "decoder/layer_norm")
    if "decoder/projection/weight" in v and v["decoder/projection/weight"] is not \
            v["decoder/embeddings/weight"]:
        raise CT2Error("model.bin: decoder/projection is not tied to the embeddings")
    return t.items


def read_vocabulary(folder: Path) -> list[str]:
    """vocabulary.txt (one token a line) or vocabulary.json (a list), as CTranslate2 writes."""
    if (folder / "vocabulary.json").exists():
        return json.loads((folder / "vocabulary.json").read_text("utf-8"))
    if (folder / "vocabulary.txt").exists():
        return (folder / "vocabulary.txt").read_text("utf-8").split("\n")[:-1]
    raise CT2Error(f"{folder}: no vocabulary.txt or vocabulary.json")


def read_merges(folder: Path) -> list[str]:
    """BPE merges from tokenizer.json when the folder has one (needed to encode a prompt)."""
    if not (folder / "tokenizer.json").exists():
        return []
    merges = json.loads((folder / "tokenizer.json").read_text("utf-8"))["model"]["merges"]
    return [m if isinstance(m, str) else " ".join(m) for m in merges]


def whisper_metadata(v: dict, tokens: list[str], merges: list[str], config: dict,
                     name: str) -> dict:
    """general.*, whisper.* and tokenizer.ggml.* keys (docs/WHISPER.md)."""
    n_vocab, n_embd = v["decoder/embeddings/weight"].shape
    if len(tokens) != n_vocab:
        raise CT2Error(f"vocabulary has {len(tokens)} tokens, the embeddings {n_vocab}")
    ids = {t: i for i, t in enumerate(tokens)}
    missing = [s for s in SPECIAL_NAMES.values() if s not in ids]
    if missing:
        raise CT2Error(f"vocabulary lacks the special tokens {missing}")
    special = {f"whisper.token.{k}": ids[s] for k, s in SPECIAL_NAMES.items()}
    n_head = _scalar(v, "encoder/num_heads")
    md = {
        "general.architecture": "whisper", "general.name": name,
        "general.file_type": 1 if v["decoder/embeddings/weight"].dtype == np.float16 else 0,
        "whisper.n_mels": int(v["encoder/conv1/weight"].shape[1]),
        "whisper.encoder.context_length": int(v["encoder/position_encodings/encodings"].shape[0]),
        "whisper.decoder.context_length": int(v["decoder/position_encodings/encodings"].shape[0]),
        "whisper.embedding_length": int(n_embd),
        "whisper.feed_forward_length": int(v["encoder/layer_0/ffn/linear_0/weight"].shape[0]),
        "whisper.encoder.block_count": _n_layers(v, "encoder"),
        "whisper.decoder.block_count": _n_layers(v, "decoder"),
        "whisper.attention.head_count": n_head,
        "whisper.decoder.attention.head_count": _scalar(v, "decoder/num_heads"),
        "whisper.attention.layer_norm_epsilon": 1e-5,
        # multilingual models have 51865+ tokens, the .en ones 51864 (whisper.cpp is_multilingual)
        "whisper.multilingual": n_vocab >= 51865,
        **special,
        "whisper.suppress_tokens": [int(i) for i in config.get("suppress_ids", [])],
        "whisper.suppress_tokens_begin": [int(i) for i in config.get("suppress_ids_begin", [])],
        "whisper.language_tokens": [int(i) for i in config.get("lang_ids", [])],
        "whisper.alignment_heads": [int(i) for p in config.get("alignment_heads", []) for i in p],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",  # tiktoken gpt2 regex
        "tokenizer.ggml.tokens": tokens,
        # control tokens are the <|...|> ones from <|endoftext|> on (CONTROL = 3, NORMAL = 1)
        "tokenizer.ggml.token_type": [3 if i >= ids["<|endoftext|>"] else 1
                                      for i in range(n_vocab)],
        "tokenizer.ggml.bos_token_id": ids["<|startoftranscript|>"],
        "tokenizer.ggml.eos_token_id": ids["<|endoftext|>"],
    }
    if merges:
        md["tokenizer.ggml.merges"] = merges
    return md


def convert_ctranslate2_whisper(folder: str | Path, outfile: str | Path,
                                name: str = "whisper") -> Path:
    """Convert a CTranslate2 whisper folder once into our whisper GGUF at `outfile`."""
    folder = Path(folder)
    spec, v = read_model_bin(folder / "model.bin")
    _check_whisper(spec, v)
    cfg_path = folder / "config.json"
    config = json.loads(cfg_path.read_text("utf-8")) if cfg_path.exists() else {}
    md = whisper_metadata(v, read_vocabulary(folder), read_merges(folder), config, name)
    write_gguf(outfile, md, whisper_tensors(v))
    return Path(outfile)
