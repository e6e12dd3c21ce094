"""A decode step with every matvec replaced by a copy of a fixed vector: what is left is attention,
norms, rope, the KV store and the Python glue (issue 17).

    python bench/decode_glue.py MODEL.gguf [--prof]
"""
import sys, time
import llamacpy
from llamacpy import Llama
from llamacpy.ops import linear
import numpy as np
m = sys.argv[1]
llm = Llama(m, n_ctx=1024, n_threads=1, verbose=False)
rng = np.random.default_rng(0)
toks = [int(t) for t in rng.integers(100, llm.n_vocab() - 100, 128)]
def run():
    llm.reset()
    for t in toks: llm.eval([t])
def timeit():
    run(); ts = []
    for _ in range(3):
        t0 = time.perf_counter(); run(); ts.append(time.perf_counter() - t0)
    return min(ts) / 128 * 1e3
full = timeit()
outs = {}
def fake(self, x, out):
    y = outs.get(self.name)
    if y is None:
        y = outs[self.name] = (np.random.default_rng(1).standard_normal((1, self.out_features)) * 0.01).astype(np.float32)
    return y.copy()
linear.Linear._one_token = fake
glue = timeit()
print(f"step {full:.3f} ms, without the matvecs {glue:.3f} ms")
if "--prof" in sys.argv:
    import cProfile, pstats
    pr = cProfile.Profile(); pr.enable(); run(); pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(25)
