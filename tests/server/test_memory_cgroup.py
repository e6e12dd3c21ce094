"""Issue 12's memory rule: llama-server with the wrapper's memory flags (--load-mode mmap
--no-repack --no-warmup -c 3096) serves requests inside a memory cgroup limited to the model's
file size + 300 MB with no swap, and --load-mode none is the mode that holds the whole model in
private memory: under a limit below the file size, mmap still serves (the kernel drops file pages
and reads them again) while none is killed. Skipped where no memory cgroup can be made
(bench/load_modes.py cgroup_dir says why)."""

from __future__ import annotations

import pytest

from bench.load_modes import WRAPPER_KV, cgroup_dir, serve_in_cgroup
from llamacpy.hub import resolve_model
from llamacpy.memory.kv_cache import cache_dtype

MODEL = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def file_mib(model_paths) -> float:
    try:
        d, _ = cgroup_dir(1 << 30)
        d.rmdir()
    except RuntimeError as e:
        pytest.skip(str(e))
    return resolve_model(MODEL).stat().st_size / 2**20


@pytest.mark.parametrize("mode", ["mmap", "none"])
def test_serves_within_file_size_plus_300_mb(file_mib, mode):
    r = serve_in_cgroup(MODEL, mode, 300, threads=2, kv_flags=())
    assert r["served"] == 3 and r["oom_kills"] == 0 and r["exit"] == 0, r
    assert r["peak_mib"] <= r["limit_mib"]
    if mode == "none":  # the whole model in private memory
        assert r["anon_mib"] >= file_mib
    else:
        assert r["anon_mib"] < file_mib / 2


def test_the_wrapper_command_line_serves_within_the_limit(file_mib):
    """With the wrapper's cache flags too (-ctk q8_0 -ctv q8_0 -fa on)."""
    try:
        cache_dtype("q8_0")
    except ValueError:
        pytest.skip("no q8_0 KV cache in this build")
    r = serve_in_cgroup(MODEL, "mmap", 300, threads=2, kv_flags=WRAPPER_KV)
    assert r["served"] == 3 and r["oom_kills"] == 0 and r["exit"] == 0, r


def test_below_the_file_size_only_mmap_survives(file_mib):
    headroom = -int(file_mib * 2**20 * 0.2 / 10**6)  # a limit of 80% of the file
    mapped = serve_in_cgroup(MODEL, "mmap", headroom, threads=2, kv_flags=(), requests=1,
                             max_tokens=4)
    assert mapped["served"] == 1 and mapped["oom_kills"] == 0, mapped
    private = serve_in_cgroup(MODEL, "none", headroom, threads=2, kv_flags=(), requests=1,
                              max_tokens=4)
    assert private["served"] == 0 and private["oom_kills"] >= 1, private
