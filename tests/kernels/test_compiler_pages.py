"""kernels/compiler_pages.py: LLVM's clean pages leave the resident set, only those, and kernels
compiled or loaded afterwards still run and give the right answers."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from llamacpy.kernels import compiler_pages

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

SMAPS = """\
7f0000000000-7f0000365000 r--p 00000000 00:2d 123 /venv/llvmlite/binding/libllvmlite.so
Size:               3476 kB
Rss:                3476 kB
Anonymous:             0 kB
7f0000365000-7f0005394000 r-xp 00365000 00:2d 123 /venv/llvmlite/binding/libllvmlite.so
Size:              82108 kB
Anonymous:             0 kB
7f0009677000-7f000983c000 r--p 08677000 00:2d 123 /venv/llvmlite/binding/libllvmlite.so
Size:               1812 kB
Anonymous:          1792 kB
7f000983c000-7f0009865000 rw-p 0883c000 00:2d 123 /venv/llvmlite/binding/libllvmlite.so
Size:                164 kB
Anonymous:             0 kB
7f0010000000-7f0010100000 r-xp 00000000 00:2d 456 /usr/lib/libc.so.6
Size:               1024 kB
Anonymous:             0 kB
7f0020000000-7f0020100000 rw-p 00000000 00:00 0
Size:               1024 kB
Anonymous:          1024 kB
"""


def test_only_clean_read_only_llvm_mappings_are_chosen(tmp_path):
    """The RELRO segment (read-only, but private copies), the writable data and other libraries
    are left alone: dropping them would lose what the loader wrote there."""
    smaps = tmp_path / "smaps"
    smaps.write_text(SMAPS)
    assert compiler_pages.llvm_ranges(str(smaps)) == [
        (0x7F0000000000, 0x7F0000365000), (0x7F0000365000, 0x7F0005394000)]


RELEASED_BEFORE_FIRST_RUN = textwrap.dedent("""
    import numba
    import numpy as np
    from llamacpy.kernels import compiler_pages  # llamacpy.kernels installs the listener

    def llvm_rss_kib():
        total, inside = 0, False
        for line in open("/proc/self/smaps"):
            if compiler_pages._HEADER.match(line):
                inside = compiler_pages.LIBRARY in line
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
        return total

    mapped, release = [], compiler_pages.release
    compiler_pages.release = lambda: mapped.append(llvm_rss_kib()) or release()

    @numba.njit
    def inner(x):
        return (x * 2.0).sum()

    @numba.njit
    def outer(x):
        with numba.objmode(resident="int64"):
            resident = llvm_rss_kib()
        return inner(x), resident

    total, resident = outer(np.arange(4.0))
    assert total == 12.0
    assert len(mapped) == 1, mapped  # one release for the nested compiles, at the outermost end
    assert not compiler_pages.release_if_loaded()  # nothing loaded since

    @numba.njit
    def second(x):
        return (x * x).sum()

    assert second(np.arange(4.0)) == 14.0 and inner(np.arange(3.0)) == 6.0
    assert len(mapped) == 2  # `second` was compiled and released too
    print(mapped[0], resident)
""")


def test_llvm_leaves_before_a_new_kernel_first_runs_and_later_compiles_still_work():
    """What a compile maps of LLVM is dropped when numba lets go of its compiler lock, before the
    kernel runs (a kernel's first run would otherwise stack its data on those pages)."""
    out = subprocess.run([sys.executable, "-c", RELEASED_BEFORE_FIRST_RUN], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    mapped, resident = map(int, out.stdout.split())
    assert mapped > 20 << 10, f"LLVM mapped only {mapped} KiB after a compile"
    assert resident < mapped / 4, f"LLVM still {resident} of {mapped} KiB resident in the run"


def test_switched_off_by_the_environment():
    code = ("from llamacpy.kernels import compiler_pages as c; "
            "print(c.ENABLED, c.release_if_loaded())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, LLAMACPY_RELEASE_LLVM="0"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]
