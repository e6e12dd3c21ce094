"""Kernels compiled by different processes into one numba cache, then loaded together, still
compute their own kind: numba names compiled callees by qualified name, and two cached kernels
whose callees share a name would be merged into one when both load (a closure factory made
exactly that: every Q8_0 few-token kernel ran another kind's code)."""

import os
import subprocess
import sys

import pytest

COMPILE = """
import numpy as np, importlib
M = importlib.import_module("llamacpy.kernels.matmul")
from llamacpy.quants import quantize
from llamacpy.format.constants import GGMLType
rng = np.random.default_rng(0)
t = getattr(GGMLType, "{kind}")
w = quantize(rng.standard_normal((64, 256)).astype(np.float32), t).reshape(64, -1)
w.flags.writeable = False
X = rng.standard_normal((8, 256)).astype(np.float32)
Y = np.zeros((8, 64), np.float32)
getattr(M, "{kernel}")(w, X, Y, 1)
"""

CHECK = """
import numpy as np, importlib
M = importlib.import_module("llamacpy.kernels.matmul")
from llamacpy.quants import dequantize, quantize
from llamacpy.format.constants import GGMLType
rng = np.random.default_rng(1)
X = rng.standard_normal((8, 256)).astype(np.float32)
for kind, kernel in {pairs}:
    t = getattr(GGMLType, kind)
    w = quantize(rng.standard_normal((64, 256)).astype(np.float32), t).reshape(64, -1)
    w.flags.writeable = False
    Y = np.zeros((8, 64), np.float32)
    getattr(M, kernel)(w, X, Y, 1)
    ref = X @ dequantize(w.reshape(-1), t, (256, 64)).reshape(64, 256).T
    err = np.abs(Y - ref).max() / np.abs(ref).max()
    assert err < 0.02, (kind, kernel, err)
    assert getattr(M, kernel).stats.cache_hits, kernel  # loaded, not compiled here
print("ok")
"""


@pytest.mark.timeout(600)
def test_kernels_cached_by_different_processes_keep_their_kind(tmp_path):
    pairs = [("Q8_0", "multi_q8_0_zmm"), ("Q4_K", "multi_q4_k_zmm"),
             ("Q8_0", "multi_q8_0"), ("Q4_K", "multi_q4_k")]
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path), "NUMBA_NUM_THREADS": "1"}
    for kind, kernel in pairs:  # each kernel compiled in a process of its own
        subprocess.run([sys.executable, "-c", COMPILE.format(kind=kind, kernel=kernel)],
                       env=env, check=True)
    out = subprocess.run([sys.executable, "-c", CHECK.format(pairs=pairs)], env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


STAMPED = """
import numpy as np
from llamacpy.kernels import cache_stamp, elementwise
locator = elementwise.silu_1d._cache._impl.locator
assert isinstance(locator, cache_stamp.PackageInTreeLocator), type(locator)
x = np.linspace(-4, 4, 37).astype(np.float32)
out = np.empty_like(x)
elementwise.silu_1d(x, out)
assert np.allclose(out, x / (1 + np.exp(-x)), rtol=1e-5)
print("hit" if elementwise.silu_1d.stats.cache_hits else "compiled")
"""


@pytest.mark.timeout(600)
def test_a_change_in_any_kernel_file_compiles_the_kernels_again(tmp_path):
    """numba stamps a cached kernel with its own file only; silu_1d (elementwise.py) inlines
    simd.py's exp, so a change to simd.py alone must not load its old code (cache_stamp.py)."""
    import shutil
    from pathlib import Path

    import llamacpy

    pkg = tmp_path / "llamacpy"
    shutil.copytree(Path(llamacpy.__file__).parent, pkg,
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=str(tmp_path), NUMBA_NUM_THREADS="1")

    def run() -> str:
        out = subprocess.run([sys.executable, "-c", STAMPED], env=env, cwd=tmp_path,
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        return out.stdout.strip()

    assert run() == "compiled"
    assert run() == "hit"
    with open(pkg / "kernels" / "simd.py", "a") as f:
        f.write("\n# edited\n")
    assert run() == "compiled"
    assert run() == "hit"
