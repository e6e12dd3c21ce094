"""Gemma3ForConditionalGeneration --mmproj -> `clip` with projector `gemma3` (llama.cpp:
MmprojModel, Gemma3VisionModel): the SigLIP tower and Gemma's input projection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..format.constants import GGMLType
from .base import Converter
from .kv import KV
from .safetensors import ConvertError, SourceTensor
from .vocab import read_json

VISION_BLOCK_KEYS = ("n_layers", "num_hidden_layers", "n_layer", "num_layers", "depth", "layers",
                     "encoder_layers", "vt_num_hidden_layers")
TOWER = "vision_tower.vision_model."


class MmprojConverter(Converter):
    """The vision half of a multimodal checkpoint: clip.* metadata, no tokenizer."""

    arch = "clip"
    is_mmproj = True
    block_keys = VISION_BLOCK_KEYS

    def __init__(self, model_dir: Path, hparams: dict[str, Any],
                 tensors: dict[str, SourceTensor], no_mtp: bool = False):
        vision = hparams.get("vision_config")
        if vision is None:
            raise ConvertError("config.json has no vision_config: nothing for --mmproj to export")
        text = {**hparams, **hparams.get("text_config", {})}
        self.n_embd_text = text.get("hidden_size", text.get("n_embd", 0))
        self.preprocessor = self._preprocessor(model_dir)
        super().__init__(model_dir, {**vision, "architectures": hparams.get("architectures")},
                         tensors, no_mtp=no_mtp)

    @staticmethod
    def _preprocessor(model_dir: Path) -> dict[str, Any]:
        """preprocessor_config.json, then processor_config.json's image_processor on top."""
        cfg: dict[str, Any] = {}
        pre, proc = model_dir / "preprocessor_config.json", model_dir / "processor_config.json"
        if pre.is_file():
            data = read_json(pre)
            cfg.update({**data, **data.get("media_proc_cfg", {})})
        if proc.is_file():
            data = read_json(proc)
            cfg.update({**data, **data.get("image_processor", {})})
        return cfg

    def filter_tensor(self, name):
        if "language_model." in name:
            return None
        if name.endswith("e_score_correction_bias"):
            name = name.replace("e_score_correction_bias", "e_score_correction.bias")
        return name

    def set_params(self, kv: KV) -> None:
        kv.u32("general.file_type", self.file_type)
        kv.boolean("clip.has_vision_encoder", True)
        kv.u32("clip.vision.projection_dim", self.n_embd_text)
        kv.u32("clip.vision.image_size", self.find(("image_size",)))
        kv.u32("clip.vision.patch_size", self.find(("patch_size",)))
        kv.u32("clip.vision.embedding_length", self.find(("hidden_size", "width",
                                                           "vt_hidden_size")))
        kv.u32("clip.vision.feed_forward_length", self.find(("intermediate_size",
                                                              "vt_intermediate_size")))
        kv.u32("clip.vision.block_count", self.find(VISION_BLOCK_KEYS))
        kv.u32("clip.vision.attention.head_count", self.find(("num_attention_heads", "num_heads",
                                                               "heads", "vt_num_attention_heads")))
        for key in ("image_mean", "image_std"):
            if key not in self.preprocessor:
                raise ConvertError(f"preprocessor_config.json: no {key}")
            kv.array(f"clip.vision.{key}", [float(v) for v in self.preprocessor[key]])

    def set_vocab(self, kv: KV) -> None:
        return None  # a projector carries no tokenizer

    def force_type(self, hf_name: str, name: str, ftype: GGMLType) -> GGMLType | None:
        if ".patch_embd.weight" in name or ".patch_merger.weight" in name:
            return GGMLType.F16 if ftype == GGMLType.F16 else GGMLType.F32
        return None


class Gemma3VisionConverter(MmprojConverter):
    hf_archs = ("Gemma3ForConditionalGeneration",)
    global_map = {
        TOWER + "embeddings.patch_embedding": "v.patch_embd",
        TOWER + "embeddings.position_embedding": "v.position_embd",
        TOWER + "post_layernorm": "v.post_ln",
        "multi_modal_projector.mm_input_projection": "mm.input_projection",
        "multi_modal_projector.mm_soft_emb_norm": "mm.soft_emb_norm",
    }
    block_map = {
        TOWER + "encoder.layers.{bid}.layer_norm1": "v.blk.{bid}.ln1",
        TOWER + "encoder.layers.{bid}.layer_norm2": "v.blk.{bid}.ln2",
        TOWER + "encoder.layers.{bid}.mlp.fc1": "v.blk.{bid}.ffn_up",
        TOWER + "encoder.layers.{bid}.mlp.fc2": "v.blk.{bid}.ffn_down",
        TOWER + "encoder.layers.{bid}.self_attn.q_proj": "v.blk.{bid}.attn_q",
        TOWER + "encoder.layers.{bid}.self_attn.k_proj": "v.blk.{bid}.attn_k",
        TOWER + "encoder.layers.{bid}.self_attn.v_proj": "v.blk.{bid}.attn_v",
        TOWER + "encoder.layers.{bid}.self_attn.out_proj": "v.blk.{bid}.attn_out",
    }

    def filter_tensor(self, name):
        if "vision_model.head." in name:
            return None  # tinygemma3's redundant pooling head
        if not name.startswith(("multi_modal_projector.", "vision_tower.",
                                "multimodal_projector.", "vision_model.")):
            return None
        return super().filter_tensor(name.replace("_weight", ".weight"))

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        kv.string("clip.projector_type", "gemma3")
        kv.f32("clip.vision.attention.layer_norm_epsilon", self.hp.get("layer_norm_eps", 1e-6))
        kv.boolean("clip.use_gelu", True)
        n_per_side = int(self.preprocessor.get("image_seq_length", 256) ** 0.5)
        scale = (self.hp["image_size"] // self.hp["patch_size"]) // n_per_side
        if scale > 0 and scale != 4:  # only test models differ from the default
            kv.u32("clip.vision.projector.scale_factor", scale)

    def force_type(self, hf_name, name, ftype):
        if "input_projection" in hf_name:
            return GGMLType.F16  # llama.cpp issue 13025
        if ".embeddings." in hf_name:
            return GGMLType.F32
        return super().force_type(hf_name, name, ftype)

    def modify(self, data, name, bid):
        if "soft_emb_norm.weight" in name:
            data = data + 1  # Gemma3RMSNorm; the SigLIP norms are stored as they are
        yield self.map_name(name), data
