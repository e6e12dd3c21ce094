"""Qwen3ForCausalLM -> `qwen3` (llama.cpp: Qwen3Model): Qwen2's tensors plus Q/K norms."""

from __future__ import annotations

from .decoder import DECODER_BLOCKS, QK_NORM_BLOCKS
from .qwen2 import Qwen2Converter
from .safetensors import ConvertError


class Qwen3Converter(Qwen2Converter):
    arch = "qwen3"
    hf_archs = ("Qwen3ForCausalLM", "Qwen3Model")
    block_map = {**DECODER_BLOCKS, **QK_NORM_BLOCKS}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self._is_reranker():
            raise ConvertError("Qwen3 reranker checkpoints are not supported by llamacpy's "
                               "converter yet")

    def _is_reranker(self) -> bool:
        readme = self.dir / "README.md"
        text = readme.read_text(encoding="utf-8").lower() if readme.is_file() else ""
        hints = [h.lower() for h in (self.dir.name, str(self.hp.get("_name_or_path", "")),
                                     str(self.hp.get("model_type", "")), self.hf_arch or "") if h]
        return ("# qwen3-reranker" in text or "# qwen3-vl-reranker" in text
                or any("qwen3-reranker" in h or "qwen3-vl-reranker" in h for h in hints)
                or "sequenceclassification" in (self.hf_arch or "").lower())

    def modify(self, data, name, bid):
        if self.hf_arch == "Qwen3Model":
            name = "model." + name
        yield self.map_name(name), data
