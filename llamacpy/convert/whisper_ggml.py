"""whisper.cpp's own model files (`ggml-*.bin`, the legacy 'ggml' container) read into our
whisper layout (docs/WHISPER.md), in memory, so `whisper-cli -m ggml-base.en.bin` runs them.

The file (whisper.cpp src/whisper.cpp whisper_model_load; written by models/convert-pt-to-ggml.py,
convert-h5-to-ggml.py and whisper-quantize), little endian: u32 magic 0x67676d6c, eleven i32
hparams (n_vocab, n_audio_ctx, n_audio_state, n_audio_head, n_audio_layer, n_text_ctx,
n_text_state, n_text_head, n_text_layer, n_mels, ftype + 1000 * quantization version), the mel
filters (i32 n_mel, i32 n_fft, f32 [n_mel * n_fft]), the vocabulary (i32 n, then n times i32
length + raw bytes), then tensors to the end of the file: i32 n_dims, i32 name length, i32 ggml
type, i32 ne[n_dims], the name, the data (ggml rows, no padding). Ids the vocabulary does not
list (the special and timestamp tokens) get OpenAI's token texts, at whisper.cpp's ids.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import BinaryIO

import numpy as np

from ..audio.formats import LANGUAGES
from ..format import GGMLType, GGUFError, GGUFFile, GGUFTensor
from ..format.constants import block_geometry, type_name
from ..tokenizer.unicode import BYTE_TO_CHAR

GGML_MAGIC = 0x67676D6C  # "ggml"
QNT_VERSION_FACTOR = 1000  # ggml.h GGML_QNT_VERSION_FACTOR
HPARAMS = ("n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
           "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype")
# whisper_process_logits' non_speech_tokens (suppressed as they are and after a space)
_NON_SPEECH_SYMBOLS = (
    '" # ( ) * + / : ; < = > @ [ \\ ] ^ _ ` { | } ~ 「 」 『 』 << >> <<< >>> -- --- -( -[ (\' ("'
    " (( )) ((( ))) [[ ]] {{ }} ♪♪ ♪♪♪ ♩ ♪ ♫ ♬ ♭ ♮ ♯")
NON_SPEECH = _NON_SPEECH_SYMBOLS.split()
# whisper.cpp's ASR_TENSOR_NAMES (whisper-arch.h) -> ours; N is the block number
_GLOBAL = {
    "encoder.positional_embedding": "enc.position_embd.weight",
    "encoder.ln_post": "enc.output_norm", "decoder.ln": "dec.output_norm",
    "decoder.positional_embedding": "dec.position_embd.weight",
    "decoder.token_embedding.weight": "dec.token_embd.weight",
    "encoder.conv1": "enc.conv1", "encoder.conv2": "enc.conv2",
}
_BLOCK = {"attn_ln": "attn_norm", "attn.query": "attn_q", "attn.key": "attn_k",
          "attn.value": "attn_v", "attn.out": "attn_output", "cross_attn_ln": "cross_attn_norm",
          "cross_attn.query": "cross_attn_q", "cross_attn.key": "cross_attn_k",
          "cross_attn.value": "cross_attn_v", "cross_attn.out": "cross_attn_output",
          "mlp_ln": "ffn_norm", "mlp.0": "ffn_up", "mlp.2": "ffn_down"}
_BLOCK_RE = re.compile(r"(encoder|decoder)\.blocks\.(\d+)\.(.+)\.(weight|bias)")


class _Metadata(dict):
    """Metadata whose BPE merges are worked out on first use (seconds of work, and only a
    --prompt needs them)."""

    def __contains__(self, key) -> bool:
        return super().__contains__(key) or key == MERGES_KEY

    def __missing__(self, key):
        if key != MERGES_KEY:
            raise KeyError(key)
        self[key] = bpe_merges(self["tokenizer.ggml.tokens"][:self["whisper.token.eot"]])
        return self[key]

    def get(self, key, default=None):
        return self[key] if key in self else default  # noqa: SIM401 (dict.get skips __missing__)


MERGES_KEY = "tokenizer.ggml.merges"


def bpe_merges(tokens: list[str]) -> list[str]:
    """GPT-2's merges from a vocabulary in rank order (the file keeps no merges): each token's
    last merge is what byte-pair encoding of its text with the earlier tokens leaves as two
    parts (as tiktoken's ranks are turned into merges). Gives GPT-2's 50000 merges exactly."""
    rank = {t: i for i, t in enumerate(tokens)}
    merges = []
    for r, tok in enumerate(tokens):
        parts = list(tok)
        while len(parts) > 2:
            best, at = r, -1
            for i in range(len(parts) - 1):
                k = rank.get(parts[i] + parts[i + 1], r)
                if k < best:
                    best, at = k, i
            if at < 0:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) == 2:
            merges.append(f"{parts[0]} {parts[1]}")
    return merges


class GGMLWhisperFile(GGUFFile):
    """A whisper.cpp model file held in memory behind GGUFFile's interface (metadata keys and
    tensor names of our whisper GGUF), so WhisperModel loads it unchanged."""

    def __init__(self, path: str, metadata: dict, tensors: dict[str, GGUFTensor],
                 mel_filters: np.ndarray):
        self.path, self.load_mode, self.locked = path, "none", 0
        self.metadata, self.value_types, self.tensors = _Metadata(metadata), {}, tensors
        self.parts, self.version, self.alignment = [], 0, 1
        self.mel_filters = mel_filters  # float32 [n_mel, n_fft // 2 + 1], as the file holds them


def is_ggml_whisper(path: str | Path) -> bool:
    """True when the file starts with the legacy 'ggml' magic (whisper.cpp's model files)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return len(head) == 4 and struct.unpack("<I", head)[0] == GGML_MAGIC


class _In:
    """Little-endian reads that name the file and offset when it ends too soon."""

    def __init__(self, f: BinaryIO, path: str):
        self.f, self.path = f, path

    def fail(self, what: str) -> GGUFError:
        return GGUFError(f"{self.path}: {what} (at byte offset {self.f.tell()})")

    def bytes(self, n: int, what: str) -> bytes:
        b = self.f.read(n)
        if len(b) != n:
            raise self.fail(f"truncated: {what} needs {n} bytes, {len(b)} left")
        return b

    def i32(self, n: int, what: str) -> tuple[int, ...]:
        return struct.unpack(f"<{n}i", self.bytes(4 * n, what))


def _header(r: _In) -> tuple[dict[str, int], np.ndarray, list[bytes]]:
    """hparams, mel filters and vocabulary, checked the way whisper_model_load checks them."""
    if r.i32(1, "magic")[0] != GGML_MAGIC:
        raise r.fail("not a whisper.cpp ggml model (bad magic)")
    hp = dict(zip(HPARAMS, r.i32(len(HPARAMS), "hparams")))
    if hp["n_text_state"] != hp["n_audio_state"] or min(hp.values()) < 0 or \
            min(v for k, v in hp.items() if k != "ftype") <= 0:
        raise r.fail(f"implausible hparams {hp}")
    n_mel, n_fft = r.i32(2, "mel filter sizes")
    if not (0 < n_mel <= 512 and 0 < n_fft <= 4096):
        raise r.fail(f"implausible mel filter size {n_mel} x {n_fft}")
    filters = np.frombuffer(r.bytes(4 * n_mel * n_fft, "mel filters"), "<f4")
    (n_words,) = r.i32(1, "vocabulary size")
    if not 0 <= n_words <= hp["n_vocab"]:
        raise r.fail(f"vocabulary of {n_words} words for n_vocab {hp['n_vocab']}")
    words = [r.bytes(_token_length(r), "token") for _ in range(n_words)]
    return hp, filters.reshape(n_mel, n_fft).copy(), words


def _token_length(r: _In) -> int:
    (n,) = r.i32(1, "token length")
    if not 0 <= n < 1024:
        raise r.fail(f"bad token length {n}")
    return n


def our_tensor_name(name: str) -> str | None:
    """whisper.cpp's tensor name in our layout, or None for a name whisper.cpp would refuse."""
    stem, _, kind = name.rpartition(".")
    if name in _GLOBAL:
        return _GLOBAL[name]
    if stem in _GLOBAL and kind in ("weight", "bias"):
        return f"{_GLOBAL[stem]}.{kind}"
    m = _BLOCK_RE.fullmatch(name)
    if m is None or m[3] not in _BLOCK or (m[1] == "encoder" and m[3].startswith("cross")):
        return None
    return f"{m[1][:3]}.blk.{m[2]}.{_BLOCK[m[3]]}.{m[4]}"


def _tensors(r: _In) -> dict[str, GGUFTensor]:
    """Every tensor to the end of the file, each read into its own (aligned) array."""
    out: dict[str, GGUFTensor] = {}
    while head := r.f.read(12):
        if len(head) != 12:
            raise r.fail("truncated tensor header")
        n_dims, length, ttype = struct.unpack("<3i", head)
        if not (1 <= n_dims <= 4 and 0 < length < 1024):
            raise r.fail(f"bad tensor header (n_dims {n_dims}, name length {length})")
        ne = r.i32(n_dims, "tensor shape")
        name = r.bytes(length, "tensor name").decode("utf-8", "replace")
        ours = our_tensor_name(name)
        if ours is None:
            raise r.fail(f"unknown tensor '{name}' in model file")
        try:
            block, block_bytes = block_geometry(ttype)
        except (KeyError, ValueError):
            raise r.fail(f"tensor '{name}' has {type_name(ttype)}") from None
        if ours.endswith(("conv1.bias", "conv2.bias")):
            ne = (ne[0] * ne[1],)  # stored as [n, 1]: a plain vector for us
        if any(n <= 0 for n in ne) or ne[0] % block:
            raise r.fail(f"tensor '{name}' has an invalid shape {list(ne)} for "
                         f"{type_name(ttype)}")
        nbytes = int(np.prod(ne, dtype=np.int64)) // block * block_bytes
        data = np.empty(nbytes, np.uint8)
        offset = r.f.tell()
        if r.f.readinto(memoryview(data)) != nbytes:
            raise r.fail(f"truncated: tensor '{name}' needs {nbytes} bytes")
        out[ours] = GGUFTensor(ours, GGMLType(ttype), tuple(ne), offset, data)
    return out


def _token_texts(hp: dict[str, int], words: list[bytes], sp: dict[str, int]) -> list[str]:
    """The vocabulary as byte-level BPE texts (GPT-2 characters); ids past the file's words
    take OpenAI's special token texts at whisper.cpp's ids."""
    n_lang = len(sp["languages"])
    names = {sp["eot"]: "<|endoftext|>", sp["sot"]: "<|startoftranscript|>",
             sp["translate"]: "<|translate|>", sp["transcribe"]: "<|transcribe|>",
             sp["sot_lm"]: "<|startoflm|>", sp["sot_prev"]: "<|startofprev|>",
             sp["no_speech"]: "<|nocaptions|>", sp["no_timestamps"]: "<|notimestamps|>"}
    names |= {sp["sot"] + 1 + i: f"<|{LANGUAGES[i]}|>" for i in range(min(n_lang, len(LANGUAGES)))}
    texts = ["".join(BYTE_TO_CHAR[b] for b in w) for w in words]
    for i in range(len(words), hp["n_vocab"]):
        if i >= sp["timestamp_begin"]:
            texts.append(f"<|{(i - sp['timestamp_begin']) * 0.02:.2f}|>")
        else:
            texts.append(names.get(i, f"<|extra_token_{i}|>"))
    return texts


def special_tokens(n_vocab: int) -> dict:
    """whisper_vocab's special ids for a vocabulary size (is_multilingual, num_languages)."""
    multilingual = n_vocab >= 51865
    n_lang = n_vocab - 51765 - int(multilingual)
    shift, dt = int(multilingual), (n_lang - 98 if multilingual else 0)
    sp = {"eot": 50256 + shift, "sot": 50257 + shift, "translate": 50357 + dt,
          "transcribe": 50358 + dt, "sot_lm": 50359 + dt, "sot_prev": 50360 + dt,
          "no_speech": 50361 + dt, "no_timestamps": 50362 + dt, "timestamp_begin": 50363 + dt}
    sp["languages"] = list(range(sp["sot"] + 1, sp["sot"] + 1 + n_lang))
    sp["multilingual"] = multilingual
    return sp


def _non_speech(texts: list[str]) -> list[int]:
    """whisper.cpp's suppress_nst set: each symbol alone and after a space, " -" and " '"."""
    ids = {t: i for i, t in enumerate(texts)}
    as_bpe = lambda s: "".join(BYTE_TO_CHAR[b] for b in s.encode("utf-8"))
    wanted = [as_bpe(p + s) for s in NON_SPEECH for p in ("", " ")] + [as_bpe(" -"),
                                                                        as_bpe(" '")]
    return sorted({ids[w] for w in wanted if w in ids})


def _metadata(hp: dict[str, int], words: list[bytes], name: str) -> dict:
    sp = special_tokens(hp["n_vocab"])
    texts = _token_texts(hp, words, sp)
    space = "".join(BYTE_TO_CHAR[b] for b in b" ")
    return {
        "general.architecture": "whisper", "general.name": name,
        "general.file_type": hp["ftype"] % QNT_VERSION_FACTOR,
        "whisper.n_mels": hp["n_mels"], "whisper.encoder.context_length": hp["n_audio_ctx"],
        "whisper.decoder.context_length": hp["n_text_ctx"],
        "whisper.embedding_length": hp["n_audio_state"],
        "whisper.feed_forward_length": 4 * hp["n_audio_state"],
        "whisper.encoder.block_count": hp["n_audio_layer"],
        "whisper.decoder.block_count": hp["n_text_layer"],
        "whisper.attention.head_count": hp["n_audio_head"],
        "whisper.decoder.attention.head_count": hp["n_text_head"],
        "whisper.attention.layer_norm_epsilon": 1e-5,
        "whisper.multilingual": sp["multilingual"],
        **{f"whisper.token.{k}": v for k, v in sp.items() if isinstance(v, int)
           and not isinstance(v, bool)},
        "whisper.suppress_tokens": _non_speech(texts),
        "whisper.suppress_tokens_begin": [texts.index(space), sp["eot"]],
        "whisper.language_tokens": sp["languages"],
        "whisper.alignment_heads": [],
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": texts,
        "tokenizer.ggml.token_type": [3 if i >= sp["eot"] else 1 for i in range(len(texts))],
        "tokenizer.ggml.bos_token_id": sp["sot"], "tokenizer.ggml.eos_token_id": sp["eot"],
    }


def load_ggml_whisper(path: str | Path) -> GGMLWhisperFile:
    """Read a whisper.cpp ggml-*.bin into memory as our whisper layout; GGUFError on a file
    that is not one, is truncated, or holds tensors whisper.cpp would refuse."""
    path = str(path)
    with open(path, "rb") as f:
        r = _In(f, path)
        hp, filters, words = _header(r)
        tensors = _tensors(r)
    if not tensors:
        raise GGUFError(f"{path}: the model file holds no tensors")
    name = Path(path).stem.removeprefix("ggml-")
    return GGMLWhisperFile(path, _metadata(hp, words, name), tensors, filters)


def open_whisper_file(path: str | Path) -> GGUFFile:
    """A whisper model file of either kind: whisper.cpp's ggml-*.bin (read into memory) or
    our GGUF (mapped)."""
    from ..format import open_gguf

    return load_ggml_whisper(path) if is_ggml_whisper(path) else open_gguf(path)
