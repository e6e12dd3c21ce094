"""OpenAI's whisper package (the reference implementation) running the catalogue's CTranslate2
weights: the fused projections split back into its state-dict names."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from llamacpy.convert.ctranslate2 import read_model_bin


def _block(v: dict, src: str, dst: str, cross: bool) -> dict:
    sd = {}
    sa = f"{src}/self_attention"
    qkv_w, qkv_b = v[f"{sa}/linear_0/weight"], v[f"{sa}/linear_0/bias"]
    d = qkv_w.shape[1]
    sd |= {f"{dst}.attn.query.weight": qkv_w[:d], f"{dst}.attn.query.bias": qkv_b[:d],
           f"{dst}.attn.key.weight": qkv_w[d:2 * d],
           f"{dst}.attn.value.weight": qkv_w[2 * d:], f"{dst}.attn.value.bias": qkv_b[2 * d:],
           f"{dst}.attn.out.weight": v[f"{sa}/linear_1/weight"],
           f"{dst}.attn.out.bias": v[f"{sa}/linear_1/bias"],
           f"{dst}.attn_ln.weight": v[f"{sa}/layer_norm/gamma"],
           f"{dst}.attn_ln.bias": v[f"{sa}/layer_norm/beta"]}
    if cross:
        ca = f"{src}/attention"
        kv_w, kv_b = v[f"{ca}/linear_1/weight"], v[f"{ca}/linear_1/bias"]
        sd |= {f"{dst}.cross_attn.query.weight": v[f"{ca}/linear_0/weight"],
               f"{dst}.cross_attn.query.bias": v[f"{ca}/linear_0/bias"],
               f"{dst}.cross_attn.key.weight": kv_w[:d],
               f"{dst}.cross_attn.value.weight": kv_w[d:], f"{dst}.cross_attn.value.bias": kv_b[d:],
               f"{dst}.cross_attn.out.weight": v[f"{ca}/linear_2/weight"],
               f"{dst}.cross_attn.out.bias": v[f"{ca}/linear_2/bias"],
               f"{dst}.cross_attn_ln.weight": v[f"{ca}/layer_norm/gamma"],
               f"{dst}.cross_attn_ln.bias": v[f"{ca}/layer_norm/beta"]}
    f = f"{src}/ffn"
    sd |= {f"{dst}.mlp.0.weight": v[f"{f}/linear_0/weight"], f"{dst}.mlp.0.bias": v[f"{f}/linear_0/bias"],
           f"{dst}.mlp.2.weight": v[f"{f}/linear_1/weight"], f"{dst}.mlp.2.bias": v[f"{f}/linear_1/bias"],
           f"{dst}.mlp_ln.weight": v[f"{f}/layer_norm/gamma"],
           f"{dst}.mlp_ln.bias": v[f"{f}/layer_norm/beta"]}
    return sd


def openai_whisper_model(folder: Path):
    """whisper.model.Whisper (float32) holding the folder's model.bin weights."""
    import torch
    from whisper.model import ModelDimensions, Whisper

    _, v = read_model_bin(folder / "model.bin")
    n = lambda side: sum(1 for k in v if k.startswith(f"{side}/layer_") and k.endswith("ffn/linear_0/weight"))
    d = v["encoder/conv1/weight"].shape[0]
    sd = {"encoder.conv1.weight": v["encoder/conv1/weight"], "encoder.conv1.bias": v["encoder/conv1/bias"],
          "encoder.conv2.weight": v["encoder/conv2/weight"], "encoder.conv2.bias": v["encoder/conv2/bias"],
          "encoder.positional_embedding": v["encoder/position_encodings/encodings"],
          "encoder.ln_post.weight": v["encoder/layer_norm/gamma"],
          "encoder.ln_post.bias": v["encoder/layer_norm/beta"],
          "decoder.token_embedding.weight": v["decoder/embeddings/weight"],
          "decoder.positional_embedding": v["decoder/position_encodings/encodings"],
          "decoder.ln.weight": v["decoder/layer_norm/gamma"], "decoder.ln.bias": v["decoder/layer_norm/beta"]}
    for i in range(n("encoder")):
        sd |= _block(v, f"encoder/layer_{i}", f"encoder.blocks.{i}", False)
    for i in range(n("decoder")):
        sd |= _block(v, f"decoder/layer_{i}", f"decoder.blocks.{i}", True)
    heads = int(v["encoder/num_heads"].reshape(-1)[0])
    dims = ModelDimensions(n_mels=v["encoder/conv1/weight"].shape[1], n_audio_ctx=1500,
                           n_audio_state=d, n_audio_head=heads, n_audio_layer=n("encoder"),
                           n_vocab=v["decoder/embeddings/weight"].shape[0], n_text_ctx=448,
                           n_text_state=d, n_text_head=heads, n_text_layer=n("decoder"))
    model = Whisper(dims)
    model.load_state_dict({k: torch.from_numpy(np.asarray(a, np.float32)) for k, a in sd.items()})
    return model.float().eval()
