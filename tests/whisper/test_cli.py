"""whisper-cli end to end: whisper.cpp's console lines, output files and their names, the JSON
layout against whisper.cpp's own file, token times and -ml, ggml-*.bin and catalogue models,
ffmpeg input, and one line plus a non-zero status for every refusal and bad input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llamacpy.cli.whisper_cli import REFUSED, main

FAST = ["-m", "whisper-tiny.en", "-t", "2", "-bs", "1"]  # greedy: the same code, less time
GOLDEN = Path(__file__).parent / "whispercpp_golden"


@pytest.fixture(scope="module")
def hello(tmp_path_factory) -> Path:
    """espeak-ng saying two short sentences, as a 22.05 kHz WAV."""
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng)")
    path = tmp_path_factory.mktemp("cli") / "hello.wav"
    subprocess.run(["espeak-ng", "-w", str(path), "Hello there. The sun is shining today."],
                   check=True)
    return path


def one_error_line(capsys, code: int, got: int, *needles: str) -> str:
    """The status, and exactly one error line (beside whisper.cpp's informational lines)."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert got == code and len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith("whisper-cli: error: ")
    for n in needles:
        assert n in errors[0]
    return errors[0]


@pytest.mark.parametrize("names,takes_value,why", REFUSED[:8] + REFUSED[10:12])
def test_refused_flags_end_with_one_line(names, takes_value, why, capsys, tmp_path):
    argv = [names[0], *(["x"] if takes_value else []), "-f", str(tmp_path / "a.wav")]
    one_error_line(capsys, 2, main(argv), f"{names[0]} is not supported: {why}")


def test_usage_errors(capsys, tmp_path):
    one_error_line(capsys, 2, main(["-f", "a.wav", "--no-such-flag"]), "unknown argument")
    one_error_line(capsys, 2, main([]), "no input files")
    one_error_line(capsys, 2, main(["-p", "2", "a.wav"]), "-p (more than one processor")
    one_error_line(capsys, 1, main(["-m", str(tmp_path / "nope.bin"), "a.wav"]),
                   "cannot load model")


def test_decoding_options_refused_by_transcribe_are_one_line(hello, capsys):
    one_error_line(capsys, 1, main([*FAST, "-ac", "750", str(hello)]), "audio_ctx")
    one_error_line(capsys, 1, main([*FAST, "-bs", "9", str(hello)]), "too many decoders")


def test_bad_inputs_each_one_line_and_the_good_one_still_runs(hello, tmp_path, capsys):
    bad = {"fmtless.wav": b"RIFF\x04\x00\x00\x00WAVE", "notes.txt": b"just some text\n",
           "empty.wav": b""}
    for name, data in bad.items():
        (tmp_path / name).write_bytes(data)
    missing = tmp_path / "missing.wav"
    argv = [*FAST, *(str(tmp_path / n) for n in bad), str(missing), str(tmp_path), str(hello),
            "-nt", "-l", "de"]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == len(bad) + 2 and "Traceback" not in err
    assert all(e.startswith("whisper-cli: error: cannot read '") for e in errors)
    assert "WAV file without a 'fmt' chunk" in errors[0]
    # the good input after them: -nt runs the texts together after whisper.cpp's newline
    assert out.startswith("\n ") and "\n" not in out[1:] and "sun" in out.lower()
    # an English-only model given -l de warns and goes on in English, as whisper.cpp does
    assert "model is not multilingual, ignoring language and translation options" in err


@pytest.fixture(scope="module")
def run_a(hello, tmp_path_factory):
    """One run with most outputs: (stdout, stderr, input path)."""
    wav = tmp_path_factory.mktemp("run_a") / "talk.wav"
    shutil.copy(hello, wav)
    run = subprocess.run([sys.executable, "-m", "llamacpy.cli.whisper_cli", *FAST, "-f",
                          str(wav), "-osrt", "-otxt", "-ovtt", "-ocsv", "-olrc", "-oj", "-ls",
                          "-pp"], check=False, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout, run.stderr, wav


def test_console_output_and_default_file_names(run_a):
    from llamacpy.audio import formats

    out, err, wav = run_a
    doc = json.loads(Path(f"{wav}.json").read_text())
    segs = [(s["offsets"]["from"] / 1000, s["offsets"]["to"] / 1000, s["text"])
            for s in doc["transcription"]]
    assert segs and out == "\n" + "".join(
        f"[{formats.timestamp(a)} --> {formats.timestamp(b)}]  {t}\n" for a, b, t in segs)
    for ext in ("txt", "vtt", "srt", "csv", "json", "lrc"):  # <input>.ext, as whisper.cpp
        assert f"output_{ext}: saving output to '{wav}.{ext}'" in err
    assert f"output_score: saving output to '{wav}.score.txt'" in err
    assert Path(f"{wav}.txt").read_text() == "".join(f"{t}\n" for _, _, t in segs)
    assert Path(f"{wav}.srt").read_text().startswith("1\n00:00:00,000 --> ")
    assert "main: processing '" in err and "system_info: n_threads = 2" in err
    assert "whisper_print_progress_callback: progress = 100%" in err
    assert "whisper_print_timings:    total time =" in err


def _shape(x):
    """The keys of a JSON document, nested, in order (values left out)."""
    if isinstance(x, dict):
        return [(k, _shape(v)) for k, v in x.items()]
    if isinstance(x, list):
        return [_shape(x[0])] if x else []
    return type(x).__name__


def test_json_layout_is_whisper_cpp_s(run_a):
    _, _, wav = run_a
    ours = json.loads(Path(f"{wav}.json").read_text())
    theirs = json.loads((GOLDEN / "quotes.oj.json").read_text())
    assert _shape(ours) == _shape(theirs)
    assert ours["model"] == theirs["model"]  # the same tiny.en dims, vocab and ftype
    assert ours["params"] == {"model": "whisper-tiny.en", "language": "en", "translate": False}
    assert ours["result"] == {"language": "en"}


def test_score_file(run_a):
    _, _, wav = run_a
    score = Path(f"{wav}.score.txt").read_text().splitlines()
    assert score[0].startswith("[_BEG_]\t") and score[-1].startswith("[_TT_")
    assert all(0 <= float(r.split("\t")[1]) <= 1 for r in score)


def test_json_full_token_times_and_max_len(run_a, tmp_path, capsys):
    _, _, wav = run_a
    base = tmp_path / "w"
    assert main([*FAST, str(wav), "-ojf", "-ml", "1", "-sow", "-osrt", "-of", str(base)]) == 0
    full = json.loads(Path(f"{base}.json").read_text())
    theirs = json.loads((GOLDEN / "quotes.json").read_text())
    assert _shape(full) == _shape(theirs)
    tokens = [t for s in full["transcription"] for t in s["tokens"]]
    assert tokens[0]["text"] == "[_BEG_]" and tokens[-1]["text"].startswith("[_TT_")
    starts = [t["offsets"]["from"] for t in tokens]
    assert starts == sorted(starts) and 0 < starts[-1] <= 4000  # token times, in order
    texts = [s["text"] for s in full["transcription"]]  # -ml 1 -sow: a word a segment
    assert all(len(t.split()) <= 1 for t in texts) and len(texts) >= 5
    plain = Path(f"{wav}.txt").read_text().split()
    assert " ".join(t.strip() for t in texts if t.strip()).split() == plain


def test_output_to_stdout(hello, capsys):
    assert main([*FAST, str(hello), "-otxt", "-osrt", "-of", "-"]) == 0
    out, err = capsys.readouterr()
    # '-': no console lines, the first format (txt) on stdout, a warning for the second
    assert out.startswith(" ") and out.endswith("\n") and "-->" not in out
    assert "warning: Not appending multiple file formats to stdout" in err


def test_whisper_cpp_model_file_and_ffmpeg_input(hello, tmp_path, ct2_folder, capsys):
    from .test_ggml import ggml_tiny_en

    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed (apt-get install ffmpeg)")
    mp3 = tmp_path / "hello.mp3"
    subprocess.run(["ffmpeg", "-loglevel", "error", "-i", str(hello), str(mp3)], check=True)
    model = ggml_tiny_en(ct2_folder)
    assert main(["-m", str(model), "-t", "2", "-bs", "1", "-nt", "-np", str(mp3)]) == 0
    assert "sun" in capsys.readouterr().out.lower()


def test_runs_as_a_program(hello):
    run = subprocess.run([sys.executable, "-m", "llamacpy.cli.whisper_cli", "-f",
                          str(hello), "--vad"], check=False, capture_output=True,
                         text=True)
    assert run.returncode == 2 and run.stderr.count("\n") == 1
