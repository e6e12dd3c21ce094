"""Qwen3: Qwen2 blocks without biases and with per-head RMS norms on q and k before rope
(llama.cpp src/models/qwen3.cpp). base.Attention binds attn_q_norm / attn_k_norm by name."""

from __future__ import annotations

from .qwen2 import Qwen2Model


class Qwen3Model(Qwen2Model):
    pass
