"""Whisper with Q8_0 and Q5_0 matrices through ops.linear's quantized kernels: the encoder equals
(to float32 rounding) the same model with those weights dequantized to F32, stays close to the
F16 file, and Q8_0's greedy transcript is the F16 one."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, greedy_tokens, prompt_tokens
from llamacpy.format import open_gguf
from llamacpy.format.constants import GGMLType
from llamacpy.format.writer import TensorToWrite, write_gguf
from llamacpy.models.whisper import WhisperModel
from llamacpy.quants.base import dequantize, quantize

SKIP = ("norm", "position_embd", "conv")  # vectors, position tables and convolutions stay


def _requantized(g, path, ggml_type: GGMLType, then_f32: bool = False):
    """A copy of `g` with every 2-D projection / embedding matrix re-encoded as `ggml_type`
    (`then_f32`: and decoded again, stored as F32)."""
    tensors = []
    for t in g.tensors.values():
        quant = len(t.ne) == 2 and not any(s in t.name for s in SKIP)
        if quant:
            q = quantize(dequantize(t.data, t.ggml_type, t.ne), ggml_type)
            if then_f32:
                tensors.append(TensorToWrite(t.name, GGMLType.F32, t.ne, lambda q=q, ne=t.ne: dequantize(
                    q, ggml_type, ne).astype(np.float32)))
            else:
                tensors.append(TensorToWrite(t.name, ggml_type, t.ne, lambda q=q: q))
        else:
            tensors.append(TensorToWrite(t.name, t.ggml_type, t.ne, lambda t=t: t.data))
    meta = {k: v for k, v in g.metadata.items() if not k.startswith("GGUF.")}
    write_gguf(path, meta, tensors, value_types=g.value_types)
    return open_gguf(path)


@pytest.mark.slow
@pytest.mark.parametrize("ggml_type, max_rel", [(GGMLType.Q8_0, 0.01), (GGMLType.Q5_0, 0.12)])
def test_quantized_whisper_matches_f16(whisper_gguf, whisper_model, speak, tmp_path, ggml_type,
                                       max_rel):
    g = _requantized(whisper_gguf, tmp_path / "q.gguf", ggml_type)
    assert g.tensor("enc.blk.0.attn_q.weight").ggml_type == ggml_type
    model = WhisperModel(g)
    mel = pad_or_trim(log_mel_spectrogram(speak("The quick brown fox jumps over the lazy dog."),
                                          80, padding=N_SAMPLES))
    ours = model.encode(mel)
    exact = WhisperModel(_requantized(whisper_gguf, tmp_path / "f.gguf", ggml_type, True))
    rel = lambda a, b: np.linalg.norm(a - b) / np.linalg.norm(b)
    assert rel(ours, exact.encode(mel)) < 1e-4  # the kernels compute what the weights say
    assert rel(ours, whisper_model.encode(mel)) < max_rel  # tiny.en at 5 bits: ~8%
    sp = SpecialTokens.from_gguf(g)
    tokens = greedy_tokens(model, sp, mel, prompt_tokens(sp))
    if ggml_type == GGMLType.Q8_0:
        assert tokens == greedy_tokens(whisper_model, sp, mel, prompt_tokens(sp))
    assert tokens == greedy_tokens(exact, sp, mel, prompt_tokens(sp))
