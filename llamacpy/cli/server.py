"""llama-server: serve a model over llama.cpp's OpenAI-compatible HTTP API.

The socket listens first; the model loads in the background (every endpoint but /health and
/models answers 503 "Loading model" meanwhile). A model that fails to load ends the process with
a non-zero status and the reason. SIGINT / SIGTERM shut down cleanly.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from ..format.reader import resolved_load_mode
from ..hub import resolve_model
from ..kernels import apply_threads_here, set_threads
from .args import (LOG_DEBUG, LOG_INFO, cache_types, chat_template_text, grammar_from_args,
                   parse_args, sampling_given, sampling_params, spec_config, template_kwargs,
                   verbosity)

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
    from ..server.static import check_folder

    type_k, type_v = cache_types(args)
    if args.reasoning_format not in FORMATS:
        raise ValueError(f"unknown --reasoning-format '{args.reasoning_format}'")
    template_kwargs(args)  # -rea must be on, off or auto
    grammar, grammar_source = grammar_from_args(args, TOOL)
    return ServerConfig(
        model_path=str(resolve_model(args.model)), alias=args.alias or "", n_ctx=args.ctx_size,
        n_parallel=max(1, args.parallel), n_batch=args.batch_size, n_ubatch=args.ubatch_size,
        n_predict=args.n_predict, type_k=type_k, type_v=type_v, flash_attn=args.flash_attn,
        repack=repack_default(args), load_mode=args.load_mode, **context_controls(args),
        api_keys=api_keys(args), host=args.host,
        webui=args.webui, static_path=check_folder(args.static_path),
        metrics=args.metrics,
        slots=args.slots, chat_template=chat_template_text(args),
        chat_template_kwargs=parse_kwargs(args.chat_template_kwargs),
        reasoning_format=args.reasoning_format, reasoning=args.reasoning,
        reasoning_budget=args.reasoning_budget, sampling=sampling_params(args),
        sampling_given=sampling_given(args),
        mmproj=args.mmproj, image_min_tokens=args.image_min_tokens,
        image_max_tokens=args.image_max_tokens, warmup=args.warmup,
        n_threads=args.threads, n_threads_batch=args.threads_batch,
        n_threads_http=args.threads_http, ignore_eos=args.ignore_eos, verbosity=verbosity(args),
        grammar=grammar, grammar_source=grammar_source, speculative=spec_config(args),
        embedding=args.embedding or args.rerank,
        pooling="rank" if args.rerank else args.pooling, embd_normalize=args.embd_normalize)


def context_controls(args) -> dict:
    """--context-shift, --keep, --cache-reuse and --cache-ram as ServerConfig fields; a shift
    or a chunk reuse cannot cut an image's cells, so with --mmproj they are refused (llama.cpp
    turns them off with a warning)."""
    if args.n_keep < -1:
        raise ValueError(f"--keep must be -1 (the whole prompt) or at least 0, not {args.n_keep}")
    for name, asked in (("--context-shift", args.context_shift),
                        ("--cache-reuse", args.cache_reuse > 0)):
        if asked and args.mmproj:
            raise ValueError(f"{name} is not supported with a multimodal projector (--mmproj): "
                             f"an image's cells cannot be shifted")
    return {"context_shift": bool(args.context_shift), "n_keep": args.n_keep,
            "cache_reuse": max(0, args.cache_reuse), "cache_ram": args.cache_ram}


def log(args, message: str, level: int = LOG_INFO) -> None:
    """A log line at llama.cpp's level (1 error, 3 info), shown up to -lv / -v / --log-disable."""
    if verbosity(args) >= level:
        print(f"{TOOL}: {message}", file=sys.stderr, flush=True)


def uvicorn_settings(args, cfg) -> dict:
    """--host, --port, --timeout and the log level for uvicorn's own messages."""
    v = cfg.verbosity
    level = "debug" if v > LOG_DEBUG else "info" if v == LOG_DEBUG else \
        "warning" if v >= 0 else "critical"
    return {"host": args.host, "port": args.port, "timeout_keep_alive": args.timeout,
            "log_level": level, "access_log": v >= LOG_DEBUG}


def with_http_threads(app, n_threads: int):
    """--threads-http N: the event loop's default executor (asyncio.to_thread: image decoding,
    tokenization) and anyio's thread limiter (starlette's sync work) get N threads, set when
    uvicorn first calls the app (its lifespan startup), inside the running loop."""
    if n_threads <= 0:
        return app
    configured = []

    async def wrapped(scope, receive, send):
        if not configured:
            import asyncio

            import anyio.to_thread

            asyncio.get_running_loop().set_default_executor(
                ThreadPoolExecutor(n_threads, thread_name_prefix="llamacpy-http"))
            anyio.to_thread.current_default_thread_limiter().total_tokens = n_threads
            configured.append(n_threads)
        await app(scope, receive, send)

    return wrapped


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args("server", TOOL, __doc__, argv)
    from ..server import router

    if not args.model:  # router mode: every model of the cache, --models-dir, --models-preset
        return router.main(args, argv)
    router.refuse_router_flags(args)
    from ..server.audio import is_whisper
    from .whisper_server import serve_llama_server

    if is_whisper(args.model):  # speech to text: the audio routes (server/audio.py)
        return serve_llama_server(args)
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
    config = uvicorn.Config(with_http_threads(build_app(state), cfg.n_threads_http),
                            **uvicorn_settings(args, cfg))
    server = uvicorn.Server(config)
    exit_code = [0]

    def engine_failed(reason: str) -> None:
        # /health already answers 503; exit non-zero so a supervisor restarts the server
        log(args, f"error: the engine stopped: {reason}; shutting down")
        exit_code[0] = 1
        server.should_exit = True

    state.on_engine_failure = engine_failed

    def load() -> None:
        apply_threads_here()  # -t for the repack and warm-up kernels run in this thread
        while not server.started and not server.should_exit:
            time.sleep(0.01)
        base = f"http://{args.host}:{args.port}"
        log(args, f"listening on {base} (web UI: {base}/ , API: {base}/v1); loading "
                  f"{cfg.model_path}")
        t0 = time.perf_counter()
        log(args, f"load_tensors: loading model tensors, this can take a while... (load_mode = "
                  f"{resolved_load_mode(cfg.load_mode)})")
        try:
            state.load()
        except Exception as e:  # noqa: BLE001 - any load failure ends the process with its reason
            log(args, f"error: failed to load model '{cfg.model_path}': {e}", level=1)
            exit_code[0] = 1
            server.should_exit = True
            return
        log(args, f"llama_context: flash_attn = {cfg.flash_attn}; "
                  f"{state.engine.ctx.cache.describe()}")
        threads = state.thread_counts()
        log(args, f"system info: n_threads = {threads['n_threads']}, n_threads_batch = "
                  f"{threads['n_threads_batch']}, total_threads = {os.cpu_count()}")
        log(args, f"model loaded in {time.perf_counter() - t0:.1f} s; {cfg.n_parallel} slot(s) "
                  f"of {state.engine.n_ctx_slot} tokens; server is ready")

    return run_server(server, load, state.stop, exit_code)


def run_server(server, load, stop, exit_code: list[int]) -> int:
    """Load in a background thread while uvicorn serves until SIGINT / SIGTERM; then `stop`.
    The exit status: exit_code[0], or 1 when the socket could not be bound."""
    threading.Thread(target=load, name="llamacpy-load", daemon=True).start()
    install_signal_handlers(server)
    try:
        server.run()
    finally:
        stop()
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
