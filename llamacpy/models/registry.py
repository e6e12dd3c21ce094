"""Architectures by `general.architecture`, as llama.cpp's llm_arch names them."""

from __future__ import annotations


from ..format import GGUFError, GGUFFile
from ..format.constants import Keys
from .bert import BertModel
from .gemma3 import Gemma3Model
from .llama import LlamaModel
from .qwen2 import Qwen2Model
from .qwen3 import Qwen3Model
from .qwen35 import Qwen35Model

ARCHITECTURES = {
    "llama": LlamaModel,
    "qwen2": Qwen2Model,
    "qwen3": Qwen3Model,
    "qwen35": Qwen35Model,
    "gemma3": Gemma3Model,
    "bert": BertModel,
}


def load_model(g: GGUFFile, repack: bool = False):
    """The model object for an opened GGUF file; an unknown architecture is a clear error.
    `repack`: re-encode Q5_0/IQ4_NL matrices as Q8_0 (llama.cpp's --repack): faster multi-token
    steps, 1.5x their bytes in memory (see models/base.Weights)."""
    arch = g.require(Keys.General.ARCHITECTURE)
    if arch not in ARCHITECTURES:
        raise GGUFError(f"{g.path}: unknown model architecture '{arch}' "
                        f"(llamacpy supports: {', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[arch](g, repack)
