"""The load-time warm-up (engine/warmup.py): after it, a request's shapes compile nothing."""

from __future__ import annotations

import importlib
import os
import pkgutil
import time

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

import llamacpy.kernels
from llamacpy.cli.warmup import write_all_types_model
from llamacpy.engine.context import Context
from llamacpy.engine.warmup import FEW_TOKENS, PROMPT_TOKENS, ZMM_TOKENS, warm_up
from llamacpy.format import GGMLType, open_gguf
from llamacpy.memory.batch import Batch
from llamacpy.models import load_model

TYPES = [GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.F16]  # few types: a short compile


def compiled_signatures() -> dict[str, int]:
    counts = {}
    for info in pkgutil.iter_modules(llamacpy.kernels.__path__):
        mod = importlib.import_module(f"llamacpy.kernels.{info.name}")
        for name, obj in vars(mod).items():
            if isinstance(obj, CPUDispatcher):
                counts[f"{mod.__name__}.{name}"] = len(obj.signatures)
    return counts


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_all_types_model(tmp_path_factory.mktemp("warmup") / "tiny.gguf", TYPES)


@pytest.mark.parametrize("n_seq,repack", [(1, False), (3, True)])
def test_requests_after_the_warm_up_compile_nothing(tiny, n_seq, repack):
    ctx = Context(load_model(open_gguf(tiny), repack=repack), n_ctx=128 * n_seq, n_seq=n_seq)
    labels = [label for label, _ in warm_up(ctx)]
    # prompt, few tokens (and on AVX-512 the zmm few-token count), one token, batched step
    assert len(labels) == 3 + (ZMM_TOKENS > FEW_TOKENS) + (n_seq > 1)
    assert not ctx.cache.n_past.any()  # the warm-up's tokens are forgotten
    before = compiled_signatures()
    # what a server does: a long prompt, a short one, decode steps, a batched step
    for seq, n in enumerate([PROMPT_TOKENS + 11, 5][:n_seq]):
        ctx.decode(Batch.from_tokens(list(range(3, 3 + n)), seq=seq))
    ctx.decode(Batch.from_tokens([7], pos0=int(ctx.cache.n_past[0])))
    for n in (2, 3, 9):  # draft checks: every type's ymm and zmm few-token kernels
        ctx.decode(Batch.from_tokens([8] * n, pos0=int(ctx.cache.n_past[0])))
    if n_seq > 1:
        pos = ctx.cache.n_past[:n_seq].astype(np.int32)
        ctx.decode(Batch(np.full(n_seq, 9, np.int32), pos, np.arange(n_seq, dtype=np.int32),
                         np.ones(n_seq, bool)))
    after = compiled_signatures()
    assert {k: v for k, v in after.items() if v != before.get(k)} == {}


def test_fits_a_tiny_context(tiny):
    ctx = Context(load_model(open_gguf(tiny)), n_ctx=6, n_seq=2)
    assert [label for label, _ in warm_up(ctx)][0] == "prompt batch (3 tokens)"
    assert not ctx.cache.n_past.any()


WARM_UP_IN_A_FRESH_PROCESS = """
import sys
from numba.core.registry import CPUDispatcher
from llamacpy.engine.context import Context
from llamacpy.engine.warmup import Source, warm_up
from llamacpy.format import open_gguf
from llamacpy.models import load_model
import llamacpy.kernels.attention, llamacpy.kernels.matmul, llamacpy.kernels.matvec

ctx = Context(load_model(open_gguf(sys.argv[1])), n_ctx=128)
warm_up(ctx, source=Source(sys.argv[1]), jobs=2)
misses = sum(sum(obj.stats.cache_misses.values()) for mod in
             (llamacpy.kernels.attention, llamacpy.kernels.matmul, llamacpy.kernels.matvec)
             for obj in vars(mod).values() if isinstance(obj, CPUDispatcher))
print(misses)
"""


def test_kernels_compiled_by_helpers_land_in_the_cache(tmp_path):
    """jobs=2 on an empty numba cache: a helper process compiles part of the kernels; after it,
    a new process finds every kernel in the cache."""
    import os
    import subprocess
    import sys

    model = write_all_types_model(tmp_path / "q8.gguf", [GGMLType.Q8_0])
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), TMPDIR=str(tmp_path / "tmp"))
    run = lambda: subprocess.run([sys.executable, "-c", WARM_UP_IN_A_FRESH_PROCESS,  # noqa: E731
                                  str(model)], env=env, capture_output=True, text=True,
                                 timeout=900)
    first = run()
    assert first.returncode == 0, first.stderr
    second = run()
    assert second.returncode == 0, second.stderr
    assert int(second.stdout.split()[-1]) == 0
    assert not list((tmp_path / "tmp").iterdir())  # the claim files are gone


def test_install_warmup_leaves_out_the_speech_models(tmp_path, monkeypatch):
    """`llamacpy warmup` with no MODEL warms the cached catalogue models llama-server runs: a
    cached whisper GGUF (which llama-server's warm-up cannot load) is not among them."""
    from llamacpy.cli.warmup import cached_catalogue_models
    from llamacpy.hub.catalog import CATALOG

    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path))
    for name in ("whisper-tiny.en", "smollm2-135m"):
        (tmp_path / CATALOG[name].file).write_bytes(b"")
    assert [name for name, _ in cached_catalogue_models()] == ["smollm2-135m"]


def test_compile_jobs_one_per_idle_core(monkeypatch):
    """Helpers only where a core is idle: a quiet 2-core machine gets 2, a busy one 1."""
    from llamacpy.engine import warmup

    assert [warmup.idle_cores(2, busy) for busy in (0.0, 0.4, 0.7, 1.5, 6.0)] == [2, 2, 1, 1, 1]
    assert warmup.idle_cores(16, 0.0) == warmup.MAX_COMPILE_JOBS
    assert warmup.idle_cores(1, 0.0) == 1
    assert warmup.idle_cores(8, float("inf")) == 1  # nothing to measure by: this process only
    monkeypatch.delenv("LLAMACPY_COMPILE_JOBS", raising=False)
    monkeypatch.setattr(warmup, "_usable_cpus", lambda: 2)
    monkeypatch.setattr(warmup, "_busy_cpus", lambda: 0.1)
    assert warmup.compile_jobs() == 2
    monkeypatch.setattr(warmup, "_busy_cpus", lambda: 1.9)
    assert warmup.compile_jobs() == 1
    monkeypatch.setenv("LLAMACPY_COMPILE_JOBS", "3")  # the variable wins over the load
    assert warmup.compile_jobs() == 3


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux's /proc/stat")
def test_busy_cpus_sees_a_spinning_process():
    """The sample counts other processes' CPU time now (the load average would lag)."""
    import subprocess
    import sys

    from llamacpy.engine import warmup

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        busy = warmup._busy_cpus(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert 0.7 <= busy <= (os.cpu_count() or 1) + 0.1


def test_a_warm_start_measures_nothing(tiny, monkeypatch):
    """With every kernel cached, the default jobs start no helper and sample no load."""
    from llamacpy.engine import warmup

    ctx = Context(load_model(open_gguf(tiny)), n_ctx=128)
    warm_up(ctx)  # every kernel this context takes, compiled or loaded
    monkeypatch.delenv("LLAMACPY_COMPILE_JOBS", raising=False)
    monkeypatch.setattr(warmup, "_busy_cpus", lambda: pytest.fail("load sampled"))
    monkeypatch.setattr(warmup.subprocess, "Popen", lambda *a, **k: pytest.fail("helper"))
    warm_up(ctx, source=warmup.Source(str(tiny)))


def test_helpers_get_the_cache_types(tiny, monkeypatch):
    """A -ctk q8_0 / -ctv bf16 server's helpers load the same cache types (their attention
    kernels are their own), not f16."""
    from llamacpy.engine import warmup

    started = []

    class Popen:
        def __init__(self, cmd, **kwargs):
            started.append(cmd)
            self.pid = 1000 + len(started)

    monkeypatch.setattr(warmup.subprocess, "Popen", Popen)
    ctx = Context(load_model(open_gguf(tiny)), n_ctx=256, type_k="q8_0", type_v="bf16")
    shared = warmup._SharedCompile(ctx, warmup.Source(str(tiny)), 2)
    shared.spawn()
    shared.procs.clear()
    shared.close()
    assert len(started) == 2 and all(cmd[-2:] == ["q8_0", "bf16"] for cmd in started)
    folder, path, repack, n_seq, n_ctx_seq, n_ubatch, type_k, type_v = started[0][3:]
    assert (path, repack, n_seq, type_k, type_v) == (str(tiny), "0", "1", "q8_0", "bf16")
