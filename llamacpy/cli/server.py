"""llama-server: serve a model over llama.cpp's OpenAI-compatible HTTP API.

The socket listens first; the model loads in the background (every endpoint but /health and
/models answers 503 "Loading model" meanwhile). A model that fails to load ends the process with
a non-zero status and the reason. SIGINT / SIGTERM shut down cleanly.
"""

from __future__ import annotations

import signal
import sys
import threading
import time

from ..memory.kv_cache import cache_dtype
from ..hub import resolve_model
from ..kernels import apply_threads_here, set_threads
from ..sampling import SamplingParams
from .args import build_parser, check_cpu_only, drop_unsupported

TOOL = "llama-server"


def api_keys(args) -> list[str]:
    keys = [k for k in (args.api_key or "").split(",") if k]
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as fh:
            keys += [line.strip() for line in fh if line.strip()]
    return keys


def server_config(args):
    from ..chat.reasoning import FORMATS
    from ..server.state import ServerConfig, parse_kwargs

    for name in (args.cache_type_k, args.cache_type_v):
        cache_dtype(name)  # an unsupported cache type fails here, with its name
    if args.reasoning_format not in FORMATS:
        raise ValueError(f"unknown --reasoning-format '{args.reasoning_format}'")
    if args.reasoning not in ("on", "off", "auto"):
        raise ValueError("--reasoning must be on, off or auto")
    sampling = SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                              min_p=args.min_p, typical_p=args.typical_p,
                              repeat_penalty=args.repeat_penalty,
                              repeat_last_n=args.repeat_last_n,
                              presence_penalty=args.presence_penalty,
                              frequency_penalty=args.frequency_penalty, mirostat=args.mirostat,
                              mirostat_tau=args.mirostat_tau, mirostat_eta=args.mirostat_eta,
                              seed=args.seed)
    template = None
    if args.chat_template_file:
        with open(args.chat_template_file, encoding="utf-8") as fh:
            template = fh.read()
    return ServerConfig(
        model_path=str(resolve_model(args.model)), alias=args.alias or "", n_ctx=args.ctx_size,
        n_parallel=max(1, args.parallel), n_batch=args.batch_size, n_ubatch=args.ubatch_size,
        n_predict=args.n_predict, type_k=args.cache_type_k, type_v=args.cache_type_v,
        repack=repack_default(args), api_keys=api_keys(args), webui=args.webui,
        metrics=args.metrics,
        slots=args.slots, chat_template=template or args.chat_template,
        chat_template_kwargs=parse_kwargs(args.chat_template_kwargs),
        reasoning_format=args.reasoning_format, reasoning=args.reasoning,
        reasoning_budget=args.reasoning_budget, sampling=sampling, mmproj=args.mmproj,
        image_min_tokens=args.image_min_tokens, image_max_tokens=args.image_max_tokens)


def log(args, message: str) -> None:
    if args.verbosity >= 0:
        print(f"{TOOL}: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    argv = drop_unsupported(sys.argv[1:] if argv is None else argv, TOOL)
    args = build_parser("server", TOOL, __doc__).parse_args(argv)
    check_cpu_only(args, TOOL)
    if args.log_file:
        sys.stderr = open(args.log_file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
    if not args.model:
        print(f"{TOOL}: error: a model is required (-m FILE or a catalogue name)", file=sys.stderr)
        return 1
    try:
        cfg = server_config(args)
    except (ValueError, OSError, FileNotFoundError, KeyError, RuntimeError) as e:
        print(f"{TOOL}: error: {e}", file=sys.stderr)
        return 1
    if args.threads > 0:
        set_threads(args.threads)
    return serve(args, cfg)


def repack_default(args) -> bool:
    """--repack / --no-repack, else repack only for batched decoding (--parallel > 1), where the
    Q8_0 multi-token kernels are 12-22% faster than the direct Q5_0 / IQ4_NL ones."""
    return args.parallel > 1 if args.repack is None else bool(args.repack)


def serve(args, cfg) -> int:
    import uvicorn

    from ..server.app import build_app
    from ..server.state import ServerState

    state = ServerState(cfg)
    config = uvicorn.Config(build_app(state), host=args.host, port=args.port,
                            log_level="warning" if args.verbosity < 4 else "info",
                            timeout_keep_alive=args.timeout, access_log=args.verbosity >= 4)
    server = uvicorn.Server(config)
    exit_code = [0]

    def load() -> None:
        apply_threads_here()  # -t for the repack and warm-up kernels run in this thread
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        base = f"http://{args.host}:{args.port}"
        log(args, f"listening on {base} (web UI: {base}/ , API: {base}/v1); loading "
                  f"{cfg.model_path}")
        t0 = time.perf_counter()
        try:
            state.load()
        except Exception as e:  # noqa: BLE001 - any load failure ends the process with its reason
            log(args, f"error: failed to load model '{cfg.model_path}': {e}")
            exit_code[0] = 1
            server.should_exit = True
            return
        log(args, f"model loaded in {time.perf_counter() - t0:.1f} s; {cfg.n_parallel} slot(s) "
                  f"of {state.engine.n_ctx_slot} tokens; server is ready")

    threading.Thread(target=load, name="llamacpy-load", daemon=True).start()
    install_signal_handlers(server)
    try:
        server.run()
    finally:
        state.stop()
    if exit_code[0] == 0 and not server.started:
        return 1  # could not bind
    return exit_code[0]


def install_signal_handlers(server) -> None:
    """SIGINT/SIGTERM end the server gracefully with status 0 (uvicorn would re-raise them)."""
    import contextlib

    def stop(signum, frame) -> None:
        if server.should_exit:  # a second signal: stop now
            server.force_exit = True
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    server.capture_signals = contextlib.nullcontext


if __name__ == "__main__":
    sys.exit(main())
