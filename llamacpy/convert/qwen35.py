"""Qwen3_5ForCausalLM -> `qwen35` (llama.cpp: Qwen3_5TextModel over Qwen3NextModel): Gated
DeltaNet layers beside full attention, zero-centred norms stored as 1 + w, V heads reordered
from grouped to tiled, and the MTP block as layer n_layer (`--no-mtp` leaves it out)."""

from __future__ import annotations

import numpy as np

from .base import Converter
from .decoder import DECODER_GLOBALS, QK_NORM_BLOCKS
from .kv import KV
from .safetensors import ConvertError

MTP_PARTS = {"fc": "eh_proj", "pre_fc_norm_embedding": "enorm",
             "pre_fc_norm_hidden": "hnorm", "norm": "shared_head.norm"}
DEFAULT_MROPE_SECTION = [11, 11, 10, 0]  # written when a checkpoint's rope_parameters has none


def reorder_v_heads(t: np.ndarray, dim: int, n_k: int, v_per_k: int, head_dim: int) -> np.ndarray:
    """V heads grouped by K head -> tiled, along `dim` (_LinearAttentionVReorderBase)."""
    dim %= t.ndim
    shape = t.shape
    split = t.reshape(*shape[:dim], n_k, v_per_k, head_dim, *shape[dim + 1:])
    return np.ascontiguousarray(split.swapaxes(dim, dim + 1)).reshape(shape)


class Qwen35Converter(Converter):
    arch = "qwen35"
    hf_archs = ("Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration")
    supports_mtp = True
    global_map = DECODER_GLOBALS
    block_map = {
        "model.layers.{bid}.input_layernorm": "blk.{bid}.attn_norm",
        "model.layers.{bid}.post_attention_layernorm": "blk.{bid}.post_attention_norm",
        "model.layers.{bid}.self_attn.q_proj": "blk.{bid}.attn_q",
        "model.layers.{bid}.self_attn.k_proj": "blk.{bid}.attn_k",
        "model.layers.{bid}.self_attn.v_proj": "blk.{bid}.attn_v",
        "model.layers.{bid}.self_attn.o_proj": "blk.{bid}.attn_output",
        **QK_NORM_BLOCKS,
        "model.layers.{bid}.linear_attn.A_log": "blk.{bid}.ssm_a",
        "model.layers.{bid}.linear_attn.conv1d": "blk.{bid}.ssm_conv1d",
        "model.layers.{bid}.linear_attn.dt_proj": "blk.{bid}.ssm_dt",
        "model.layers.{bid}.linear_attn.in_proj_a": "blk.{bid}.ssm_alpha",
        "model.layers.{bid}.linear_attn.in_proj_b": "blk.{bid}.ssm_beta",
        "model.layers.{bid}.linear_attn.in_proj_qkv": "blk.{bid}.attn_qkv",
        "model.layers.{bid}.linear_attn.in_proj_z": "blk.{bid}.attn_gate",
        "model.layers.{bid}.linear_attn.norm": "blk.{bid}.ssm_norm",
        "model.layers.{bid}.linear_attn.out_proj": "blk.{bid}.ssm_out",
        "model.layers.{bid}.mlp.gate_proj": "blk.{bid}.ffn_gate",
        "model.layers.{bid}.mlp.up_proj": "blk.{bid}.ffn_up",
        "model.layers.{bid}.mlp.down_proj": "blk.{bid}.ffn_down",
        "model.layers.{bid}.eh_proj": "blk.{bid}.nextn.eh_proj",
        "model.layers.{bid}.enorm": "blk.{bid}.nextn.enorm",
        "model.layers.{bid}.hnorm": "blk.{bid}.nextn.hnorm",
        "model.layers.{bid}.shared_head.norm": "blk.{bid}.nextn.shared_head_norm",
    }

    def __init__(self, model_dir, hparams, tensors, no_mtp: bool = False):
        hp = {**hparams, **hparams.get("text_config", {})}
        self.n_layer = hp.get("num_hidden_layers", 0)
        self.no_mtp = no_mtp
        self.n_mtp = 0
        super().__init__(model_dir, hparams, tensors, no_mtp=no_mtp)
        if not no_mtp:
            self.n_mtp = self.hp.get("mtp_num_hidden_layers", 0) or self.n_mtp
            if self.n_mtp == 0:
                raise ConvertError("this Qwen3.5 checkpoint has no MTP tensors: convert it "
                                   "with --no-mtp")
            self.block_count = self.n_layer + self.n_mtp
            self.names = self._build_map()

    def filter_tensor(self, name):
        name = super().filter_tensor(name)
        if name is None:
            return None
        name = name.replace("model.mtp.", "mtp.", 1) if name.startswith("model.mtp.") else name
        if not name.startswith("mtp."):
            return name
        if self.no_mtp:
            return None
        parts = name.split(".", 3)
        if len(parts) == 4 and parts[1] == "layers" and parts[2].isdecimal():
            self.n_mtp = max(self.n_mtp, int(parts[2]) + 1)
            return f"model.layers.{self.n_layer + int(parts[2])}.{parts[3]}"
        if len(parts) == 3 and parts[1] in MTP_PARTS:
            return f"model.layers.{self.n_layer}.{MTP_PARTS[parts[1]]}.{parts[2]}"
        return name

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        a, hp = self.arch, self.hp
        if not self.no_mtp and self.block_count > self.n_layer:
            kv.u32(f"{a}.nextn_predict_layers", self.block_count - self.n_layer)
        kv.u32(f"{a}.ssm.conv_kernel", hp["linear_conv_kernel_dim"])
        kv.u32(f"{a}.ssm.state_size", hp["linear_key_head_dim"])
        kv.u32(f"{a}.ssm.group_count", hp["linear_num_key_heads"])
        kv.u32(f"{a}.ssm.time_step_rank", hp["linear_num_value_heads"])
        kv.u32(f"{a}.ssm.inner_size", hp["linear_value_head_dim"] * hp["linear_num_value_heads"])
        if (layer_types := hp.get("layer_types")) is not None:
            if len(layer_types) != self.n_layer:
                raise ConvertError(f"config.json: layer_types has {len(layer_types)} entries, "
                                   f"num_hidden_layers is {self.n_layer}")
            recurrent = [t == "linear_attention" for t in layer_types]
            kv.array(f"{a}.attention.recurrent_layers",
                     recurrent + [False] * (self.block_count - self.n_layer))
        kv.u32(f"{a}.full_attention_interval", hp.get("full_attention_interval", 4))
        head_dim = hp.get("head_dim") or hp["hidden_size"] // hp["num_attention_heads"]
        kv.u32(f"{a}.rope.dimension_count",
               int(head_dim * self.rope.get("partial_rotary_factor", 0.25)))
        if "mrope_section" not in self.rope:
            kv.array(f"{a}.rope.dimension_sections", DEFAULT_MROPE_SECTION)

    def _reorder(self, data: np.ndarray, name: str) -> np.ndarray:
        hp = self.hp
        n_k, n_v = hp.get("linear_num_key_heads", 0), hp.get("linear_num_value_heads", 0)
        if not (n_k and n_v and n_k != n_v and "linear_attn." in name):
            return data
        dk, dv, per = hp["linear_key_head_dim"], hp["linear_value_head_dim"], n_v // n_k
        if ".in_proj_qkv." in name:
            qk = 2 * dk * n_k
            return np.concatenate([data[:qk], reorder_v_heads(data[qk:], 0, n_k, per, dv)])
        if ".in_proj_z." in name:
            return reorder_v_heads(data, 0, n_k, per, dv)
        if ".in_proj_b." in name or ".in_proj_a." in name:
            return reorder_v_heads(data, 0, n_k, per, 1)
        if ".A_log" in name or ".dt_bias" in name or ".dt_proj" in name:
            return (reorder_v_heads(data[:, None], 0, n_k, per, 1)[:, 0] if data.ndim == 1
                    else reorder_v_heads(data, -1, n_k, per, 1))
        if ".conv1d" in name:
            data = data.squeeze()
            qk = 2 * dk * n_k
            return np.concatenate([data[:qk], reorder_v_heads(data[qk:], 0, n_k, per, dv)])
        if ".out_proj." in name:
            return reorder_v_heads(data, 1, n_k, per, dv)
        return data

    def modify(self, data, name, bid):
        data = self._reorder(data, name)
        if name.endswith(".A_log"):
            # exp in float64, rounded once: llama.cpp gets torch's exp (MKL on x86), which
            # equals this in all but ~1% of values, where the two differ by one ulp
            data = -np.exp(np.asarray(data, np.float64)).astype(data.dtype)
        elif name.endswith(".dt_bias"):
            name = name.rpartition(".dt_bias")[0] + ".dt_proj.bias"
        elif "conv1d" in name:
            data = data.squeeze()
        elif name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            data = data + 1
        yield self.map_name(name), data
