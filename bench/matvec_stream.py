"""All of a model's matrices multiplied back to back by the one-token kernels, as a decode step runs
them with nothing around them: ms per pass and GB/s of weights (issue 17, the prefetch distance).

    NUMBA_NUM_THREADS=1 python bench/matvec_stream.py MODEL.gguf [--all]

--all includes the non-layer matrices (the output / tied embedding).
"""
import time, sys
import llamacpy
import numpy as np
from llamacpy.format import open_gguf
from llamacpy.ops.linear import Linear
from llamacpy.kernels.dequant import call_kernel
g = open_gguf(sys.argv[1])
Ls = [Linear(t) for name, t in g.tensors.items() if (name.startswith("blk.") or "--all" in sys.argv) and len(t.ne) == 2]
print(len(Ls), "matrices", sum(L.weight.nbytes for L in Ls) / 1e6, "MB", {L.ggml_type.name for L in Ls})
xs = {L.in_features: np.random.rand(L.in_features).astype(np.float32) for L in Ls}
ys = [np.empty(L.out_features, np.float32) for L in Ls]
def step_linear():
    for L, y in zip(Ls, ys): L(xs[L.in_features], y)
def step_raw():
    for L, y in zip(Ls, ys): L._matvec(L._weight_view, xs[L.in_features], y)
nbytes = sum(L.weight.nbytes for L in Ls)
for f in (step_linear, step_raw, step_linear, step_raw):
    f(); ts = []
    for _ in range(30):
        t0 = time.perf_counter(); f(); ts.append(time.perf_counter() - t0)
    t = np.median(ts)
    print(f.__name__, "%.3f ms  %.1f GB/s" % (t * 1e3, nbytes / t / 1e9))
