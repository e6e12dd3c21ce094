"""whisper-cli: speech to text with whisper.cpp's flag names (the first pieces: -m, -f, -t, -l, -nt).

Greedy decoding at temperature 0 over 30 s windows; segments print as whisper.cpp's console
output ("[00:00:00.000 --> 00:00:02.560]   text"), or the bare text with -nt. The other
whisper.cpp flags are not implemented yet, so they are refused rather than ignored.
"""

from __future__ import annotations

import argparse
import sys
import time

from .common import fail, set_threads

TOOL = "whisper-cli"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description=__doc__)
    p.add_argument("-m", "--model", default="whisper-tiny.en",
                   help="whisper GGUF path or catalogue name (default whisper-tiny.en)")
    p.add_argument("-f", "--file", action="append", default=[], help="input WAV file (repeatable)")
    p.add_argument("inputs", nargs="*", help="more input WAV files")
    p.add_argument("-t", "--threads", type=int, default=4, help="threads (default 4)")
    p.add_argument("-l", "--language", default="en",
                   help="spoken language (default en; 'auto' detection is not implemented yet)")
    p.add_argument("-nt", "--no-timestamps", action="store_true",
                   help="do not print timestamps")
    return p


def console_time(seconds: float) -> str:
    """whisper.cpp's to_timestamp: HH:MM:SS.mmm, from 10 ms ticks."""
    ms = round(seconds * 100) * 10
    return f"{ms // 3600000:02d}:{ms // 60000 % 60:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def _load(args):
    """(GGUF, model) for -m, with -l checked against it; an error message instead on failure."""
    from ..audio.transcribe import language_token
    from ..format import GGUFError, open_gguf
    from ..hub import resolve_model
    from ..models.whisper import WhisperModel

    try:
        g = open_gguf(resolve_model(args.model))
        if g.get("general.architecture") != "whisper":
            return f"{args.model} is not a whisper model"
        model = WhisperModel(g)
    except (OSError, GGUFError, RuntimeError, KeyError) as e:
        return f"cannot load model '{args.model}': {e}"
    if not g.get("whisper.multilingual") and args.language != "en":
        # whisper.cpp's whisper_full_with_state warning, and it goes on in English
        print(f"{TOOL}: WARNING: model is not multilingual, ignoring language and translation "
              "options", file=sys.stderr)
        args.language = "en"
    if g.get("whisper.multilingual"):
        try:
            language_token(g, args.language)
        except ValueError as e:
            return str(e)
    return g, model


def main(argv: list[str] | None = None) -> int:
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        return fail(TOOL, f"not supported yet: {' '.join(unknown)}")
    files = args.file + args.inputs
    if not files:
        return fail(TOOL, "no input files (use -f FILE)")
    if args.language == "auto":
        return fail(TOOL, "-l auto (language detection) is not supported yet; give a language")
    set_threads(args.threads)
    from ..audio.transcribe import TranscribeOptions, transcribe
    from ..audio.wav import AudioError, load_audio

    loaded = _load(args)
    if isinstance(loaded, str):
        return fail(TOOL, loaded)
    g, model = loaded
    for path in files:
        try:
            audio = load_audio(path)
        except (OSError, AudioError) as e:
            return fail(TOOL, f"cannot read '{path}': {e}")
        t0 = time.perf_counter()
        for seg in transcribe(g, model, audio, TranscribeOptions(language=args.language)).segments:
            text = seg.text
            if args.no_timestamps:
                print(text, end="", flush=True)
            else:
                print(f"[{console_time(seg.start)} --> {console_time(seg.end)}]  {text}",
                      flush=True)
        if args.no_timestamps:
            print()
        print(f"{TOOL}: {path}: {len(audio) / 16000:.1f} s of audio in "
              f"{time.perf_counter() - t0:.2f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
