"""Language detection (whisper_lang_auto_detect) with the multilingual whisper-base on espeak-ng
German and Spanish speech: the language probabilities against CTranslate2's detect_language on
the same mel, transcribe(language="auto"), and --translate giving English text."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from llamacpy.audio.language import detect_language
from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
from llamacpy.audio.transcribe import SpecialTokens, TranscribeOptions, transcribe
from llamacpy.format import open_gguf
from llamacpy.hub import pull

from .conftest import read_wav_16k, unpacked_ct2_folder

ctranslate2 = pytest.importorskip("ctranslate2")
pytestmark = pytest.mark.slow
SPEECH = {"de": "Der schnelle braune Fuchs springt über den faulen Hund. Ich trinke gerne "
                "Kaffee am Morgen.",
          "es": "El rápido zorro marrón salta sobre el perro perezoso. Me gusta beber café por "
                "la mañana."}


@pytest.fixture(scope="module")
def base():
    from llamacpy.models.whisper import WhisperModel

    g = open_gguf(pull("whisper-base", quiet=True))
    ref = ctranslate2.models.Whisper(str(unpacked_ct2_folder("whisper-base")),
                                     compute_type="float32", intra_threads=1)
    return g, WhisperModel(g), ref


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    folder = tmp_path_factory.mktemp("foreign")
    out = {}
    for lang, text in SPEECH.items():
        subprocess.run(["espeak-ng", "-v", lang, "-w", str(folder / f"{lang}.wav"), text],
                       check=True)
        out[lang] = read_wav_16k(folder / f"{lang}.wav")
    return out


@pytest.mark.parametrize("lang", sorted(SPEECH))
def test_detection_matches_ctranslate2(base, foreign, lang):
    g, model, ref = base
    mel = pad_or_trim(log_mel_spectrogram(foreign[lang], 80, padding=N_SAMPLES))
    code, probs = detect_language(g, model, SpecialTokens.from_gguf(g), model.encode(mel))
    theirs = dict(ref.detect_language(ctranslate2.StorageView.from_array(mel[None]))[0])
    assert code == lang and abs(sum(probs.values()) - 1) < 1e-6
    for c, p in probs.items():
        assert abs(p - theirs[f"<|{c}|>"]) < 1e-4, c
    if lang == "es":  # detect_language=True: the language alone, no transcription
        r = transcribe(g, model, foreign[lang], TranscribeOptions(language="auto",
                                                                  detect_language=True))
        assert r.segments == [] and r.language == "es" and r.language_probs == probs


def test_auto_language_and_translate(base, foreign):
    g, model, _ = base
    greedy = {"beam_size": 1, "temperature_inc": 0.0}
    r = transcribe(g, model, foreign["de"], TranscribeOptions(language="auto", **greedy))
    assert r.language == "de" and r.language_probs["de"] > 0.5
    assert "kaffee" in r.text.lower() and "morgen" in r.text.lower()
    r = transcribe(g, model, foreign["de"], TranscribeOptions(language="de", translate=True,
                                                              **greedy))
    words = r.text.lower()
    assert "morning" in words and "morgen" not in words and "kaffee" not in words
    assert np.mean([c.isascii() for c in r.text]) == 1.0
