"""Which type each tensor gets when a model is quantized to a file type such as Q4_K_M.

A faithful port of llama.cpp's mixture rules (src/llama-quant.cpp: tensor_allows_quantization,
llama_tensor_get_type_impl, tensor_type_fallback) for the file types llamacpy can write.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..format.constants import GGML_QUANT_SIZES, FileType, GGMLType

T = GGMLType


@dataclass(frozen=True)
class FileTypeOption:
    name: str
    ftype: FileType
    default_type: GGMLType
    description: str


# llama-quantize's QUANT_OPTIONS, restricted to what llamacpy quantizes (aliases included).
FILE_TYPE_OPTIONS = [
    FileTypeOption("Q4_0", FileType.MOSTLY_Q4_0, T.Q4_0, " 4.34G, +0.4685 ppl @ Llama-3-8B"),
    FileTypeOption("Q4_1", FileType.MOSTLY_Q4_1, T.Q4_1, " 4.78G, +0.4511 ppl @ Llama-3-8B"),
    FileTypeOption("Q5_0", FileType.MOSTLY_Q5_0, T.Q5_0, " 5.21G, +0.1316 ppl @ Llama-3-8B"),
    FileTypeOption("Q5_1", FileType.MOSTLY_Q5_1, T.Q5_1, " 5.65G, +0.1062 ppl @ Llama-3-8B"),
    FileTypeOption("Q2_K", FileType.MOSTLY_Q2_K, T.Q2_K, " 2.96G, +3.5199 ppl @ Llama-3-8B"),
    FileTypeOption("Q3_K", FileType.MOSTLY_Q3_K_M, T.Q3_K, "alias for Q3_K_M"),
    FileTypeOption("Q3_K_S", FileType.MOSTLY_Q3_K_S, T.Q3_K, " 3.41G, +1.6321 ppl @ Llama-3-8B"),
    FileTypeOption("Q3_K_M", FileType.MOSTLY_Q3_K_M, T.Q3_K, " 3.74G, +0.6569 ppl @ Llama-3-8B"),
    FileTypeOption("Q3_K_L", FileType.MOSTLY_Q3_K_L, T.Q3_K, " 4.03G, +0.5562 ppl @ Llama-3-8B"),
    FileTypeOption("IQ4_NL", FileType.MOSTLY_IQ4_NL, T.IQ4_NL, " 4.50 bpw non-linear quantization"),
    FileTypeOption("IQ4_XS", FileType.MOSTLY_IQ4_XS, T.IQ4_XS, " 4.25 bpw non-linear quantization"),
    FileTypeOption("Q4_K", FileType.MOSTLY_Q4_K_M, T.Q4_K, "alias for Q4_K_M"),
    FileTypeOption("Q4_K_S", FileType.MOSTLY_Q4_K_S, T.Q4_K, " 4.37G, +0.2689 ppl @ Llama-3-8B"),
    FileTypeOption("Q4_K_M", FileType.MOSTLY_Q4_K_M, T.Q4_K, " 4.58G, +0.1754 ppl @ Llama-3-8B"),
    FileTypeOption("Q5_K", FileType.MOSTLY_Q5_K_M, T.Q5_K, "alias for Q5_K_M"),
    FileTypeOption("Q5_K_S", FileType.MOSTLY_Q5_K_S, T.Q5_K, " 5.21G, +0.1049 ppl @ Llama-3-8B"),
    FileTypeOption("Q5_K_M", FileType.MOSTLY_Q5_K_M, T.Q5_K, " 5.33G, +0.0569 ppl @ Llama-3-8B"),
    FileTypeOption("Q6_K", FileType.MOSTLY_Q6_K, T.Q6_K, " 6.14G, +0.0217 ppl @ Llama-3-8B"),
    FileTypeOption("Q8_0", FileType.MOSTLY_Q8_0, T.Q8_0, " 7.96G, +0.0026 ppl @ Llama-3-8B"),
    FileTypeOption("F16", FileType.MOSTLY_F16, T.F16, "14.00G, +0.0020 ppl @ Mistral-7B"),
    FileTypeOption("BF16", FileType.MOSTLY_BF16, T.BF16, "14.00G, -0.0050 ppl @ Mistral-7B"),
    FileTypeOption("F32", FileType.ALL_F32, T.F32, "26.00G              @ 7B"),
    FileTypeOption("COPY", FileType.ALL_F32, T.F32, "only copy tensors, no quantizing"),
]
# llama.cpp file types llamacpy cannot produce yet: named so the error can say so.
UNSUPPORTED_FILE_TYPES = {"Q1_0", "Q2_0", "MXFP4_MOE", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
                          "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0", "Q2_K_S", "IQ3_XXS", "IQ3_S",
                          "IQ3_M", "IQ3_XS"}


def parse_file_type(text: str) -> FileTypeOption | None:
    """A file type by name (case-insensitive) or number, as llama-quantize's try_parse_ftype."""
    for opt in FILE_TYPE_OPTIONS:
        if opt.name.lower() == text.lower():
            return opt
    if text.strip().lstrip("-").isdigit():
        for opt in FILE_TYPE_OPTIONS:
            if int(opt.ftype) == int(text):
                return opt
    return None


def is_quantized(t: GGMLType) -> bool:
    return t not in (T.F32, T.F16, T.BF16, T.F64, T.I8, T.I16, T.I32, T.I64)


@dataclass
class ModelHParams:
    """The few hyper-parameters the mixture rules look at."""

    arch: str
    n_layer: int
    n_head: int
    n_head_kv: int
    n_expert: int = 0

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self) -> bool:
        # llama.cpp's LLM_TYPE_70B: an 80-layer llama with grouped-query attention
        return self.arch == "llama" and self.n_layer == 80 and self.n_head != self.n_head_kv


@dataclass
class QuantizeParams:
    """llama_model_quantize_params, as far as llamacpy supports them."""

    ftype: FileTypeOption
    allow_requantize: bool = False
    quantize_output_tensor: bool = True  # --leave-output-tensor clears it
    pure: bool = False
    output_tensor_type: GGMLType | None = None
    token_embedding_type: GGMLType | None = None
    tensor_types: list[tuple[str, GGMLType]] = field(default_factory=list)  # --tensor-type
    only_copy: bool = False


def n_dims(ne: tuple[int, ...]) -> int:
    """ggml_n_dims: trailing dimensions of 1 do not count."""
    for i in range(len(ne) - 1, 0, -1):
        if ne[i] > 1:
            return i + 1
    return 1


_NOT_QUANTIZED_PARTS = ("_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup",
                        "laurel", "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight",
                        "indexer.k_proj.weight", "indexer.q_proj.weight", "time_mix_first.weight",
                        "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
                        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight",
                        "time_mix_a0.weight", "time_mix_a1.weight", "time_mix_a2.weight",
                        "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
                        "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
                        "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.",
                        "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
                        "mm.a.code_embd")


def allows_quantization(name: str, ne: tuple[int, ...], params: QuantizeParams) -> bool:
    """tensor_allows_quantization: 2-D+ weights, minus norms, routers and small special tensors."""
    if params.only_copy or n_dims(ne) < 2 or not name.endswith("weight"):
        return False
    if not params.quantize_output_tensor and name == "output.weight":
        return False
    if name in ("position_embd.weight", "token_types.weight"):
        return False
    return not any(part in name for part in _NOT_QUANTIZED_PARTS)


def tensor_category(name: str) -> str:
    """tensor_get_category: broad roles the rules key on."""
    if name == "output.weight":
        return "output"
    if name in ("token_embd.weight", "per_layer_token_embd.weight"):
        return "token_embd"
    for part, cat in (("attn_qkv.weight", "attn_qkv"), ("attn_kv_b.weight", "attn_kv_b"),
                      ("attn_v.weight", "attn_v"), ("attn_k.weight", "attn_k"),
                      ("attn_q.weight", "attn_q"), ("attn_output.weight", "attn_output"),
                      ("ffn_up", "ffn_up"), ("ffn_gate", "ffn_gate"), ("ffn_down", "ffn_down")):
        if part in name:
            return cat
    return "other"


# tensor_type_fallback's table for rows that are not a multiple of 256
FALLBACKS = {T.IQ4_XS: T.IQ4_NL, T.Q2_K: T.Q4_0, T.Q3_K: T.Q4_0, T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1,
             T.Q6_K: T.Q8_0}


def use_more_bits(i_layer: int, n_layers: int) -> bool:
    return i_layer < n_layers // 8 or i_layer >= 7 * n_layers // 8 or \
        (i_layer - n_layers // 8) % 3 == 2


def layer_order_key(name: str) -> tuple[int, str]:
    """llama_model_loader's weight_name_comparer: by layer number (non-layer first), then name."""
    m = re.match(r"blk\.(\d+)\.", name)
    return (int(m.group(1)) if m else -1, name)


class TypeChooser:
    """llama_tensor_get_type with its running counters; call `choose` in layer_order_key order."""

    def __init__(self, hp: ModelHParams, params: QuantizeParams, names: list[str]):
        self.hp, self.params = hp, params
        cats = [tensor_category(n) for n in names]
        self.n_attention_wv = sum(c in ("attn_v", "attn_qkv", "attn_kv_b") for c in cats)
        self.has_tied_embeddings = "output" not in cats
        self.n_ffn = hp.n_layer
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0
        self.n_fallback = 0
        self.patterns = [(re.compile(p), t) for p, t in params.tensor_types]

    def choose(self, name: str, ne: tuple[int, ...], cur_type: GGMLType) -> GGMLType:
        p, cat = self.params, tensor_category(name)
        if not allows_quantization(name, ne, p):
            return cur_type
        if p.token_embedding_type is not None and cat == "token_embd":
            return p.token_embedding_type
        if p.output_tensor_type is not None and cat == "output":
            return p.output_tensor_type
        new_type = p.ftype.default_type
        if not is_quantized(new_type):
            return new_type
        manual = next((t for pat, t in self.patterns if pat.search(name)), None)
        if manual is not None:
            new_type = manual
        elif not p.pure:
            new_type = self._mixture(name, ne, new_type, cat)
        return self._fallback(name, ne, new_type)

    def _layer(self, counter: int, name: str) -> tuple[int, int]:
        if self.hp.n_expert > 1:  # experts are not consecutive: read the layer from the name
            m = re.match(r"blk\.(\d+)\.", name)
            if not m or not 0 <= int(m.group(1)) < self.n_ffn:
                raise ValueError(f"Failed to determine layer for tensor {name}")
            return int(m.group(1)), self.n_ffn
        return counter, self.n_ffn

    def _mixture(self, name: str, ne: tuple[int, ...], new_type: GGMLType, cat: str) -> GGMLType:
        ft, hp, F = self.params.ftype.ftype, self.hp, FileType
        if cat == "output" or (self.has_tied_embeddings and cat == "token_embd"):
            if self.params.output_tensor_type is not None:
                return self.params.output_tensor_type
            if hp.arch == "falcon" or ne[0] % GGML_QUANT_SIZES[new_type][0]:
                return T.Q8_0
            return T.Q6_K if new_type != T.Q8_0 else new_type
        if cat == "token_embd":
            return new_type
        if cat in ("attn_v", "attn_qkv", "attn_kv_b"):
            if ft == F.MOSTLY_Q2_K:
                new_type = T.Q4_K if hp.n_gqa >= 4 else T.Q3_K
            elif ft == F.MOSTLY_Q3_K_M:
                new_type = T.Q5_K if self.i_attention_wv < 2 else T.Q4_K
            elif ft == F.MOSTLY_Q3_K_L:
                new_type = T.Q5_K
            elif ft in (F.MOSTLY_IQ4_NL, F.MOSTLY_IQ4_XS) and hp.n_gqa >= 4:
                new_type = T.Q5_K
            elif ft in (F.MOSTLY_Q4_K_M, F.MOSTLY_Q5_K_M) and \
                    use_more_bits(self.i_attention_wv, self.n_attention_wv):
                new_type = T.Q6_K
            elif ft == F.MOSTLY_Q4_K_S and self.i_attention_wv < 4:
                new_type = T.Q5_K
            if hp.is_70b and new_type in (T.Q3_K, T.Q4_K):
                new_type = T.Q5_K
            if hp.n_expert == 8:
                new_type = T.Q8_0
            self.i_attention_wv += 1
        elif cat == "attn_k":
            if hp.n_expert == 8:
                new_type = T.Q8_0
        elif cat == "ffn_down":
            new_type = self._ffn_down(name, new_type)
        elif cat == "attn_output":
            new_type = self._attn_output(new_type)
        elif cat in ("ffn_gate", "ffn_up"):
            self._layer(self.i_ffn_gate if cat == "ffn_gate" else self.i_ffn_up, name)
            if cat == "ffn_gate":
                self.i_ffn_gate += 1
            else:
                self.i_ffn_up += 1
        return new_type

    def _ffn_down(self, name: str, new_type: GGMLType) -> GGMLType:
        ft, F, falcon = self.params.ftype.ftype, FileType, self.hp.arch == "falcon"
        i_layer, n_layer = self._layer(self.i_ffn_down, name)
        if ft == F.MOSTLY_Q2_K:
            new_type = T.Q3_K
        elif ft == F.MOSTLY_Q3_K_M:
            new_type = T.Q5_K if i_layer < n_layer // 16 else \
                T.Q4_K if not falcon or use_more_bits(i_layer, n_layer) else T.Q3_K
        elif ft == F.MOSTLY_Q3_K_L:
            new_type = T.Q4_K if falcon else T.Q5_K
        elif ft == F.MOSTLY_Q4_K_M:
            if falcon:
                new_type = T.Q6_K if i_layer < n_layer // 16 else \
                    T.Q5_K if use_more_bits(i_layer, n_layer) else T.Q4_K
            elif use_more_bits(i_layer, n_layer):
                new_type = T.Q6_K
        elif i_layer < n_layer // 8 and ft in (F.MOSTLY_IQ4_NL, F.MOSTLY_IQ4_XS):
            new_type = T.Q5_K
        elif ft == F.MOSTLY_Q5_K_M and use_more_bits(i_layer, n_layer):
            new_type = T.Q6_K
        elif ft == F.MOSTLY_Q4_K_S and not falcon and i_layer < n_layer // 8:
            new_type = T.Q5_K
        self.i_ffn_down += 1
        return new_type

    def _attn_output(self, new_type: GGMLType) -> GGMLType:
        ft, F = self.params.ftype.ftype, FileType
        if self.hp.arch == "falcon":
            return T.Q4_K if ft == F.MOSTLY_Q3_K_L else new_type
        if self.hp.n_expert == 8:
            bumped = (F.MOSTLY_Q2_K, F.MOSTLY_Q3_K_S, F.MOSTLY_Q3_K_M, F.MOSTLY_IQ4_NL,
                      F.MOSTLY_Q4_K_S, F.MOSTLY_Q4_K_M, F.MOSTLY_IQ4_XS)
            return T.Q5_K if ft in bumped else new_type
        return {F.MOSTLY_Q2_K: T.Q3_K, F.MOSTLY_Q3_K_M: T.Q4_K,
                F.MOSTLY_Q3_K_L: T.Q5_K}.get(ft, new_type)

    def _fallback(self, name: str, ne: tuple[int, ...], target: GGMLType) -> GGMLType:
        """tensor_type_fallback: a 256-block type on rows that are not a multiple of 256."""
        block = GGML_QUANT_SIZES[target][0]
        if ne[0] % block == 0:
            return target
        self.n_fallback += 1
        if target in FALLBACKS:
            out = FALLBACKS[target]
        elif block <= 32:
            out = target  # already a 32-block type: only F16 below can help
        else:
            raise ValueError(f"no tensor type fallback is defined for type {target.name}")
        if ne[0] % GGML_QUANT_SIZES[out][0]:
            out = T.F16  # row not even a multiple of 32: llama.cpp falls back to F16
        return out
