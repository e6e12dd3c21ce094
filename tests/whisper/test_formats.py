"""Output formats byte for byte against whisper.cpp: the files and console lines its own
whisper-cli wrote (whispercpp_golden/, made by regenerate.py there) are rebuilt by our writers,
console printer and segment wrapper from the segments of its -ojf JSON; where pywhispercpp
(whisper.cpp as a library) is installed, its segments on the same audio give the same files."""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from llamacpy.audio import formats
from llamacpy.audio.token_times import wrap_segment

GOLDEN = Path(__file__).parent / "whispercpp_golden"
CLIPS = ["quotes", "two_windows"]
WRITERS = {".txt": formats.to_txt, ".srt": formats.to_srt, ".vtt": formats.to_vtt,
           ".csv": formats.to_csv, ".lrc": formats.to_lrc}


@dataclass(frozen=True)
class Tok:
    id: int
    text: str
    p: float
    t0: float | None
    t1: float | None
    t_dtw: float = -1.0


@dataclass(frozen=True)
class Seg:
    start: float
    end: float
    text: str
    tokens: tuple[Tok, ...] = ()
    seek: int = 0


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def read_json(name: str) -> tuple[dict, list[Seg]]:
    """whisper.cpp's JSON: its header fields and segments (with -ojf tokens and times)."""
    doc = json.loads(golden(name).decode("utf-8"))
    segs = []
    for s in doc.pop("transcription"):
        toks = tuple(Tok(t["id"], t["text"], t["p"],
                         t["offsets"]["from"] / 1000 if "offsets" in t else None,
                         t["offsets"]["to"] / 1000 if "offsets" in t else None, t["t_dtw"])
                     for t in s.get("tokens", []))
        segs.append(Seg(s["offsets"]["from"] / 1000, s["offsets"]["to"] / 1000, s["text"], toks))
    return doc, segs


def json_entries(segs: list[Seg], full: bool) -> list[dict]:
    return [formats.json_segment(s, [formats.json_token(t.text, t.id, t.p, t.t0, t.t1, t.t_dtw)
                                     for t in s.tokens] if full else None) for s in segs]


@pytest.mark.parametrize("clip", CLIPS)
def test_writers_rebuild_whisper_cpp_files(clip):
    _, segs = read_json(f"{clip}.json")
    assert len(segs) >= 2
    for ext, write in WRITERS.items():
        assert write(segs).encode() == golden(clip + ext), ext


@pytest.mark.parametrize("clip", CLIPS)
def test_json_and_json_full_rebuild_whisper_cpp_files(clip):
    header, segs = read_json(f"{clip}.json")
    assert list(header) == ["systeminfo", "model", "params", "result"]
    assert formats.to_json(header, json_entries(segs, True)).encode() == golden(f"{clip}.json")
    header, segs = read_json(f"{clip}.oj.json")
    assert formats.to_json(header, json_entries(segs, False)).encode() == \
        golden(f"{clip}.oj.json")


@pytest.mark.parametrize("clip", CLIPS)
def test_score_file(clip):
    _, segs = read_json(f"{clip}.json")
    tokens = [(t.text, t.p) for s in segs for t in s.tokens]
    ours = formats.to_score(tokens).splitlines()
    theirs = golden(f"{clip}.score.txt").decode().splitlines()
    # same tokens; p differs in the last digits: the score run is its own decode
    assert [line.split("\t")[0] for line in ours] == [line.split("\t")[0] for line in theirs]
    assert all(abs(float(a.split("\t")[1]) - float(b.split("\t")[1])) < 1e-3
               for a, b in zip(ours, theirs))


@pytest.fixture(scope="module")
def vocab_and_sp(whisper_gguf):
    from llamacpy.audio.vocab import SpecialTokens

    return whisper_gguf.require("tokenizer.ggml.tokens"), SpecialTokens.from_gguf(whisper_gguf)


@pytest.mark.parametrize("clip", CLIPS)
@pytest.mark.parametrize(("suffix", "max_len", "split_on_word"),
                         [(".ml1", 1, False), (".ml24sow", 24, True)])
def test_max_len_wrapping_matches_whisper_cpp(clip, suffix, max_len, split_on_word,
                                             vocab_and_sp):
    vocab, sp = vocab_and_sp
    _, segs = read_json(f"{clip}.json")  # the unwrapped run: the same tokens and times
    wrapped = [w for s in segs for w in wrap_segment(s, vocab, sp, max_len, split_on_word)]
    assert formats.to_srt(wrapped).encode() == golden(f"{clip}{suffix}.srt")
    if (GOLDEN / f"{clip}{suffix}.json").exists():
        header, _ = read_json(f"{clip}{suffix}.json")
        full = formats.to_json(header, json_entries(wrapped, True))
        assert full.encode() == golden(f"{clip}{suffix}.json")


def _print(capsysbinary, segs, loaded=None, sp=None, **flags) -> bytes:
    from llamacpy.cli.whisper_cli import _print_segments

    args = argparse.Namespace(**{"no_timestamps": False, "print_colors": False,
                                 "print_confidence": False, "print_special": False,
                                 "max_len": 0, **flags})
    _print_segments(args, loaded, sp, segs)
    return capsysbinary.readouterr().out


@pytest.mark.parametrize("clip", CLIPS)
def test_console_lines_match_whisper_cpp(clip, capsysbinary):
    _, segs = read_json(f"{clip}.json")
    assert _print(capsysbinary, segs) == golden(f"{clip}.stdout")
    _, segs = read_json(f"{clip}.nt.json")  # -nt decodes without timestamps
    assert _print(capsysbinary, segs, no_timestamps=True) == golden(f"{clip}.nt.stdout")


def test_timestamps_past_an_hour_and_rounding():
    assert formats.timestamp(3723.456) == "01:02:03.460"  # 10 ms ticks
    assert formats.timestamp(3723.456, comma=True) == "01:02:03,460"
    seg = Seg(3600.0, 3725.5, ' a "quoted" \\ text')
    assert formats.to_lrc([seg]) == '[by:whisper.cpp]\n[60:00.00] a "quoted" \\ text\n'
    assert formats.to_csv([seg]) == 'start,end,text\n3600000,3725500," a ""quoted"" \\ text"\n'
    assert '"text": " a \\"quoted\\" \\\\ text"' in formats.to_json(
        {"systeminfo": ""}, [formats.json_segment(seg)])
    assert formats.to_srt([seg], offset_n=4).startswith("5\n01:00:00,000 --> 01:02:05,500\n")


def pywhispercpp_segments(wav: Path) -> list[Seg]:
    """whisper.cpp as a library (pywhispercpp) on a 16 kHz WAV with whisper-cli's decoding
    parameters; segment texts as whisper.cpp keeps them (pywhispercpp strips its own)."""
    import numpy as np
    from pywhispercpp.model import Model

    from .conftest import unpacked_ct2_folder
    from .test_ggml import ggml_tiny_en

    model = Model(str(ggml_tiny_en(unpacked_ct2_folder("whisper-tiny.en"))), n_threads=2,
                  redirect_whispercpp_logs_to=None, print_progress=False,
                  params_sampling_strategy=1, beam_search={"beam_size": 5, "patience": -1.0},
                  greedy={"best_of": 5})
    from llamacpy.audio.wav import read_wav

    audio = read_wav(wav)[0][:, 0].astype(np.float32)
    model.transcribe(audio)
    import _pywhispercpp as pw

    ctx = model._ctx
    return [Seg(pw.whisper_full_get_segment_t0(ctx, i) / 100,
                pw.whisper_full_get_segment_t1(ctx, i) / 100,
                pw.whisper_full_get_segment_text(ctx, i).decode("utf-8"))
            for i in range(pw.whisper_full_n_segments(ctx))]


@pytest.mark.parametrize("clip", ["quotes"])
def test_pywhispercpp_segments_give_whisper_cpp_files(clip, tmp_path):
    pytest.importorskip("pywhispercpp", reason="pywhispercpp (whisper.cpp) is not installed")
    if shutil.which("espeak-ng") is None or shutil.which("ffmpeg") is None:
        pytest.skip("espeak-ng and ffmpeg make the test speech")
    from .whispercpp_golden.regenerate import CLIPS as TEXTS
    from .whispercpp_golden.regenerate import speech

    wav = tmp_path / f"{clip}.wav"
    speech(TEXTS[clip], str(wav))
    if hashlib.sha256(wav.read_bytes()).hexdigest() != golden(f"{clip}.wav.sha256").decode().strip():
        pytest.skip("espeak-ng / ffmpeg here make other audio than the golden files were made of")
    segs = pywhispercpp_segments(wav)
    for ext, write in WRITERS.items():
        assert write(segs).encode() == golden(clip + ext), ext


def test_token_times_equal_whisper_cpp(whisper_gguf, whisper_model, tmp_path):
    """On a clip where our decoder picks whisper.cpp's tokens, the token times of the same
    segments (whisper.cpp's ends: its F16 arithmetic picks the closing timestamp a step apart)
    equal whisper.cpp's -ojf times."""
    import dataclasses

    from llamacpy.audio.token_times import with_token_times
    from llamacpy.audio.transcribe import TranscribeOptions, transcribe
    from llamacpy.audio.vocab import SpecialTokens
    from llamacpy.audio.wav import load_audio

    from .whispercpp_golden.regenerate import TIMING_CLIP, speech

    if shutil.which("espeak-ng") is None or shutil.which("ffmpeg") is None:
        pytest.skip("espeak-ng and ffmpeg make the test speech")
    name, text = TIMING_CLIP
    wav = tmp_path / f"{name}.wav"
    speech(text, str(wav))
    if hashlib.sha256(wav.read_bytes()).hexdigest() != golden(f"{name}.wav.sha256").decode().strip():
        pytest.skip("espeak-ng / ffmpeg here make other audio than the golden files were made of")
    audio = load_audio(wav)
    ours = transcribe(whisper_gguf, whisper_model, audio, TranscribeOptions(beam_size=1)).segments
    _, theirs = read_json(f"{name}.json")
    assert [[t.id for t in s.tokens][:-1] for s in ours] == \
        [[t.id for t in s.tokens][:-1] for s in theirs]
    same_ends = [dataclasses.replace(s, end=t.end) for s, t in zip(ours, theirs)]
    timed = with_token_times(same_ends, audio, whisper_gguf.require("tokenizer.ggml.tokens"),
                             SpecialTokens.from_gguf(whisper_gguf))
    got = [(round(t.t0 * 100), round(t.t1 * 100)) for s in timed for t in s.tokens]
    want = [(round(t.t0 * 100), round(t.t1 * 100)) for s in theirs for t in s.tokens]
    assert got == want


def test_print_special_texts_match_whisper_cpp(whisper_gguf, vocab_and_sp, capsysbinary):
    """-ps: the special tokens join each text, a later segment's opening timestamp too."""
    from types import SimpleNamespace

    from llamacpy.cli.whisper_cli import _render

    _, sp = vocab_and_sp
    _, segs = read_json("quotes.json")  # one window: every segment's seek is 0
    loaded = SimpleNamespace(g=whisper_gguf)
    assert _print(capsysbinary, segs, print_special=True, loaded=loaded, sp=sp) == \
        golden("quotes.ps.stdout")
    args = argparse.Namespace(print_special=True, max_len=0, offset_n=0)
    result = SimpleNamespace(segments=segs)
    assert _render("output_srt", args, loaded, sp, result).encode() == golden("quotes.ps.srt")


@pytest.mark.parametrize(("suffix", "flag"), [(".pc", "print_colors"),
                                              (".conf", "print_confidence")])
def test_colored_console_matches_whisper_cpp(suffix, flag, whisper_gguf, vocab_and_sp,
                                             capsysbinary):
    from types import SimpleNamespace

    _, segs = read_json("quotes.json")  # the same decode: the tokens' p pick the colours
    loaded = SimpleNamespace(g=whisper_gguf)
    got = _print(capsysbinary, segs, loaded=loaded, sp=vocab_and_sp[1], **{flag: True})
    assert got == golden(f"quotes{suffix}.stdout")
