"""The load-time warm-up: decode a few throw-away batches that take every path a request takes,
so that each numba kernel is compiled (or loaded from numba's cache) before the model is
reported ready, then forget them (llama.cpp: common_init_from_params' warm-up decode; skipped
with --no-warmup).

A request's first decode otherwise pays for compiling whatever kernels its batch shape needs.
The paths, by batch size (ops/linear.py, kernels/matmul.py, kernels/attention.py):

- a prompt batch of more than every few-token limit (`PROMPT_TOKENS`): weights dequantized
  tile by tile for BLAS (kernels/dequant.py rows_*), attention through BLAS, the KV store, and
  the one-row output projection (matvec_*) for its last token's logits;
- a few tokens (`FEW_TOKENS`, within every type's small-batch limit): the multi_* kernels and
  the kernel attention; with logits for every row, so the output projection runs multi_* too;
  on AVX-512 also `ZMM_TOKENS`, from which the multi_* kernels take four tokens a vector;
- one token: the matvec_* kernels and single-row attention;
- with several sequences, one token in each (the server's batched step): the one-call store
  and attention over several sequences (attend_cached_seqs) and multi_* on the output.

Each step starts from an empty cache, so a context of any size fits what it can; afterwards the
cache is cleared. The tokenizer (if given) tokenizes and detokenizes a line, and a sampler
draws once, so their first-call costs are paid here too.

Compiling in parallel: numba compiles under one process-wide lock, so with `source` (the model's
path and --repack) the kernels are shared out among processes (`jobs`, default
LLAMACPY_COMPILE_JOBS, else one per idle core: `compile_jobs`). At the first kernel missing
from numba's cache, helper processes start, load the same model and run the same steps; whichever
process calls a kernel first claims it (a file in a shared directory) and compiles it. Every
process skips the kernels that others claimed and have not finished (its outputs are then
garbage, thrown away with the cache), so all of them compile at once; if this process skipped
any, it runs the steps again, waiting for those and loading them from numba's cache. With
every kernel cached no helper starts and the steps run once.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kernels.attention import BLAS_MIN_TOKENS
from ..kernels.matmul import (SMALL_BATCH, SMALL_BATCH_BY_TYPE, SMALL_BATCH_Q6_K_BYTES,
                              SMALL_BATCH_VNNI, ZMM_KERNELS)
from ..memory.batch import Batch

# longer than every few-token limit: every type takes its prompt path (VNNI or dequantize + BLAS)
PROMPT_TOKENS = max(SMALL_BATCH, SMALL_BATCH_Q6_K_BYTES, BLAS_MIN_TOKENS,
                    *SMALL_BATCH_BY_TYPE.values(), *SMALL_BATCH_VNNI.values()) + 8
# within every type's few-token limit, below every zmm start: each type's ymm multi_* kernel
FEW_TOKENS = 2
# where the CPU has AVX-512BW, also a batch from which every type takes its zmm multi_* kernel
ZMM_TOKENS = max(start for _, start in ZMM_KERNELS.values()) if ZMM_KERNELS else 0
BATCHED_SEQS = 4  # rows of the batched multi-sequence step (at most the context's sequences)


@dataclass(frozen=True)
class Source:
    """Where a context's model comes from, for helper processes to load it too."""

    path: str
    repack: bool = False  # load_model(..., repack=)


def warm_up(ctx, tokenizer=None, progress: Callable[[str], None] | None = None, *,
            source: Source | None = None, jobs: int | None = None) -> list[tuple[str, float]]:
    """Run the warm-up decodes on `ctx` (an engine.context.Context), then clear its cache.

    `progress(label)` is called before each step. With `source`, kernels missing from numba's
    cache compile in up to `jobs` processes at once. Returns (step, seconds) per step."""
    steps = warm_up_steps(ctx)
    if tokenizer is not None:
        steps.append(("tokenizer and sampler", lambda: _text_paths(ctx, tokenizer)))
    # jobs None: decided at the first kernel missing from the cache (a warm start measures nothing)
    wanted = jobs is None or jobs > 1
    shared = _SharedCompile(ctx, source, None if jobs is None else jobs - 1) \
        if source is not None and wanted else None
    try:
        if shared is None:
            return _run_steps(ctx, steps, progress)
        shared.start()
        with np.errstate(all="ignore"):  # skipped kernels leave garbage: overflows are expected
            timings = _run_steps(ctx, steps, progress, lambda: shared.skipped)
        if shared.skipped:  # that pass left kernels to the helpers: run again with them all
            shared.skipping = False
            if progress is not None:
                progress("again, with the kernels the helper processes compiled")
            timings = _run_steps(ctx, steps, None)
        return timings
    finally:
        if shared is not None:
            shared.close()
        ctx.cache.clear()


def _run_steps(ctx, steps, progress, tolerate=lambda: False) -> list[tuple[str, float]]:
    """Run the steps, each from an empty cache; (label, seconds) each. A step that fails while
    `tolerate()` (kernels were skipped: their outputs are garbage) is passed over."""
    timings = []
    for label, run in steps:
        if progress is not None:
            progress(label)
        t0 = time.perf_counter()
        try:
            run()
        except Exception:
            if not tolerate():
                raise
        finally:
            ctx.cache.clear()
        timings.append((label, time.perf_counter() - t0))
    return timings


def warm_up_steps(ctx) -> list[tuple[str, Callable[[], object]]]:
    """The decode steps for this context's sizes: (label, callable) each."""
    room = ctx.n_ctx_seq
    n_vocab = ctx.model.args.n_vocab
    steps = []

    def decode(batch):
        return lambda: ctx.decode(batch)

    n = min(PROMPT_TOKENS, room)
    steps.append((f"prompt batch ({n} tokens)", decode(Batch.from_tokens(_tokens(n, n_vocab)))))
    for n in sorted({min(FEW_TOKENS, room), min(ZMM_TOKENS, room)}):
        if n > 1:
            batch = Batch.from_tokens(_tokens(n, n_vocab), all_logits=True)
            steps.append((f"few-token batch ({n} tokens)", decode(batch)))
    steps.append(("one-token decode", decode(Batch.from_tokens(_tokens(1, n_vocab)))))
    n_seq = min(BATCHED_SEQS, ctx.n_seq)
    if n_seq > 1:
        batch = Batch(np.asarray(_tokens(n_seq, n_vocab), np.int32), np.zeros(n_seq, np.int32),
                      np.arange(n_seq, dtype=np.int32), np.ones(n_seq, bool))
        steps.append((f"batched step ({n_seq} sequences)", decode(batch)))
    return steps


def _tokens(n: int, n_vocab: int) -> list[int]:
    """n token ids spread over the vocabulary (which ones does not matter to the kernels)."""
    return [int(t) for t in (np.arange(n, dtype=np.int64) * 7919 + 1000) % n_vocab]


def _text_paths(ctx, tokenizer) -> None:
    from ..sampling import Sampler

    tokens = tokenizer.tokenize("Hello, world! 123", add_special=True, parse_special=True)
    tokenizer.detokenize(tokens)
    if not tokens:
        return
    logits = ctx.decode(Batch.from_tokens(tokens[: max(1, min(len(tokens), ctx.n_ctx_seq))]))
    Sampler(tokenizer=tokenizer).sample(logits[-1])


# -- compiling in parallel ----------------------------------------------------------------------


def compile_jobs() -> int:
    """Processes that may compile kernels at once: LLAMACPY_COMPILE_JOBS, else one per idle
    core, 1 to MAX_COMPILE_JOBS. Each helper holds its own numba and LLVM (~0.3 GB) and only
    pays with a core to itself: on a quiet 2-core Zen 5 Gemma 3's warm-up took 42 s with 2
    against 80 s with 1, and at a load average of ~2.5 two were slower than one."""
    if os.environ.get("LLAMACPY_COMPILE_JOBS"):
        return max(1, int(os.environ["LLAMACPY_COMPILE_JOBS"]))
    return idle_cores(_usable_cpus(), _busy_cpus())


MAX_COMPILE_JOBS = 4


def idle_cores(cpus: int, busy: float) -> int:
    """Cores left idle with `busy` CPUs' worth of work running, rounded, 1..MAX_COMPILE_JOBS."""
    return int(max(1, min(MAX_COMPILE_JOBS, cpus - busy + 0.5)))  # float max/min: inf is fine


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # what this process may run on (taskset, cgroups)
    except AttributeError:
        return os.cpu_count() or 1


def _busy_cpus(seconds: float = 0.2) -> float:
    """CPUs' worth of time other processes used over the next `seconds` (Linux's /proc/stat);
    elsewhere the 1-minute load average, which lags: it still counts a compile just ended."""
    try:
        first = _cpu_times()
        time.sleep(seconds)
        second = _cpu_times()
        busy, total = (b - a for a, b in zip(first, second))
        return (os.cpu_count() or 1) * busy / total if total > 0 else 0.0
    except (OSError, ValueError):
        try:
            return os.getloadavg()[0]
        except (AttributeError, OSError):  # neither: assume busy, one process
            return float("inf")


def _cpu_times() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat's first line."""
    with open("/proc/stat") as f:
        ticks = [int(v) for v in f.readline().split()[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle and iowait
    total = sum(ticks[:8])  # guest time is already counted in user
    return total - idle, total


def _skip(*args, **kwargs):
    """What a helper runs in place of a kernel another process compiles."""
    return None


class _SharedCompile:
    """numba's first call of a kernel signature (Dispatcher._compile_for_args, which compiles
    or loads from the cache and returns what to run) decided among processes by claim files:
    `<function>.claim` (the owner's pid; the owner compiles every signature of that function,
    so that no two processes write one function's cache index at once) and
    `<function+signature>.done` once it is in the cache. Signatures already in the cache are
    loaded without a claim (loading writes nothing)."""

    def __init__(self, ctx, source: Source | None, n_helpers: int | None,
                 folder: str | None = None):
        from numba.core.dispatcher import Dispatcher

        self.ctx, self.source, self.n_helpers = ctx, source, n_helpers
        self.helper = folder is not None
        self.spawned = self.helper  # whether the helpers were started (a helper starts none)
        self.skipping = True  # others' unfinished kernels are skipped (False: waited for)
        self.skipped = False  # whether any was
        self.folder = folder or tempfile.mkdtemp(prefix="llamacpy-compile-")
        self.procs: dict[int, subprocess.Popen] = {}
        self.dispatcher = Dispatcher
        self.original = Dispatcher._compile_for_args

    def start(self) -> None:
        shared, original = self, self.original

        def compile_for_args(disp, *args, **kws):
            return shared.first_call(disp, original, args, kws)

        self.dispatcher._compile_for_args = compile_for_args

    def close(self) -> None:
        self.dispatcher._compile_for_args = self.original
        for proc in self.procs.values():  # done with what this process needs: stop them
            if proc.poll() is None:
                proc.terminate()  # numba writes cache files by rename: never half a file
        for proc in self.procs.values():
            proc.wait()
        if not self.helper:
            shutil.rmtree(self.folder, ignore_errors=True)

    def first_call(self, disp, original, args, kws):
        func = disp.py_func
        if not func.__module__.startswith("llamacpy."):
            return original(disp, *args, **kws)
        name = f"{func.__module__}.{func.__qualname__}"
        argtypes = tuple(disp.typeof_pyval(a) for a in args)
        if _cached(disp, argtypes):
            return original(disp, *args, **kws)  # a load, not a compile: nothing to share out
        if not self.spawned:  # the first kernel to compile
            self.spawned = True
            if self.n_helpers is None:  # decided now that there is something to compile
                self.n_helpers = compile_jobs() - 1
            self.spawn()
        if not self.helper and not self.procs:
            return original(disp, *args, **kws)  # no helper to share the compiling with
        claim = os.path.join(self.folder, _digest(name) + ".claim")
        done = os.path.join(self.folder, _digest(f"{name}{argtypes}") + ".done")
        owner = _claim(claim)
        if owner == os.getpid():
            result = original(disp, *args, **kws)
            open(done, "w").close()
            return result
        if os.path.exists(done):
            return original(disp, *args, **kws)  # from the cache
        if self.helper or self.skipping:
            self.skipped = True
            return _skip
        proc = self.procs.get(owner)
        while not os.path.exists(done) and proc is not None and proc.poll() is None:
            time.sleep(0.02)
        return original(disp, *args, **kws)  # from the cache (compiled here if the owner died)

    def spawn(self) -> None:
        ctx, src = self.ctx, self.source
        type_k, type_v = ctx.cache.types  # -ctk/-ctv: q8_0, bf16... have kernels of their own
        cmd = [sys.executable, "-m", "llamacpy.engine.warmup", self.folder, src.path,
               str(int(src.repack)), str(ctx.n_seq), str(min(ctx.n_ctx_seq, 2 * PROMPT_TOKENS)),
               str(ctx.n_ubatch), type_k, type_v]
        env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                   LLAMACPY_COMPILE_JOBS="1")
        for _ in range(self.n_helpers):
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs[proc.pid] = proc


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def _claim(path: str) -> int:
    """The pid owning `path`: this process's if it created it now."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        for _ in range(100):  # the owner writes its pid right after creating the file
            with open(path) as f:
                text = f.read()
            if text:
                return int(text)
            time.sleep(0.001)
        return -1
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return os.getpid()


def _cached(disp, argtypes) -> bool:
    """Whether numba's cache holds this signature (numba internals: on any doubt, False)."""
    try:
        cache = disp._cache
        key = cache._index_key(argtypes, disp.targetctx.codegen())
        return key in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - another numba version, a cache that cannot be read
        return False


def _helper(argv: list[str]) -> None:
    """A helper process: the same model and steps, compiling only the kernels it claims."""
    folder, path, repack, n_seq, n_ctx_seq, n_ubatch, type_k, type_v = argv
    _end_with_parent()
    from ..format import open_gguf
    from ..models import load_model
    from .context import Context

    n_seq = int(n_seq)
    model = load_model(open_gguf(path), repack=repack == "1")
    ctx = Context(model, n_ctx=n_seq * int(n_ctx_seq), n_seq=n_seq, n_ubatch=int(n_ubatch),
                  type_k=type_k, type_v=type_v)
    _SharedCompile(ctx, None, 0, folder).start()
    np.seterr(all="ignore")
    _run_steps(ctx, warm_up_steps(ctx), None, tolerate=lambda: True)  # garbage from skipped kernels


def _end_with_parent() -> None:
    """Linux: SIGTERM this helper if its parent dies (a server stopped while warming up)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    _helper(sys.argv[1:])
