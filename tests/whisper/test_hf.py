"""convert-hf-to-gguf on WhisperForConditionalGeneration (convert/whisper.py): a random checkpoint
made with transformers gives transformers' logits; tiny.en written out as a Hugging Face
checkpoint converts back into the same tensors and metadata as the catalogue's conversion; a
checkpoint we cannot run is one clear error."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from llamacpy.convert import ConvertError, Options, convert
from llamacpy.convert.whisper import hf_state_dict
from llamacpy.format import open_gguf
from llamacpy.format.constants import GGMLType

from .test_reference import transformers_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow

TINY = {"d_model": 384, "encoder_layers": 4, "decoder_layers": 4, "encoder_attention_heads": 6,
        "decoder_attention_heads": 6, "encoder_ffn_dim": 1536, "decoder_ffn_dim": 1536}


@pytest.fixture(scope="module")
def random_checkpoint(tmp_path_factory, ct2_folder):
    """A WhisperForConditionalGeneration with whisper-tiny's dimensions and random weights
    (every parameter drawn, biases too), saved by transformers with tiny.en's tokenizer."""
    folder = tmp_path_factory.mktemp("hf") / "whisper-random"
    torch.manual_seed(0)
    model = transformers.WhisperForConditionalGeneration(
        transformers.WhisperConfig(vocab_size=51864, **TINY)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1 if p.ndim > 1 else 0.05)
    model.save_pretrained(folder)
    shutil.copy(ct2_folder / "tokenizer.json", folder)
    return folder, model


def test_random_checkpoint_logits_equal_transformers(random_checkpoint, tmp_path):
    from llamacpy.models.whisper import WhisperModel

    folder, ref = random_checkpoint
    g = open_gguf(convert(folder, Options(outfile=tmp_path / "w.gguf", outtype="f32")))
    assert g.get("general.architecture") == "whisper"
    assert g.get("whisper.token.timestamp_begin") == 50363
    assert "dec.blk.0.attn_k.bias" not in g.tensors and "dec.blk.0.attn_q.bias" in g.tensors
    ours = WhisperModel(g)
    mel = np.random.default_rng(1).standard_normal((80, 3000)).astype(np.float32)
    tokens = [50257, 50362, 464, 2068, 7586, 21831, 18045, 625, 262]
    with torch.no_grad():
        ref_enc = ref.model.encoder(torch.from_numpy(mel[None])).last_hidden_state
        ref_logits = ref(encoder_outputs=(ref_enc,),
                         decoder_input_ids=torch.tensor([tokens])).logits[0].numpy()
    enc = ours.encode(mel)
    ref_enc = ref_enc[0].numpy()
    assert np.linalg.norm(enc - ref_enc) / np.linalg.norm(ref_enc) < 1e-5
    logits = ours.decode(tokens, ours.new_cache(enc))
    np.testing.assert_allclose(logits, ref_logits, atol=2e-5 * np.abs(ref_logits).max())


def test_default_outtype_is_f16_with_f32_vectors(random_checkpoint, tmp_path):
    folder, _ = random_checkpoint
    g = open_gguf(convert(folder, Options(outfile=tmp_path / "w.gguf")))
    types = {n: t.ggml_type for n, t in g.tensors.items()}
    assert types["enc.blk.0.attn_q.weight"] == types["enc.conv1.weight"] == GGMLType.F16
    assert types["enc.position_embd.weight"] == types["dec.position_embd.weight"] == GGMLType.F32
    assert types["enc.blk.0.attn_norm.weight"] == types["dec.blk.0.ffn_up.bias"] == GGMLType.F32


def hf_checkpoint_of(g, ct2_folder, folder):
    """One of our GGUFs written as a transformers checkpoint (config, generation_config with
    the CTranslate2 folder's suppress lists, safetensors, tokenizer.json)."""
    model = transformers_model(g)
    model.save_pretrained(folder)
    ct2 = json.loads((ct2_folder / "config.json").read_text())
    tokens = g.require("tokenizer.ggml.tokens")
    gen = {"suppress_tokens": ct2["suppress_ids"], "begin_suppress_tokens": ct2["suppress_ids_begin"],
           "lang_to_id": {tokens[i]: i for i in ct2["lang_ids"]},
           "alignment_heads": ct2["alignment_heads"]}
    (folder / "generation_config.json").write_text(json.dumps(gen))
    shutil.copy(ct2_folder / "tokenizer.json", folder)
    return folder


def test_tiny_en_round_trips_through_hugging_face_names(whisper_gguf, ct2_folder, tmp_path):
    folder = hf_checkpoint_of(whisper_gguf, ct2_folder, tmp_path / "tiny.en")
    g = open_gguf(convert(folder, Options(outfile=tmp_path / "back.gguf", outtype="f16")))
    original = whisper_gguf
    assert sorted(g.tensors) == sorted(original.tensors)
    for name, t in original.tensors.items():
        assert (g.tensor(name).ggml_type, g.tensor(name).ne) == (t.ggml_type, t.ne), name
        assert np.array_equal(g.tensor(name).data, t.data), name
    for key, value in original.metadata.items():
        if key.startswith(("whisper.", "tokenizer.")):
            assert plain(g.get(key)) == plain(value), key


def plain(value):
    return value.tolist() if isinstance(value, np.ndarray) else value


def test_reverse_mapping_names_every_transformers_parameter(whisper_gguf):
    expected = transformers.WhisperForConditionalGeneration(transformers.WhisperConfig(
        vocab_size=51864, **TINY)).state_dict()
    state = hf_state_dict(whisper_gguf)
    assert set(state) == set(expected)  # tiny.en has tiny's dimensions
    assert all(state[k].shape == tuple(v.shape) for k, v in expected.items())


def test_untied_output_projection_is_refused(random_checkpoint, tmp_path):
    folder, _ = random_checkpoint
    copy = tmp_path / "untied"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": False}))
    with pytest.raises(ConvertError, match="untied proj_out"):
        convert(copy, Options(outfile=tmp_path / "x.gguf", dry_run=True))
