"""Qwen2 (Qwen2.5, Qwen2.5-Coder): llama blocks with q/k/v biases and NEOX rope
(llama.cpp src/models/qwen2.cpp). The biases are bound by name in base.Attention."""

from __future__ import annotations

from ..ops.rope import ROPE_NEOX
from .llama import LlamaModel


class Qwen2Model(LlamaModel):
    rope_mode = ROPE_NEOX
