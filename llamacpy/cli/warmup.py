"""llamacpy warmup [MODEL ...]: compile the numba kernels ahead of time, into numba's cache.

A kernel is compiled on its first call, then kept in numba's on-disk cache (__pycache__ beside
the kernel sources, or NUMBA_CACHE_DIR). llama-server warms up before it reports ready
(engine/warmup.py), so on a machine whose cache is empty its first start waits for every kernel
the model uses; this command does that work once, at install (scripts/setup.sh runs it).

Each MODEL (a path or a catalogue name) is warmed up as llama-server runs it with one slot and
with several (--parallel > 1: repacked weights and the batched step); llama-cli and the Python
API use the kernels of the first. With no MODEL: every catalogue model in the model cache, and
if none is there, a tiny generated model (zero weights) whose matrices cover every tensor type,
so the kernels of any quantized model are ready (--all-types adds it to the models given).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

# (label, sequences, repack): as llama-server runs with -np 1 and with -np > 1 (repack_default)
CONFIGS = (("1 slot", 1, False), ("2 slots, repacked", 2, True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="llamacpy warmup", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", metavar="MODEL", help="GGUF file or catalogue name")
    ap.add_argument("--all-types", action="store_true",
                    help="also warm up a tiny model that covers every tensor type")
    ap.add_argument("-j", "--jobs", type=int, default=None,
                    help="processes compiling at once (default: LLAMACPY_COMPILE_JOBS, else one per idle core)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    say = (lambda line: None) if args.quiet else \
        (lambda line: print(f"llamacpy warmup: {line}", file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    try:
        from ..hub import resolve_model

        models = [(m, resolve_model(m)) for m in args.models] or cached_catalogue_models()
        with tempfile.TemporaryDirectory(prefix="llamacpy-warmup-") as tmp:
            if args.all_types or not models:
                models.append(("all tensor types", write_all_types_model(Path(tmp) / "t.gguf")))
            runs = [(name, path, cfg) for name, path in models for cfg in CONFIGS]
            for i, (name, path, (label, n_seq, repack)) in enumerate(runs, 1):
                tag = f"[{i}/{len(runs)}] {name} ({label})"
                seconds = warm_model(path, n_seq, repack, lambda step: say(f"{tag}: {step}"),
                                     args.jobs)
                say(f"{tag}: done in {seconds:.1f} s")
    except Exception as e:  # noqa: BLE001 - one line, non-zero exit; setup.sh goes on
        print(f"llamacpy warmup: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    say(f"kernels compiled and cached in {time.perf_counter() - t0:.1f} s")
    return 0


def cached_catalogue_models() -> list[tuple[str, Path]]:
    from ..hub.catalog import CATALOG, cache_dir

    # the speech models run in whisper-cli / whisper-server, not llama-server's warm-up steps
    return [(e.name, cache_dir() / e.file) for e in CATALOG.values()
            if (cache_dir() / e.file).exists() and e.source_format != "ctranslate2-whisper"]


def warm_model(path: Path, n_seq: int, repack: bool, progress, jobs: int | None = None) -> float:
    """Load `path` as llama-server would with n_seq slots and run engine/warmup.py on it."""
    from ..engine.context import Context
    from ..engine.warmup import Source, warm_up
    from ..format import open_gguf
    from ..models import load_model
    from ..tokenizer import Tokenizer

    t0 = time.perf_counter()
    g = open_gguf(path)
    tokenizer = Tokenizer.from_gguf(g) if "tokenizer.ggml.tokens" in g.metadata else None
    model = load_model(g, repack=repack)
    ctx = Context(model, n_ctx=256 * n_seq, n_seq=n_seq)  # the size changes no kernel
    warm_up(ctx, tokenizer, progress, source=Source(str(path), repack), jobs=jobs)
    return time.perf_counter() - t0


def write_all_types_model(path: Path, types=None) -> Path:
    """A 3-layer llama model whose matrices take every tensor type the kernels handle (or those
    of `types`, in turn), all zero: the kernels compiled depend on the types and the array
    layouts, not on the values."""
    import numpy as np

    from ..format import GGMLType, TensorToWrite, write_gguf
    from ..kernels.dequant import ROW_KERNELS

    n_embd, n_ff, n_vocab, n_layer = 256, 512, 512, 3
    types = list(types or [t for t in ROW_KERNELS if t != GGMLType.F32] + [GGMLType.F32])
    matrices = [("token_embd", n_embd, n_vocab), ("output", n_embd, n_vocab)]
    for il in range(n_layer):
        p = f"blk.{il}"
        matrices += [(f"{p}.attn_q", n_embd, n_embd), (f"{p}.attn_k", n_embd, n_embd // 2),
                     (f"{p}.attn_v", n_embd, n_embd // 2), (f"{p}.attn_output", n_embd, n_embd),
                     (f"{p}.ffn_gate", n_embd, n_ff), (f"{p}.ffn_up", n_embd, n_ff),
                     (f"{p}.ffn_down", n_ff, n_embd)]
    tensors = [TensorToWrite(f"{name}.weight", types[i % len(types)], (n_in, n_out), None)
               for i, (name, n_in, n_out) in enumerate(matrices)]
    for t in tensors:
        t.produce = (lambda n: lambda: np.zeros(n, np.uint8))(t.nbytes)
    norms = ["output_norm"] + [f"blk.{il}.{n}" for il in range(n_layer)
                               for n in ("attn_norm", "ffn_norm")]
    ones = lambda: np.ones(n_embd, np.float32)  # noqa: E731
    tensors += [TensorToWrite(f"{n}.weight", GGMLType.F32, (n_embd,), ones) for n in norms]
    a = "llama"
    metadata = {"general.architecture": a, f"{a}.context_length": 4096,
                f"{a}.embedding_length": n_embd, f"{a}.block_count": n_layer,
                f"{a}.feed_forward_length": n_ff, f"{a}.attention.head_count": 4,
                f"{a}.attention.head_count_kv": 2, f"{a}.vocab_size": n_vocab,
                f"{a}.attention.layer_norm_rms_epsilon": 1e-5}
    write_gguf(path, metadata, tensors)
    return path


if __name__ == "__main__":
    sys.exit(main())
