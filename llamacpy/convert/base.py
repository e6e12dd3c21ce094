"""The architecture-independent half of a conversion (llama.cpp: ModelBase / TextModel).

An architecture file subclasses `Converter`: it names its GGUF architecture and the Hugging Face
architectures it reads, declares its tensor-name map, and adds its own metadata and tensor fixes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..format.constants import GGMLType
from .kv import KV
from .safetensors import ConvertError, SourceTensor
from .vocab import SpecialVocab, bpe_vocab, spm_vocab

# prefixes and fragments of multimodal tensors a text conversion skips (TextModel.filter_tensors)
MM_PREFIXES = ("mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.",
               "sound_encoder.", "sound_projection.", "speech_embeddings.")
MM_PARTS = ("visual.", "vision.", "audio.", "talker.", "vision_", "audio_", "token2wav.",
            "code2wav.", "projector.", "pre_mm_projector_norm", "image_newline",
            "view_seperator", "patch_embed", "patch_embedding", "patch_merger.",
            "patch_merge_mlp.", "model.connector.")
UNUSED_SUFFIXES = (".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq")
# GGUF tensors kept in F32 whatever the outtype (prepare_tensors' list, the ones ours can produce)
F32_TENSORS = ("position_embd", "token_types", "ffn_gate_inp", "ssm_conv1d")
FTYPES = {"f32": GGMLType.F32, "f16": GGMLType.F16, "bf16": GGMLType.BF16, "q8_0": GGMLType.Q8_0}
FILE_TYPES = {GGMLType.F32: 0, GGMLType.F16: 1, GGMLType.Q8_0: 7, GGMLType.BF16: 32}


def load_hparams(model_dir: Path) -> dict[str, Any]:
    """config.json, with a text_config moved to the top (ModelBase.load_hparams, TextModel)."""
    path = model_dir / "config.json"
    if not path.is_file():
        raise ConvertError(f"{model_dir}: no config.json (is this a Hugging Face model folder?)")
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConvertError(f"config.json: not valid JSON ({e})") from None
    if not isinstance(config, dict):
        raise ConvertError("config.json: not a JSON object")
    return config


def rope_parameters(hp: dict[str, Any]) -> dict[str, Any]:
    """rope_parameters from the newer layout or the older top-level rope_theta / rope_scaling one,
    as transformers normalizes them and TextModel.__init__ mirrors them."""
    rope = dict(hp.get("rope_parameters") or hp.get("rope_scaling") or {})
    theta = _find(hp, ("global_rope_theta", "rope_global_theta", "rope_theta_global",
                       "rope_theta", "rotary_emb_base"))
    local = _find(hp, ("local_rope_theta", "rope_local_theta", "rope_theta_local",
                       "swa_rope_theta", "rope_local_base_freq"))
    partial = _find(hp, ("partial_rotary_factor", "rope_pct", "rope_percent"))
    orig = _find(hp, ("original_max_position_embeddings",))
    if "full_attention" not in rope and "sliding_attention" not in rope:
        if local is not None:
            rope["sliding_attention"] = {"rope_theta": local}
        if "rope_theta" not in rope and theta is not None:
            rope["rope_theta"] = theta
        if "rope_type" not in rope and rope.get("type") is not None:
            rope["rope_type"] = rope["type"]
        if "partial_rotary_factor" not in rope and partial is not None:
            rope["partial_rotary_factor"] = partial
        if "original_max_position_embeddings" not in rope and orig is not None:
            rope["original_max_position_embeddings"] = orig
    return rope


def _find(hp: dict[str, Any], keys: Iterable[str]) -> Any:
    return next((hp[k] for k in keys if k in hp), None)


def tensor_block(name: str) -> int | None:
    """The first number-like part of a tensor name (llama.cpp's block id)."""
    return next((int(p) for p in name.split(".") if p.isdecimal()), None)


class Converter:
    """One checkpoint being converted: hyperparameters, tensors and metadata of one architecture."""

    arch: ClassVar[str]  # general.architecture
    hf_archs: ClassVar[tuple[str, ...]]
    block_map: ClassVar[dict[str, str]] = {}  # HF name with {bid} -> GGUF name with {bid}
    global_map: ClassVar[dict[str, str]] = {}  # HF name -> GGUF name (no block)
    file_type: int = 1  # general.file_type (LlamaFileType), set once the outtype is known

    supports_mtp: ClassVar[bool] = False  # whether --no-mtp applies
    block_keys: ClassVar[tuple[str, ...]] = ("n_layers", "num_hidden_layers", "n_layer",
                                             "num_layers")
    is_mmproj: ClassVar[bool] = False  # a vision projector (general.type mmproj, no tokenizer)

    def __init__(self, model_dir: Path, hparams: dict[str, Any],
                 tensors: dict[str, SourceTensor], no_mtp: bool = False):
        if no_mtp and not self.supports_mtp:
            # llama.cpp's answer for an architecture without an MTP export
            raise ConvertError(f"--mtp / --no-nextn are not supported for "
                               f"{hparams.get('architectures', ['?'])[0]}")
        self.dir = model_dir
        self.hf_arch = hparams.get("architectures", [None])[0]
        hp = {**hparams, **hparams.get("text_config", {})}
        self.hp = {**self.defaults(hp), **hp}
        self.block_count = self.find(self.block_keys)
        self.rope = rope_parameters(self.hp)
        self.names = self._build_map()
        self.sources = {}
        for name, t in tensors.items():
            renamed = self.filter_tensor(name)
            if renamed is not None:
                self.sources[renamed] = t

    def defaults(self, hp: dict[str, Any]) -> dict[str, Any]:
        """Config fields transformers' config class adds when config.json lacks them (llama.cpp
        reads the config through AutoConfig, so it writes what those add)."""
        return {}

    def find(self, keys: Iterable[str], optional: bool = False) -> Any:
        keys = tuple(keys)
        value = _find(self.hp, keys)
        if value is None and not optional and not any(k in self.hp for k in keys):
            raise ConvertError(f"config.json: none of {', '.join(keys)} is set")
        return value

    def _build_map(self) -> dict[str, str]:
        names = dict(self.global_map)
        for bid in range(self.block_count):
            for hf, gg in self.block_map.items():
                names[hf.format(bid=bid)] = gg.format(bid=bid)
        return names

    # -- tensors ---------------------------------------------------------------------------

    def filter_tensor(self, name: str) -> str | None:
        """The HF name a tensor goes by, or None to skip it (filter_tensors)."""
        if name.startswith(MM_PREFIXES) or any(p in name for p in MM_PARTS):
            return None
        if name.endswith("e_score_correction_bias"):
            name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        return name.replace("language_model.", "")

    def map_name(self, name: str) -> str:
        if name in self.names:
            return self.names[name]
        for suffix in (".weight", ".bias"):
            if name.endswith(suffix) and name[: -len(suffix)] in self.names:
                return self.names[name[: -len(suffix)]] + suffix
        raise ConvertError(f"cannot map tensor '{name}' of {self.hf_arch} to a GGUF name")

    def modify(self, data: np.ndarray, name: str, bid: int | None
               ) -> Iterator[tuple[str, np.ndarray]]:
        """GGUF tensors made from one HF tensor (modify_tensors); architectures override."""
        yield self.map_name(name), data

    def force_type(self, hf_name: str, name: str, ftype: GGMLType) -> GGMLType | None:
        """A type a matrix must have whatever the outtype (tensor_force_quant), or None."""
        return None

    def extra_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        """Generated tensors written before the checkpoint's (generate_extra_tensors)."""
        return iter(())

    # -- metadata --------------------------------------------------------------------------

    def set_params(self, kv: KV) -> None:
        """The architecture's hyperparameters (TextModel.set_gguf_parameters)."""
        a, hp = self.arch, self.hp
        kv.u32(f"{a}.block_count", self.block_count)
        for key, names in ((f"{a}.context_length", ("max_position_embeddings", "n_ctx",
                            "n_positions", "max_length", "max_sequence_length",
                            "model_max_length")),
                           (f"{a}.embedding_length", ("hidden_size", "n_embd", "dim")),
                           (f"{a}.feed_forward_length", ("prefix_dense_intermediate_size",
                            "dense_intermediate_size", "intermediate_size", "n_inner",
                            "hidden_dim")),
                           (f"{a}.attention.head_count", ("num_attention_heads", "n_head",
                                                          "n_heads")),
                           (f"{a}.attention.head_count_kv", ("num_key_value_heads",
                                                             "n_kv_heads"))):
            if (value := self.find(names, optional=True)) is not None:
                kv.u32(key, value)
        if hp.get("is_causal") is False:
            kv.boolean(f"{a}.attention.causal", False)
        self.set_rope(kv)
        if (eps := self.find(("rms_norm_eps", "norm_eps"), optional=True)) is not None:
            kv.f32(f"{a}.attention.layer_norm_rms_epsilon", eps)
        if (eps := self.find(("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"),
                             optional=True)) is not None:
            kv.f32(f"{a}.attention.layer_norm_epsilon", eps)
        if (head_dim := hp.get("head_dim")) is not None:
            kv.u32(f"{a}.attention.key_length", head_dim)
            kv.u32(f"{a}.attention.value_length", head_dim)
        kv.u32("general.file_type", self.file_type)

    def set_rope(self, kv: KV) -> None:
        a, rope = self.arch, self.rope.get("full_attention", self.rope)
        rope_type, factor = rope.get("rope_type"), rope.get("factor")
        if rope_type == "linear" and factor is not None:
            kv.string(f"{a}.rope.scaling.type", "linear")
            kv.f32(f"{a}.rope.scaling.factor", factor)
        elif rope_type == "yarn" and factor is not None:
            kv.string(f"{a}.rope.scaling.type", "yarn")
            kv.f32(f"{a}.rope.scaling.factor", factor)
            kv.u32(f"{a}.rope.scaling.original_context_length",
                   rope["original_max_position_embeddings"])
            for key, names in (("yarn_ext_factor", ("extrapolation_factor",)),
                               ("yarn_attn_factor", ("attention_factor", "attn_factor")),
                               ("yarn_beta_fast", ("beta_fast",)),
                               ("yarn_beta_slow", ("beta_slow",))):
                if (value := _find(rope, names)) is not None:
                    kv.f32(f"{a}.rope.scaling.{key}", value)
        elif rope_type in ("su", "longrope"):
            kv.string(f"{a}.rope.scaling.type", "longrope")
        if "mrope_section" in self.rope:
            sections = list(self.rope["mrope_section"])[:4]
            kv.array(f"{a}.rope.dimension_sections", sections + [0] * (4 - len(sections)))
        if (theta := rope.get("rope_theta")) is not None:
            kv.f32(f"{a}.rope.freq_base", theta)
        if (local := self.rope.get("sliding_attention", {}).get("rope_theta")) is not None:
            kv.f32(f"{a}.rope.freq_base_swa", local)

    def pooling_type(self, kv: KV) -> None:
        """Sentence-transformers pooling from modules.json (_try_set_pooling_type)."""
        modules = self.dir / "modules.json"
        if not modules.is_file():
            return
        path = next((m["path"] for m in json.loads(modules.read_text(encoding="utf-8"))
                     if m["type"].endswith("Pooling")), None)
        if path is None:
            return
        pooling = json.loads((self.dir / path / "config.json").read_text(encoding="utf-8"))
        modes = {"mean": 1, "cls": 2, "lasttoken": 3}
        for flag, value in (("pooling_mode_mean_tokens", 1), ("pooling_mode_cls_token", 2),
                            ("pooling_mode_lasttoken", 3)):
            if pooling.get(flag):
                break
        else:
            value = modes.get(pooling.get("pooling_mode"))
            if value is None:
                raise ConvertError("only mean, cls and last-token pooling can be converted")
        kv.u32(f"{self.arch}.pooling_type", value)

    def set_vocab(self, kv: KV) -> None:
        self.vocab_gpt2(kv)

    def vocab_gpt2(self, kv: KV) -> None:
        tokens, types, pre = bpe_vocab(self.dir, self.hp.get("vocab_size"))
        kv.string("tokenizer.ggml.model", "gpt2")
        kv.string("tokenizer.ggml.pre", pre)
        kv.array("tokenizer.ggml.tokens", tokens)
        kv.array("tokenizer.ggml.token_type", types)
        SpecialVocab(load_merges=True).load(self.dir).write(kv)

    def vocab_sentencepiece(self, kv: KV) -> None:
        tokens, scores, types = spm_vocab(self.dir, self.hp.get("vocab_size"))
        kv.string("tokenizer.ggml.model", "llama")
        kv.string("tokenizer.ggml.pre", "default")
        kv.array("tokenizer.ggml.tokens", tokens)
        kv.array("tokenizer.ggml.scores", scores)
        kv.array("tokenizer.ggml.token_type", types)
        SpecialVocab(n_vocab=len(tokens)).load(self.dir).write(kv)

    def has_spm(self) -> bool:
        return (self.dir / "tokenizer.model").is_file()
