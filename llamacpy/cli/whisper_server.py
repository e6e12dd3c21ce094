"""whisper-server: speech to text over HTTP with whisper.cpp's server flags and routes
(examples/server/server.cpp): POST /inference, POST /load, and OpenAI's /v1/audio/transcriptions
and /v1/audio/translations (server/audio.py).

The socket listens first and the model loads in the background (/health answers 503 meanwhile);
a model that does not load ends the process with its reason. whisper.cpp flags that need what
llamacpy lacks (diarization, token timestamps, DTW, OpenVINO, more than one processor) end the
tool with one line instead of being ignored. llama-server started with a whisper model serves
the same routes (serve_llama_server).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from .common import fail

TOOL = "whisper-server"
# whisper.cpp flags llamacpy cannot honour: (names, takes a value, why)
REFUSED = [
    (("-p", "--processors"), True, "more than one processor (whisper_full_parallel)"),
    (("-debug", "--debug-mode"), False, "debug dumps"),
    (("-di", "--diarize"), False, "stereo diarization"),
    (("-tdrz", "--tinydiarize"), False, "tinydiarize"),
    (("-ps", "--print-special"), False, "printing special tokens"),
    (("-pc", "--print-colors"), False, "printing colors"),
    (("-pr", "--print-realtime"), False, "printing segments as they are decoded"),
    (("-oved", "--ov-e-device"), True, "OpenVINO"),
    (("-dtw", "--dtw"), True, "DTW token timestamps"),
    (("-fp", "--font-path"), True, "fonts"),
    (("--public",), True, "a public folder (the built-in page is served at /)"),
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=TOOL, description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("-m", "--model", default="whisper-tiny.en", help="whisper GGUF path or catalogue name "
      "(whisper-tiny.en, whisper-base); default whisper-tiny.en")
    a("-t", "--threads", type=int, default=4, help="threads (default 4)")
    a("-ot", "--offset-t", type=int, default=0, help="time offset in milliseconds")
    a("-on", "--offset-n", type=int, default=0, help="segment index offset (SRT numbering)")
    a("-d", "--duration", type=int, default=0, help="duration of audio to process in ms")
    a("-mc", "--max-context", type=int, default=-1, help="maximum text context tokens")
    a("-bo", "--best-of", type=int, default=2, help="best candidates to keep (default 2)")
    a("-bs", "--beam-size", type=int, default=-1, help="beam size (default -1: greedy)")
    a("-ac", "--audio-ctx", type=int, default=0, help="audio context size (only 0: all)")
    a("-et", "--entropy-thold", type=float, default=2.4, help="entropy threshold (2.40)")
    a("-lpt", "--logprob-thold", type=float, default=-1.0, help="logprob threshold (-1.00)")
    a("-nth", "--no-speech-thold", type=float, default=0.6, help="no-speech threshold (0.60)")
    a("-tp", "--temperature", type=float, default=0.0, help="sampling temperature (0.00)")
    a("-tpi", "--temperature-inc", type=float, default=0.2, help="fallback step (0.20)")
    a("-ml", "--max-len", type=int, default=0, help="maximum segment length in characters "
      "(verbose_json, whose token times whisper.cpp computes; 0: 60 there)")
    a("-sow", "--split-on-word", action="store_true", help="split on word rather than token")
    a("-wt", "--word-thold", type=float, default=0.01, help="word timestamp probability "
      "threshold (0.01)")
    a("-tr", "--translate", action="store_true", help="translate to English")
    a("-nf", "--no-fallback", action="store_true", help="no temperature fallback")
    a("-pp", "--print-progress", action="store_true", help="log progress of every request")
    a("-nt", "--no-timestamps", action="store_true", help="do not compute timestamps")
    a("-l", "--language", default="en", help="spoken language ('auto' to detect; default en)")
    a("-dl", "--detect-language", action="store_true", help="detect the language only")
    a("--prompt", default="", help="initial prompt")
    a("-sns", "--suppress-nst", action="store_true", help="suppress non-speech tokens")
    a("-ng", "--no-gpu", action="store_true", help="accepted: llamacpy runs on the CPU")
    a("--host", default="127.0.0.1", help="hostname or IP address (default 127.0.0.1)")
    a("--port", type=int, default=8080, help="port (default 8080)")
    a("--request-path", default="", help="prefix of every request path")
    a("--inference-path", default="/inference", help="path of the inference route")
    a("--convert", action="store_true", help="require ffmpeg (non-WAV uploads go through it "
      "whenever it is on PATH)")
    for names, takes_value, _ in REFUSED:  # parsed so that they can be refused by name
        kind = {} if takes_value else {"action": "store_const", "const": True}
        a(*names, dest=dest(names), default=None, help=argparse.SUPPRESS, **kind)
    return p


def dest(names: tuple[str, ...]) -> str:
    return names[-1].lstrip("-").replace("-", "_")


def transcribe_defaults(args) -> dict:
    """TranscribeOptions fields of the command line (whisper.cpp server's whisper_params)."""
    return {"language": "auto" if args.detect_language else args.language,
            "translate": args.translate, "beam_size": max(1, args.beam_size),
            "best_of": args.best_of, "temperature": args.temperature,
            "temperature_inc": 0.0 if args.no_fallback else args.temperature_inc,
            "entropy_thold": args.entropy_thold, "logprob_thold": args.logprob_thold,
            "no_speech_thold": args.no_speech_thold, "prompt": args.prompt or None,
            "no_timestamps": args.no_timestamps, "offset_ms": args.offset_t,
            "duration_ms": args.duration, "audio_ctx": args.audio_ctx,
            "suppress_nst": args.suppress_nst,
            **({"n_max_text_ctx": args.max_context} if args.max_context >= 0 else {})}


def refused(args) -> str | None:
    for names, _, why in REFUSED:
        if getattr(args, dest(names)) is not None:
            return f"{names[0]}: {why} is not supported by llamacpy"
    if args.convert and shutil.which("ffmpeg") is None:
        return ("--convert: ffmpeg is not found. Please ensure that ffmpeg is installed and "
                "that its executable is included in your system's PATH.")
    return None


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    message = refused(args)
    if message:
        return fail(TOOL, message)
    from ..hub import resolve_model
    from ..kernels import set_threads
    from ..server.audio import AudioConfig

    defaults = transcribe_defaults(args)
    try:
        path = str(resolve_model(args.model))
    except (OSError, ValueError, KeyError) as e:
        return fail(TOOL, f"cannot find model '{args.model}': {e}")
    set_threads(args.threads)
    cfg = AudioConfig(path, defaults=defaults, tool=TOOL, inference_path=args.inference_path,
                      request_path=args.request_path, print_progress=args.print_progress,
                      offset_n=args.offset_n, token_times={
                          "max_len": args.max_len, "split_on_word": args.split_on_word,
                          "thold_pt": args.word_thold})
    return serve(cfg, args.host, args.port, timeout=600)


def serve(cfg, host: str, port: int, timeout: int = 600, n_threads_http: int = -1) -> int:
    """Listen, load the model in the background, serve until SIGINT / SIGTERM."""
    import uvicorn

    from ..server.audio import AudioState, build_audio_app
    from .server import run_server, with_http_threads

    state = AudioState(cfg)
    level = "info" if cfg.verbosity >= 3 else "warning" if cfg.verbosity >= 0 else "critical"
    server = uvicorn.Server(uvicorn.Config(
        with_http_threads(build_audio_app(state), n_threads_http), host=host, port=port,
        timeout_keep_alive=timeout, log_level=level, access_log=cfg.verbosity > 3))
    exit_code = [0]

    def load() -> None:
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        state.log(f"whisper server listening at http://{host}:{port}; loading {cfg.model_path}")
        t0 = time.perf_counter()
        try:
            state.load()
        except Exception as e:  # noqa: BLE001 - any load failure ends the process with its reason
            state.log(f"error: failed to load model '{cfg.model_path}': {e}")
            exit_code[0] = 1
            server.should_exit = True
            return
        state.log(f"model loaded in {time.perf_counter() - t0:.1f} s; server is ready")

    return run_server(server, load, state.stop, exit_code)


def llama_server_flags(given: set[str]) -> str | None:
    """The first flag llama-server was given that a whisper model cannot take, as a message."""
    from ..server.audio import SPEECH_FLAGS
    from .args import FLAGS

    for f in FLAGS:
        if "server" in f.tools and f.dest in given and f.dest not in SPEECH_FLAGS:
            return f"{f.names[-1]} does not apply to a speech-to-text (whisper) model"
    return None


def serve_llama_server(args, tool: str = "llama-server") -> int:
    """llama-server -m WHISPER: the audio routes with whisper.cpp server's decoding defaults,
    llama-server's address, API keys, threads and logging."""
    from ..hub import resolve_model
    from ..kernels import set_threads
    from ..server.audio import AudioConfig
    from .args import verbosity
    from .server import api_keys

    message = llama_server_flags(args.given)
    if message:
        return fail(tool, message)
    if args.threads > 0:
        set_threads(args.threads)
    cfg = AudioConfig(str(resolve_model(args.model)), alias=args.alias or "",
                      api_keys=api_keys(args), defaults=transcribe_defaults(parser().parse_args([])),
                      tool=tool, verbosity=verbosity(args), warmup=args.warmup)
    return serve(cfg, args.host, args.port, args.timeout, args.threads_http)


if __name__ == "__main__":
    sys.exit(main())
