"""Qwen3_5ForConditionalGeneration --mmproj -> `clip` with projector `qwen3vl_merger` (llama.cpp:
Qwen3VLVisionModel): the vision blocks, the patch merger as mm.0 / mm.2, and the Conv3D patch
embedding split into its two temporal frames."""

from __future__ import annotations

from .gemma3_vision import MmprojConverter
from .kv import KV
from .safetensors import ConvertError


class Qwen35VisionConverter(MmprojConverter):
    hf_archs = ("Qwen3_5ForConditionalGeneration", "Qwen3VLForConditionalGeneration")
    global_map = {"visual.pos_embed": "v.position_embd"}
    block_map = {
        "visual.blocks.{bid}.attn.qkv": "v.blk.{bid}.attn_qkv",
        "visual.blocks.{bid}.attn.proj": "v.blk.{bid}.attn_out",
        "visual.blocks.{bid}.norm1": "v.blk.{bid}.ln1",
        "visual.blocks.{bid}.norm2": "v.blk.{bid}.ln2",
        "visual.blocks.{bid}.mlp.linear_fc1": "v.blk.{bid}.ffn_up",
        "visual.blocks.{bid}.mlp.linear_fc2": "v.blk.{bid}.ffn_down",
    }

    def defaults(self, hp):
        # image_size from the position table; llama.cpp's names for heads and depth
        side = int(hp.get("num_position_embeddings", 2304) ** 0.5)
        return {"image_size": side * hp.get("patch_size", 16)}

    def __init__(self, model_dir, hparams, tensors, no_mtp=False):
        super().__init__(model_dir, hparams, tensors, no_mtp=no_mtp)
        self.hp["num_attention_heads"] = self.hp.get("num_heads")
        self.hp["num_hidden_layers"] = self.hp.get("depth")
        self.deepstack = [False] * int(self.hp["num_hidden_layers"] or 0)
        for i in self.hp.get("deepstack_visual_indexes", []):
            self.deepstack[i] = True
        self.rms_eps = hparams.get("text_config", {}).get("rms_norm_eps", 1e-6)

    def filter_tensor(self, name):
        if name.startswith(("lm_head.", "mtp.")):
            return None
        if name.startswith("model.visual."):
            name = name.replace("model.visual.", "visual.", 1)
        return super().filter_tensor(name) if name.startswith("visual.") else None

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        kv.string("clip.projector_type", "qwen3vl_merger")
        kv.boolean("clip.use_gelu", True)
        if (merge := self.hp.get("spatial_merge_size")) is not None:
            kv.u32("clip.vision.spatial_merge_size", merge)
        kv.f32("clip.vision.attention.layer_norm_epsilon", self.rms_eps)
        if self.deepstack:
            kv.array("clip.vision.is_deepstack_layers", self.deepstack)

    def modify(self, data, name, bid):
        if name.startswith("visual.deepstack_merger_list."):
            raise ConvertError("deepstack mergers (Qwen3-VL) are not converted by llamacpy yet")
        if name.startswith("visual.merger."):
            part, tail = name.split(".", 2)[2].split(".", 1)
            fc = {"linear_fc1": "mm.0", "linear_fc2": "mm.2", "norm": "v.post_ln"}.get(part)
            if fc is None:
                raise ConvertError(f"unexpected merger tensor {name}")
            yield f"{fc}.{tail}", data
        elif name == "visual.patch_embed.proj.weight":
            if data.shape[2] != 2:
                raise ConvertError("only a temporal_patch_size of 2 is supported")
            yield "v.patch_embd.weight", data[:, :, 0]
            yield "v.patch_embd.weight.1", data[:, :, 1]
        elif name == "visual.patch_embed.proj.bias":
            yield "v.patch_embd.bias", data
        else:
            yield self.map_name(name), data
