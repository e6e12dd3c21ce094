"""WhisperForConditionalGeneration -> our `whisper` GGUF (docs/WHISPER.md), and the way back.

The Hugging Face names map one to one onto ours (no fused projections, unlike CTranslate2); the
output projection `proj_out` is tied to the token embeddings and not written. Metadata comes
from config.json and generation_config.json (suppress lists, language ids, alignment heads).
`hf_state_dict` / `hf_config` turn one of our GGUFs back into transformers' names and config,
which the reference tests load into transformers' own model.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from .base import Converter
from .kv import KV
from .safetensors import ConvertError
from .vocab import CONTROL, NORMAL, _hf_tokenizer

SPECIAL = {  # our whisper.token.* key -> the token's text
    "sot": "<|startoftranscript|>", "eot": "<|endoftext|>", "translate": "<|translate|>",
    "transcribe": "<|transcribe|>", "sot_lm": "<|startoflm|>", "sot_prev": "<|startofprev|>",
    "no_speech": "<|nocaptions|>", "no_timestamps": "<|notimestamps|>",
}
ENC, DEC = "model.encoder", "model.decoder"
GLOBAL_MAP = {
    f"{ENC}.conv1": "enc.conv1", f"{ENC}.conv2": "enc.conv2",
    f"{ENC}.embed_positions": "enc.position_embd", f"{ENC}.layer_norm": "enc.output_norm",
    f"{DEC}.embed_tokens": "dec.token_embd", f"{DEC}.embed_positions": "dec.position_embd",
    f"{DEC}.layer_norm": "dec.output_norm",
}
BLOCK_MAP = {  # HF block part -> ours, for both stacks
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.out_proj": "attn_output", "self_attn_layer_norm": "attn_norm",
    "fc1": "ffn_up", "fc2": "ffn_down", "final_layer_norm": "ffn_norm",
}
CROSS_MAP = {
    "encoder_attn.q_proj": "cross_attn_q", "encoder_attn.k_proj": "cross_attn_k",
    "encoder_attn.v_proj": "cross_attn_v", "encoder_attn.out_proj": "cross_attn_output",
    "encoder_attn_layer_norm": "cross_attn_norm",
}


def name_map(n_enc: int, n_dec: int) -> dict[str, str]:
    """HF module name -> our tensor stem (append .weight / .bias)."""
    names = dict(GLOBAL_MAP)
    for side, ours, n, parts in ((ENC, "enc", n_enc, BLOCK_MAP),
                                 (DEC, "dec", n_dec, BLOCK_MAP | CROSS_MAP)):
        for i in range(n):
            names |= {f"{side}.layers.{i}.{hf}": f"{ours}.blk.{i}.{gg}" for hf, gg in parts.items()}
    return names


def timestamp_name(i: int) -> str:
    return f"<|{i * 0.02:.2f}|>"


class WhisperConverter(Converter):
    arch = "whisper"
    hf_archs = ("WhisperForConditionalGeneration",)
    block_keys = ("encoder_layers",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.hp.get("tie_word_embeddings", True) is False:
            raise ConvertError("whisper with an untied proj_out cannot be converted (ours ties "
                               "the output projection to the token embeddings)")
        if self.hp.get("scale_embedding"):
            raise ConvertError("whisper with scale_embedding = true is not supported")

    def _build_map(self) -> dict[str, str]:
        return name_map(self.hp["encoder_layers"], self.hp["decoder_layers"])

    def filter_tensor(self, name: str) -> str | None:
        return None if name == "proj_out.weight" else name

    def modify(self, data: np.ndarray, name: str, bid: int | None
               ) -> Iterator[tuple[str, np.ndarray]]:
        yield self.map_name(name), data

    def set_params(self, kv: KV) -> None:
        hp, a = self.hp, "whisper"
        kv.u32("general.file_type", self.file_type)
        for key, field in (("n_mels", "num_mel_bins"),
                           ("encoder.context_length", "max_source_positions"),
                           ("decoder.context_length", "max_target_positions"),
                           ("embedding_length", "d_model"),
                           ("feed_forward_length", "encoder_ffn_dim"),
                           ("encoder.block_count", "encoder_layers"),
                           ("decoder.block_count", "decoder_layers"),
                           ("attention.head_count", "encoder_attention_heads"),
                           ("decoder.attention.head_count", "decoder_attention_heads")):
            if field not in hp:
                raise ConvertError(f"config.json: '{field}' is not set")
            kv.u32(f"{a}.{key}", hp[field])
        if hp["encoder_ffn_dim"] != hp["decoder_ffn_dim"] or \
                hp["encoder_attention_heads"] != hp["decoder_attention_heads"]:
            raise ConvertError("whisper with different encoder and decoder widths is not supported")
        kv.f32(f"{a}.attention.layer_norm_epsilon", 1e-5)  # nn.LayerNorm's default, as whisper's

    def set_vocab(self, kv: KV) -> None:
        tokens, types = whisper_tokens(self.dir, self.hp["vocab_size"])
        ids = {t: i for i, t in enumerate(tokens)}
        missing = [s for s in SPECIAL.values() if s not in ids]
        if missing:
            raise ConvertError(f"the tokenizer lacks whisper's special tokens {missing}")
        gen = generation_config(self.dir)
        a = "whisper"
        kv.boolean(f"{a}.multilingual", len(tokens) >= 51865)  # whisper.cpp's is_multilingual
        for key, text in SPECIAL.items():
            kv.u32(f"{a}.token.{key}", ids[text])
        kv.u32(f"{a}.token.timestamp_begin", ids[SPECIAL["no_timestamps"]] + 1)
        suppress = gen.get("suppress_tokens", self.hp.get("suppress_tokens")) or []
        begin = gen.get("begin_suppress_tokens", self.hp.get("begin_suppress_tokens")) or []
        kv.array(f"{a}.suppress_tokens", [int(i) for i in suppress])
        kv.array(f"{a}.suppress_tokens_begin", [int(i) for i in begin])
        kv.array(f"{a}.language_tokens", sorted(int(i) for i in
                                                (gen.get("lang_to_id") or {}).values()))
        kv.array(f"{a}.alignment_heads", [int(i) for p in gen.get("alignment_heads") or []
                                          for i in p])
        kv.string("tokenizer.ggml.model", "gpt2")
        kv.string("tokenizer.ggml.pre", "gpt-2")  # tiktoken's gpt2 split, which whisper uses
        kv.array("tokenizer.ggml.tokens", tokens)
        kv.array("tokenizer.ggml.token_type", types)
        kv.array("tokenizer.ggml.merges", tokenizer_merges(self.dir))
        kv.u32("tokenizer.ggml.bos_token_id", ids[SPECIAL["sot"]])
        kv.u32("tokenizer.ggml.eos_token_id", ids[SPECIAL["eot"]])


def generation_config(folder: Path) -> dict:
    path = folder / "generation_config.json"
    return json.loads(path.read_text("utf-8")) if path.is_file() else {}


def whisper_tokens(folder: Path, n_vocab: int) -> tuple[list[str], list[int]]:
    """Token texts and types for ids 0..n_vocab-1 from tokenizer.json. Tokenizers saved before
    the timestamp tokens were added stop at <|notimestamps|>; the rest are the timestamps."""
    vocab = _hf_tokenizer(folder).get_vocab(with_added_tokens=True)
    if max(vocab.values()) >= n_vocab:
        raise ConvertError(f"tokenizer.json has token id {max(vocab.values())}, beyond the "
                           f"model's vocab_size {n_vocab}")
    by_id = {i: t for t, i in vocab.items()}
    eot, no_ts = vocab.get(SPECIAL["eot"]), vocab.get(SPECIAL["no_timestamps"])
    if eot is None or no_ts is None:
        raise ConvertError("tokenizer.json lacks <|endoftext|> or <|notimestamps|>")
    tokens = []
    for i in range(n_vocab):
        if i in by_id:
            tokens.append(by_id[i])
        elif i > no_ts:
            tokens.append(timestamp_name(i - no_ts - 1))
        else:
            raise ConvertError(f"tokenizer.json has no token {i}")
    return tokens, [CONTROL if i >= eot else NORMAL for i in range(n_vocab)]


def tokenizer_merges(folder: Path) -> list[str]:
    merges = json.loads((folder / "tokenizer.json").read_text("utf-8"))["model"]["merges"]
    return [m if isinstance(m, str) else " ".join(m) for m in merges]


# -- the way back: our GGUF as transformers' WhisperForConditionalGeneration ---------------------

def hf_config(g) -> dict:
    """WhisperConfig fields of one of our whisper GGUFs."""
    need = lambda k: int(g.require(f"whisper.{k}"))
    return {"vocab_size": len(g.require("tokenizer.ggml.tokens")),
            "num_mel_bins": need("n_mels"), "d_model": need("embedding_length"),
            "encoder_layers": need("encoder.block_count"),
            "decoder_layers": need("decoder.block_count"),
            "encoder_attention_heads": need("attention.head_count"),
            "decoder_attention_heads": need("attention.head_count"),
            "encoder_ffn_dim": need("feed_forward_length"),
            "decoder_ffn_dim": need("feed_forward_length"),
            "max_source_positions": need("encoder.context_length"),
            "max_target_positions": need("decoder.context_length"),
            "decoder_start_token_id": need("token.sot"), "pad_token_id": need("token.eot"),
            "bos_token_id": need("token.eot"), "eos_token_id": need("token.eot")}


def hf_state_dict(g) -> dict[str, np.ndarray]:
    """transformers' state dict (float32 numpy) of one of our whisper GGUFs: every tensor under
    its HF name, absent biases as zeros, proj_out tied to the embeddings."""
    from ..quants.base import dequantize

    cfg = hf_config(g)
    out = {}
    for hf, ours in name_map(cfg["encoder_layers"], cfg["decoder_layers"]).items():
        for suffix in (".weight", ".bias"):
            if ours + suffix in g.tensors:
                t = g.tensor(ours + suffix)
                out[hf + suffix] = dequantize(t.data, t.ggml_type, t.ne).copy()
            elif suffix == ".bias" and "k_proj" not in hf and "embed" not in hf:
                out[hf + suffix] = np.zeros(out[hf + ".weight"].shape[0], np.float32)
    out["proj_out.weight"] = out[f"{DEC}.embed_tokens.weight"]
    return out
