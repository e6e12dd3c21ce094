"""whisper-base (multilingual, the model.bin joined from two wheels) against CTranslate2 float32:
encoder output and greedy tokens with the <|en|> <|transcribe|> prompt."""

from __future__ import annotations

import numpy as np
import pytest

from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, greedy_tokens, language_token, prompt_tokens
from llamacpy.format import open_gguf
from llamacpy.hub import CATALOG, pull
from llamacpy.hub.catalog import sha256_file

from .conftest import unpacked_ct2_folder

ctranslate2 = pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def base():
    from llamacpy.models.whisper import WhisperModel

    folder = unpacked_ct2_folder("whisper-base")
    g = open_gguf(pull("whisper-base", quiet=True))
    ref = ctranslate2.models.Whisper(str(folder), compute_type="float32", intra_threads=1)
    return folder, g, WhisperModel(g), ref


def test_joined_model_bin_and_metadata(base):
    folder, g, _, _ = base
    assert sha256_file(folder / "model.bin") == CATALOG["whisper-base"].sha256
    assert g.get("whisper.multilingual") is True and g.get("whisper.embedding_length") == 512
    assert g.get("whisper.token.sot") == 50258 and g.get("whisper.token.eot") == 50257
    assert language_token(g, "en") == 50259
    with pytest.raises(ValueError, match="unknown language 'xx'"):
        language_token(g, "xx")


def test_base_matches_ctranslate2(base, speak):
    _, g, model, ref = base
    mel = pad_or_trim(log_mel_spectrogram(speak("The quick brown fox jumps over the lazy dog."),
                                          80, padding=N_SAMPLES))
    view = ctranslate2.StorageView.from_array(mel[None])
    enc, enc_ref = model.encode(mel), np.array(ref.encode(view, to_cpu=True))[0]
    assert np.linalg.norm(enc - enc_ref) / np.linalg.norm(enc_ref) < 1e-4
    sp = SpecialTokens.from_gguf(g)
    prompt = prompt_tokens(sp, language_token(g, "en"))
    assert prompt == [50258, 50259, 50359, 50363]
    ours = greedy_tokens(model, sp, mel, prompt)
    theirs = ref.generate(view, [prompt], beam_size=1, max_length=448)[0].sequences_ids[0]
    assert ours == [t for t in theirs if t < sp.eot] and len(ours) > 5
