"""CTranslate2 model.bin -> our whisper GGUF: metadata against the folder's own tokenizer.json,
positions against whisper's sinusoid formula, and clear errors for bad files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from llamacpy.convert.ctranslate2 import CT2Error, read_model_bin
from llamacpy.hub import CATALOG
from llamacpy.hub.catalog import sha256_file


def test_model_bin_is_the_catalogued_one(ct2_folder):
    assert sha256_file(ct2_folder / "model.bin") == CATALOG["whisper-tiny.en"].sha256


def test_special_tokens_match_tokenizer_json(ct2_folder, whisper_gguf):
    added = {t["content"]: t["id"] for t in
             json.loads((ct2_folder / "tokenizer.json").read_text())["added_tokens"]}
    g = whisper_gguf.get
    assert g("whisper.token.sot") == added["<|startoftranscript|>"] == 50257
    assert g("whisper.token.eot") == added["<|endoftext|>"] == 50256
    assert g("whisper.token.no_timestamps") == added["<|notimestamps|>"]
    assert g("whisper.token.transcribe") == added["<|transcribe|>"]
    # tokenizer.json stops at <|notimestamps|>; 1501 timestamps (0.00 .. 30.00) follow it
    assert g("whisper.token.timestamp_begin") == added["<|notimestamps|>"] + 1
    assert len(g("tokenizer.ggml.tokens")) - g("whisper.token.timestamp_begin") == 1501
    assert g("whisper.multilingual") is False
    assert len(g("tokenizer.ggml.merges")) == 50000


def test_shapes_and_hparams(whisper_gguf):
    g = whisper_gguf
    assert (g.get("whisper.embedding_length"), g.get("whisper.encoder.block_count"),
            g.get("whisper.attention.head_count"), g.get("whisper.n_mels")) == (384, 4, 6, 80)
    assert g.tensor("enc.conv1.weight").ne == (3, 80, 384)
    assert g.tensor("dec.blk.0.attn_q.weight").ne == (384, 384)
    assert g.tensor("dec.blk.3.cross_attn_v.weight").ne == (384, 384)
    assert "enc.blk.0.attn_k.bias" not in g.tensors  # whisper's K has no bias
    assert "enc.blk.0.attn_q.bias" in g.tensors


def test_encoder_positions_are_whisper_sinusoids(whisper_gguf):
    # whisper/model.py sinusoids(length, channels)
    length, channels = 1500, 384
    inc = np.log(10000) / (channels // 2 - 1)
    inv = np.exp(-inc * np.arange(channels // 2))
    t = np.arange(length)[:, None] * inv[None, :]
    ref = np.concatenate([np.sin(t), np.cos(t)], axis=1)
    ours = whisper_gguf.tensor("enc.position_embd.weight").data.view(np.float32).reshape(length, -1)
    np.testing.assert_allclose(ours, ref, atol=2e-3)  # stored as float16 by CTranslate2


def test_truncated_model_bin_is_a_clear_error(ct2_folder, tmp_path):
    cut = tmp_path / "model.bin"
    cut.write_bytes((ct2_folder / "model.bin").read_bytes()[:100_000])
    with pytest.raises(CT2Error, match="truncated"):
        read_model_bin(cut)


def test_other_binary_version_is_refused(tmp_path):
    bad = tmp_path / "model.bin"
    bad.write_bytes(struct.pack("<I", 3) + b"\0" * 16)
    with pytest.raises(CT2Error, match="binary version 3"):
        read_model_bin(bad)


@pytest.mark.parametrize("text", [" Hello world, this is a test.",
                                  " The fox's 123 jumps\u2014\u00fcber na\u00efve \u65e5\u672c\u8a9e!",
                                  "  spaces\nand\ttabs"])
def test_tokenizer_matches_hugging_face(whisper_gguf, ct2_folder, text):
    """Our BPE over the converted vocabulary and merges against tokenizers on tokenizer.json."""
    tokenizers = pytest.importorskip("tokenizers")
    from llamacpy.audio.transcribe import tokens_to_text
    from llamacpy.tokenizer.tokenizer import Tokenizer

    ref = tokenizers.Tokenizer.from_file(str(ct2_folder / "tokenizer.json"))
    ids = Tokenizer.from_gguf(whisper_gguf).tokenize(text, add_special=False)
    assert ids == ref.encode(text, add_special_tokens=False).ids
    assert tokens_to_text(whisper_gguf.require("tokenizer.ggml.tokens"), ids) == ref.decode(ids)
