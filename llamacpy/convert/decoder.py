"""Tensor names shared by the Llama-style decoders (gguf-py tensor_mapping.py, the entries these
architectures use): every decoder file starts from these maps and adds its own."""

DECODER_GLOBALS = {
    "model.embed_tokens": "token_embd",
    "model.norm": "output_norm",
    "lm_head": "output",
}
DECODER_BLOCKS = {
    "model.layers.{bid}.input_layernorm": "blk.{bid}.attn_norm",
    "model.layers.{bid}.self_attn.q_proj": "blk.{bid}.attn_q",
    "model.layers.{bid}.self_attn.k_proj": "blk.{bid}.attn_k",
    "model.layers.{bid}.self_attn.v_proj": "blk.{bid}.attn_v",
    "model.layers.{bid}.self_attn.o_proj": "blk.{bid}.attn_output",
    "model.layers.{bid}.post_attention_layernorm": "blk.{bid}.ffn_norm",
    "model.layers.{bid}.mlp.gate_proj": "blk.{bid}.ffn_gate",
    "model.layers.{bid}.mlp.up_proj": "blk.{bid}.ffn_up",
    "model.layers.{bid}.mlp.down_proj": "blk.{bid}.ffn_down",
}
QK_NORM_BLOCKS = {
    "model.layers.{bid}.self_attn.q_norm": "blk.{bid}.attn_q_norm",
    "model.layers.{bid}.self_attn.k_norm": "blk.{bid}.attn_k_norm",
}
