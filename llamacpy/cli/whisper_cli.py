"""whisper-cli: whisper.cpp's examples/cli (1.8.5): the same flags and defaults, console lines,
stderr reports and output files (-otxt -osrt -ovtt -ocsv -olrc -oj -ojf -ls, named <input>.srt
etc. or -of NAME.srt), over transcribe() (audio/transcribe.py) and our writers (audio/formats.py).

-m takes our whisper GGUF, whisper.cpp's own ggml-*.bin, or a catalogue name. Inputs are WAV, or
anything ffmpeg decodes when it is on PATH. Flags that need what llamacpy lacks end the tool with
one line and status 2; a decoding option transcribe() refuses, or an input that cannot be read,
is one line and status 1 (the other inputs still run).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import dataclass

from .common import fail, set_threads

TOOL = "whisper-cli"
# whisper.cpp flags llamacpy cannot honour: (names, takes a value, why)
REFUSED = [
    (("-debug", "--debug-mode"), False, "debug dumps of the log-mel"),
    (("-di", "--diarize"), False, "stereo diarization"),
    (("-tdrz", "--tinydiarize"), False, "tinydiarize (it needs a tdrz model)"),
    (("-owts", "--output-words"), False, "the karaoke video script"),
    (("-fp", "--font-path"), True, "the karaoke video font"),
    (("-oved", "--ov-e-device"), True, "OpenVINO"),
    (("-dtw", "--dtw"), True, "DTW token timestamps"),
    (("--grammar",), True, "GBNF grammars for whisper"),
    (("--grammar-rule",), True, "GBNF grammars for whisper"),
    (("--grammar-penalty",), True, "GBNF grammars for whisper"),
    (("--vad",), False, "voice activity detection (it needs a Silero VAD model)"),
    (("-vm", "--vad-model"), True, "voice activity detection (Silero VAD models)"),
    (("-vt", "--vad-threshold"), True, "voice activity detection"),
    (("-vspd", "--vad-min-speech-duration-ms"), True, "voice activity detection"),
    (("-vsd", "--vad-min-silence-duration-ms"), True, "voice activity detection"),
    (("-vmsd", "--vad-max-speech-duration-s"), True, "voice activity detection"),
    (("-vp", "--vad-speech-pad-ms"), True, "voice activity detection"),
    (("-vo", "--vad-samples-overlap"), True, "voice activity detection"),
]
# the output files in whisper.cpp's order: (flag dest, extension, the function its log names)
OUTPUTS = [("output_txt", ".txt", "output_txt"), ("output_vtt", ".vtt", "output_vtt"),
           ("output_srt", ".srt", "output_srt"), ("output_csv", ".csv", "output_csv"),
           ("output_json", ".json", "output_json"), ("output_lrc", ".lrc", "output_lrc"),
           ("log_score", ".score.txt", "output_score")]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description=__doc__.split("\n\n")[0],
                                allow_abbrev=False)
    a = p.add_argument
    flag = lambda *names, **kw: a(*names, action="store_true", **kw)
    a("inputs", nargs="*", help="input audio files")
    a("-t", "--threads", type=int, default=min(4, os.cpu_count() or 1), help="threads")
    a("-p", "--processors", type=int, default=1, help="processors (only 1)")
    a("-ot", "--offset-t", type=int, default=0, help="time offset in milliseconds")
    a("-on", "--offset-n", type=int, default=0, help="segment index offset (SRT numbering)")
    a("-d", "--duration", type=int, default=0, help="duration of audio to process in ms")
    a("-mc", "--max-context", type=int, default=-1, help="maximum text context tokens")
    a("-ml", "--max-len", type=int, default=0, help="maximum segment length in characters")
    flag("-sow", "--split-on-word", help="split on word rather than on token (with -ml)")
    a("-bo", "--best-of", type=int, default=5, help="best candidates to keep (default 5)")
    a("-bs", "--beam-size", type=int, default=5, help="beam size for beam search (default 5)")
    a("-ac", "--audio-ctx", type=int, default=0, help="audio context size (0: all)")
    a("-wt", "--word-thold", type=float, default=0.01, help="word timestamp threshold (0.01)")
    a("-et", "--entropy-thold", type=float, default=2.4, help="entropy threshold (2.40)")
    a("-lpt", "--logprob-thold", type=float, default=-1.0, help="logprob threshold (-1.00)")
    a("-nth", "--no-speech-thold", type=float, default=0.6, help="no-speech threshold (0.60)")
    a("-tp", "--temperature", type=float, default=0.0, help="sampling temperature (0.00)")
    a("-tpi", "--temperature-inc", type=float, default=0.2, help="fallback step (0.20)")
    flag("-tr", "--translate", help="translate from source language to english")
    flag("-nf", "--no-fallback", help="do not use temperature fallback while decoding")
    flag("-otxt", "--output-txt", help="output result in a text file")
    flag("-ovtt", "--output-vtt", help="output result in a vtt file")
    flag("-osrt", "--output-srt", help="output result in a srt file")
    flag("-olrc", "--output-lrc", help="output result in a lrc file")
    flag("-ocsv", "--output-csv", help="output result in a CSV file")
    flag("-oj", "--output-json", help="output result in a JSON file")
    flag("-ojf", "--output-json-full", help="include more information in the JSON file")
    a("-of", "--output-file", action="append", default=[],
      help="output file path without extension, one per input ('-': stdout)")
    flag("-np", "--no-prints", help="do not print anything other than the results")
    flag("-ps", "--print-special", help="print special tokens")
    flag("-pc", "--print-colors", help="print colors")
    flag("--print-confidence", help="print confidence")
    flag("-pp", "--print-progress", help="print progress")
    flag("-nt", "--no-timestamps", help="do not print timestamps")
    a("-l", "--language", default="en", type=str.lower,
      help="spoken language ('auto' for auto-detect; default en)")
    flag("-dl", "--detect-language", help="exit after automatically detecting language")
    a("--prompt", default="", help="initial prompt (max n_text_ctx/2 tokens)")
    flag("--carry-initial-prompt", help="always prepend initial prompt")
    a("-m", "--model", default="whisper-tiny.en", help="whisper GGUF, whisper.cpp ggml-*.bin "
      "or catalogue name (whisper-tiny.en, whisper-base); default whisper-tiny.en")
    a("-f", "--file", action="append", default=[], help="input audio file (repeatable)")
    flag("-ls", "--log-score", help="log best decoder scores of tokens (.score.txt)")
    flag("-ng", "--no-gpu", help="disable GPU (there is none: always the CPU)")
    a("-dev", "--device", type=int, default=0, help="GPU device (only 0: the CPU)")
    flag("-fa", "--flash-attn", help="flash attention (the default; attention is exact "
         "either way)")
    flag("-nfa", "--no-flash-attn", help="no flash attention (the same results here)")
    flag("-sns", "--suppress-nst", help="suppress non-speech tokens")
    a("--suppress-regex", default=None, help="regular expression matching tokens to suppress")
    for names, takes_value, why in REFUSED:
        kw = {"default": None, "metavar": "X"} if takes_value else {"action": "store_true"}
        a(*names, dest=f"refused_{names[-1].lstrip('-').replace('-', '_')}",
          help=f"not supported: {why}", **kw)
    return p


def console_time(seconds: float) -> str:
    """whisper.cpp's to_timestamp: HH:MM:SS.mmm, from 10 ms ticks."""
    from ..audio.formats import timestamp

    return timestamp(seconds)


def _refusal(args) -> str | None:
    for names, _, why in REFUSED:
        if getattr(args, f"refused_{names[-1].lstrip('-').replace('-', '_')}") not in (None,
                                                                                      False):
            return f"{names[0]} is not supported: {why}"
    if args.processors != 1:
        return "-p (more than one processor, whisper_full_parallel) is not supported"
    if args.device != 0:
        return "-dev: there is no GPU; only device 0 (the CPU) exists"
    return None


def _options(args, language: str):
    """TranscribeOptions from whisper-cli's flags (its main() fills whisper_full_params)."""
    from ..audio.transcribe import TranscribeOptions

    o = TranscribeOptions(
        language=language, detect_language=args.detect_language, translate=args.translate,
        beam_size=args.beam_size, best_of=args.best_of, temperature=args.temperature,
        temperature_inc=0.0 if args.no_fallback else args.temperature_inc,
        entropy_thold=args.entropy_thold, logprob_thold=args.logprob_thold,
        no_speech_thold=args.no_speech_thold, prompt=args.prompt or None,
        carry_initial_prompt=args.carry_initial_prompt, no_timestamps=args.no_timestamps,
        offset_ms=args.offset_t, duration_ms=args.duration, suppress_nst=args.suppress_nst,
        suppress_regex=args.suppress_regex, audio_ctx=args.audio_ctx)
    if args.max_context >= 0:
        o.n_max_text_ctx = args.max_context
    return o


@dataclass
class Loaded:
    g: object  # GGUFFile, or GGMLWhisperFile for whisper.cpp's own files
    model: object  # WhisperModel
    load_ms: float


def load_whisper(name_or_path: str) -> Loaded | str:
    """Our whisper GGUF, whisper.cpp's ggml-*.bin or a catalogue name; a message on failure."""
    from ..convert.whisper_ggml import open_whisper_file
    from ..format import GGUFError
    from ..hub import resolve_model
    from ..models.whisper import WhisperModel

    t0 = time.perf_counter()
    try:
        g = open_whisper_file(resolve_model(name_or_path))
        if g.get("general.architecture") != "whisper":
            return f"'{name_or_path}' is not a whisper model"
        model = WhisperModel(g)
    except (OSError, GGUFError, RuntimeError, KeyError, ValueError) as e:
        return f"cannot load model '{name_or_path}': {e}"
    return Loaded(g, model, 1000 * (time.perf_counter() - t0))


def main(argv: list[str] | None = None) -> int:
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        return fail(TOOL, f"unknown argument: {' '.join(unknown)}", 2)
    refusal = _refusal(args)
    if refusal:
        return fail(TOOL, refusal, 2)
    files = args.file + args.inputs
    if not files:
        return fail(TOOL, "no input files specified (use -f FILE or positional files)", 2)
    set_threads(args.threads)
    t_start = time.perf_counter()
    loaded = load_whisper(args.model)
    if isinstance(loaded, str):
        return fail(TOOL, loaded)
    status = 0
    try:
        for i, path in enumerate(files):
            out_base = args.output_file[i] if i < len(args.output_file) else path
            status = max(status, run_file(args, loaded, path, out_base))
    except KeyboardInterrupt:
        return fail(TOOL, "interrupted", 130)
    if not args.no_prints:
        _print_timings(loaded.load_ms, 1000 * (time.perf_counter() - t_start))
    return status


def _print_timings(load_ms: float, total_ms: float) -> None:
    """whisper_print_timings' first and last lines (we do not time the stages apart)."""
    print(f"\nwhisper_print_timings:     load time = {load_ms:8.2f} ms", file=sys.stderr)
    print(f"whisper_print_timings:    total time = {total_ms:8.2f} ms", file=sys.stderr)


# --- one input: decode it, print its segments, write its files (cli.cpp main's loop body)


def _say(args, text: str) -> None:
    if not args.no_prints:
        print(text, file=sys.stderr, flush=True)


def _system_info() -> str:
    """whisper_print_system_info's shape, with the CPU features our kernels use."""
    from ..kernels import simd

    cpu = {"AVX2": simd.HAS_AVX2, "AVX512": simd.HAS_AVX512BW, "AVX512_VNNI": simd.HAS_VNNI}
    return "WHISPER : COREML = 0 | OPENVINO = 0 | CPU : " + "".join(
        f"{k} = {int(v)} | " for k, v in cpu.items())


def run_file(args, loaded: Loaded, path: str, out_base: str) -> int:
    """whisper-cli's work on one input; 0, or 1 after one error line."""
    from ..audio.transcribe import SpecialTokens
    from ..audio.wav import AudioError, load_audio

    try:
        audio = load_audio(path)
    except (OSError, AudioError) as e:
        return fail(TOOL, f"cannot read '{path}': {e}")
    sp = SpecialTokens.from_gguf(loaded.g)
    language, translate = args.language, args.translate
    if not sp.multilingual and (language != "en" or translate):
        language, translate = "en", False  # whisper.cpp warns and goes on in English
        print("main: WARNING: model is not multilingual, ignoring language and translation "
              "options", file=sys.stderr)
    if args.detect_language:
        language = "auto"
    _say(args, f"\nsystem_info: n_threads = {args.threads} / {os.cpu_count()} | {_system_info()}")
    _say(args, f"\nmain: processing '{path}' ({len(audio)} samples, {len(audio) / 16000:.1f} "
         f"sec), {args.threads} threads, {args.processors} processors, {args.beam_size} beams "
         f"+ best of {args.best_of}, lang = {language}, task = "
         f"{'translate' if translate else 'transcribe'}, timestamps = "
         f"{int(not args.no_timestamps)} ...\n")
    args_run = argparse.Namespace(**{**vars(args), "language": language,
                                     "translate": translate})
    result = _transcribe(args_run, loaded, audio, sp, out_base == "-")
    if isinstance(result, str):
        return fail(TOOL, result)
    if out_base != "-":
        _print_segments(args_run, loaded, sp, result.segments)
    _write_outputs(args_run, loaded, sp, result, out_base)
    return 0


def _transcribe(args, loaded: Loaded, audio, sp, quiet: bool):
    """TranscribeResult with token times when -ml / -ojf ask for them; a message on failure."""
    from ..audio.token_times import with_token_times
    from ..audio.transcribe import transcribe

    progress = None
    if args.print_progress and not quiet:
        progress = _Progress()
    try:
        result = transcribe(loaded.g, loaded.model, audio, _options(args, args.language),
                            progress)
    except ValueError as e:
        return str(e)
    if args.language == "auto":
        p = (result.language_probs or {}).get(result.language, 0.0)
        _say(args, f"whisper_full_with_state: auto-detected language: {result.language} "
             f"(p = {p:f})")
    if args.output_json_full or args.max_len > 0:  # whisper-cli's token_timestamps
        vocab = loaded.g.require("tokenizer.ggml.tokens")
        result = dataclasses.replace(result, segments=with_token_times(
            result.segments, audio, vocab, sp, args.word_thold, args.max_len,
            args.split_on_word))
    return result


class _Progress:
    """whisper_print_progress_callback: a line each time progress passes another 5 %."""

    def __init__(self):
        self.prev = 0

    def __call__(self, percent: int) -> None:
        if percent >= self.prev + 5:
            self.prev += 5
            print(f"whisper_print_progress_callback: progress = {percent:3d}%", file=sys.stderr)


COLORS = [160, 166, 208, 215, 227, 114, 71]  # k_colors: rgb2xterm256 of Paul Tol's scale
STYLES = ["\033[7m", "\033[4m", "\033[2m"]  # k_styles: inverse, underline, dim


def _token_bytes(loaded: Loaded, sp, token_id: int) -> bytes:
    from ..audio.formats import cpp_token_bytes

    return cpp_token_bytes(loaded.g.require("tokenizer.ggml.tokens"), sp, token_id)


def segment_text(args, loaded: Loaded, sp, seg, prev) -> bytes:
    """The segment's text as whisper.cpp keeps it; with -ps its special tokens too, the
    opening timestamp of a later segment of a window included (whisper_full's text)."""
    if not args.print_special or args.max_len > 0:  # whisper_wrap_segment's texts have none
        return seg.text.encode("utf-8", "surrogateescape")
    head = b""
    if prev is not None and prev.seek == seg.seek and (not seg.tokens or
                                                        seg.tokens[0].id < sp.eot):
        tid = sp.timestamp_begin + (round(seg.start * 100) - seg.seek) // 2
        head = _token_bytes(loaded, sp, tid)
    return head + b"".join(_token_bytes(loaded, sp, t.id) for t in seg.tokens)


def _print_segments(args, loaded: Loaded, sp, segments) -> None:
    """whisper_print_segment_callback: a newline first, then per segment `[t0 --> t1]  text`
    (or the texts run together with -nt), in colors by probability with -pc."""
    from ..audio.formats import timestamp

    if not segments:  # whisper.cpp's callback only runs for new segments
        return
    out = sys.stdout.buffer
    out.write(b"\n")
    prev = None
    for seg in segments:
        if not args.no_timestamps:
            out.write(f"[{timestamp(seg.start)} --> {timestamp(seg.end)}]  ".encode())
        if args.print_colors or args.print_confidence:
            for t in seg.tokens:
                if args.print_special or t.id < sp.eot:
                    out.write(_styled(args, t.p) + _token_bytes(loaded, sp, t.id) + b"\033[0m")
        else:
            out.write(segment_text(args, loaded, sp, seg, prev))
        if not args.no_timestamps:
            out.write(b"\n")
        out.flush()
        prev = seg


def _styled(args, p: float) -> bytes:
    if args.print_colors:
        col = max(0, min(len(COLORS) - 1, int(p ** 3 * len(COLORS))))
        return f"\033[38;5;{COLORS[col]}m".encode()
    return STYLES[0 if p < 0.33 else 1 if p < 0.66 else 2].encode()


def _write_outputs(args, loaded: Loaded, sp, result, out_base: str) -> None:
    """Each requested file in whisper.cpp's order, `<base><ext>`; '-' writes one to stdout."""
    used_stdout = False
    for dest, ext, func in OUTPUTS:
        if not getattr(args, dest) and not (dest == "output_json" and args.output_json_full):
            continue
        data = _render(dest, args, loaded, sp, result).encode("utf-8", "surrogateescape")
        if out_base == "-":
            if used_stdout:
                print("warning: Not appending multiple file formats to stdout", file=sys.stderr)
                continue
            used_stdout = True
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            continue
        name = out_base + ext
        try:
            with open(name, "wb") as f:
                f.write(data)
        except OSError as e:
            print(f"{func}: failed to open '{name}' for writing: {e.strerror}", file=sys.stderr)
            continue
        print(f"{func}: saving output to '{name}'", file=sys.stderr)


def _render(dest: str, args, loaded: Loaded, sp, result) -> str:
    from ..audio import formats

    segs, prev = [], None
    for seg in result.segments:  # -ps puts the special tokens into every text
        text = segment_text(args, loaded, sp, seg, prev).decode("utf-8", "surrogateescape")
        segs.append(_Text(seg.start, seg.end, text, seg.tokens))
        prev = seg
    if dest == "output_json":
        return _json(args, loaded, sp, result, segs)
    if dest == "log_score":
        return formats.to_score([(_token_bytes(loaded, sp, t.id).decode("utf-8",
                                  "surrogateescape"), t.p) for s in segs for t in s.tokens])
    if dest == "output_srt":
        return formats.to_srt(segs, args.offset_n)
    writer = {"output_txt": formats.to_txt, "output_vtt": formats.to_vtt,
              "output_csv": formats.to_csv, "output_lrc": formats.to_lrc}[dest]
    return writer(segs)


@dataclass
class _Text:
    start: float
    end: float
    text: str
    tokens: tuple


MODEL_TYPES = {4: "tiny", 6: "base", 12: "small", 24: "medium", 32: "large"}  # by n_audio_layer


def _json(args, loaded: Loaded, sp, result, segs) -> str:
    """output_json's document (-oj), with each segment's tokens for -ojf."""
    from ..audio import formats

    a, g = loaded.model.args, loaded.g
    model = {"type": MODEL_TYPES.get(a.n_audio_layer, "unknown"),
             "multilingual": sp.multilingual, "vocab": a.n_vocab,
             "audio": {"ctx": a.n_audio_ctx, "state": a.n_embd, "head": a.n_head,
                       "layer": a.n_audio_layer},
             "text": {"ctx": a.n_text_ctx, "state": a.n_embd,
                      "head": int(g.get("whisper.decoder.attention.head_count", a.n_head)),
                      "layer": a.n_text_layer},
             "mels": a.n_mels, "ftype": int(g.get("general.file_type", 1))}
    header = formats.json_header(_system_info(), model, args.model, args.language,
                                 args.translate, result.language)
    entries = [formats.json_segment(s, _json_tokens(loaded, sp, s.tokens)
                                    if args.output_json_full else None) for s in segs]
    return formats.to_json(header, entries)


def _json_tokens(loaded: Loaded, sp, tokens) -> list[dict]:
    """-ojf tokens; pieces of one UTF-8 character are merged into one entry, as whisper.cpp
    1.8.5 does (the first token's id, p and t0, the last known t1)."""
    from ..audio import formats

    out, i = [], 0
    while i < len(tokens):
        t, text, t1 = tokens[i], _token_bytes(loaded, sp, tokens[i].id), tokens[i].t1
        i += 1
        while i < len(tokens) and _utf8_missing(text) > 0:
            text += _token_bytes(loaded, sp, tokens[i].id)
            t1 = tokens[i].t1 if tokens[i].t1 is not None else t1
            i += 1
        out.append(formats.json_token(text.decode("utf-8", "surrogateescape"), t.id, t.p,
                                      t.t0, t1))
    return out


def _utf8_missing(b: bytes) -> int:
    """utf8_trailing_bytes_needed: bytes still missing from the last character."""
    i = len(b) - 1
    while i >= 0 and b[i] & 0xC0 == 0x80:
        i -= 1
    if i < 0:
        return 0
    c = b[i]
    need = 1 if c < 0x80 else 2 if c & 0xE0 == 0xC0 else 3 if c & 0xF0 == 0xE0 else \
        4 if c & 0xF8 == 0xF0 else 0
    return max(0, need - (len(b) - i)) if need else 0


if __name__ == "__main__":
    sys.exit(main())
