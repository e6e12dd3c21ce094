"""Image encoding time, llamacpy against llama.cpp's mtmd, on a random Qwen3.5-0.8B-shaped vision
tower (depth 12, width 768, F16 mmproj) and the same image.

    python bench/vision_encode.py [-t THREADS] [-r REPEAT] [--size 512x512] [--flash-attn auto]
                                  [--cache DIR] [--mmproj FILE --text-model FILE]

Without --mmproj the models are built once with transformers and llama.cpp's converter
(tests/reference/vision/tiny_vision.py) and cached in --cache. Each engine runs in its own
worker process (its own peak RSS); a warm-up encode (numba JIT, llama.cpp graph allocation) is
excluded. "prep" is decode + resize + normalise (llama.cpp: stb decode + mtmd_tokenize), "encode"
the vision tower alone (mtmd_encode_chunk). GFLOP/s counts the tower's matmuls and attention.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "llamacpy-bench"


def sample_image(width: int, height: int) -> bytes:
    """A PNG with colour ramps, waves and noise (deterministic)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    img = np.stack([128 + 100 * np.sin(x / 17 + y / 29), 255 * x / width,
                    128 + 90 * np.cos(np.hypot(x - width / 3, y - height / 2) / 11)], axis=-1)
    img = (img + rng.normal(0, 8, img.shape)).clip(0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def worker(engine: str, args) -> None:
    """Print one JSON line: prep and encode seconds per repeat, grid, peak RSS."""
    import resource

    data = sample_image(*args.size)
    prep, enc = [], []
    if engine == "llama.cpp":
        sys.path.insert(0, str(ROOT / "tests" / "reference" / "vision"))
        from mtmd_ref import Mtmd

        flash = {"auto": None, "on": True, "off": False}[args.flash_attn]
        m = Mtmd(Path(args.mmproj), Path(args.text_model), n_threads=args.threads,
                 flash_attn=flash)
        for i in range(args.repeat + 1):
            t0 = time.perf_counter()
            r = m.encode(data)  # decode + tokenize (preprocess) + one encode
            total = time.perf_counter() - t0
            if i:
                enc.append(r["seconds"][0])
                prep.append(total - r["seconds"][0])
        grid = [r["nx"], r["ny"], r["n_tokens"]]
    else:
        from llamacpy.vision import decode_image, load_projector

        proj = load_projector(args.mmproj)
        for i in range(args.repeat + 1):
            t0 = time.perf_counter()
            prepared = proj.prepare(decode_image(data))
            t1 = time.perf_counter()
            proj.encode_pixels(prepared.pixels)
            t2 = time.perf_counter()
            if i:
                prep.append(t1 - t0)
                enc.append(t2 - t1)
        grid = [prepared.nx, prepared.ny, prepared.n_tokens]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"prep": prep, "encode": enc, "grid": grid, "rss_mib": rss}), flush=True)


def run_worker(engine: str, args) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               NUMBA_NUM_THREADS=str(args.threads))
    cmd = [sys.executable, __file__, "--worker", engine, "-t", str(args.threads),
           "-r", str(args.repeat), "--size", f"{args.size[0]}x{args.size[1]}",
           "--flash-attn", args.flash_attn, "--mmproj", str(args.mmproj),
           "--text-model", str(args.text_model)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        raise RuntimeError(f"{engine} worker failed:\n{out.stderr[-3000:]}")
    return json.loads(lines[-1])


def tower_gflop(mmproj: str, nx: int, ny: int) -> float:
    """Multiply-adds x 2 of the Qwen3-VL tower for an nx x ny merged grid."""
    from llamacpy.format import open_gguf

    with open_gguf(mmproj) as g:
        e = int(g.metadata["clip.vision.embedding_length"])
        ff = int(g.metadata["clip.vision.feed_forward_length"])
        layers = int(g.metadata["clip.vision.block_count"])
        p = int(g.metadata["clip.vision.patch_size"])
        pd = int(g.metadata["clip.vision.projection_dim"])
    n = 4 * nx * ny  # patches
    per_layer = 2 * n * (3 * e * e + e * e + 2 * e * ff) + 4 * n * n * e
    return (2 * n * 3 * p * p * e + layers * per_layer
            + 2 * (n // 4) * (16 * e * e + 4 * e * pd)) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--repeat", type=int, default=3)
    ap.add_argument("--size", default="512x512", type=lambda s: tuple(map(int, s.split("x"))))
    ap.add_argument("--flash-attn", default="auto", choices=["auto", "on", "off"],
                    help="llama.cpp's vision attention (auto = on for CPU, its default)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--mmproj")
    ap.add_argument("--text-model", help="llama.cpp needs a text model of the projection width")
    ap.add_argument("--worker", choices=["llama.cpp", "llamacpy"])
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args)
    if not args.mmproj:
        sys.path.insert(0, str(ROOT))  # tiny_vision imports tests.reference
        from tests.reference.vision.tiny_vision import make_bench_models

        args.mmproj, args.text_model = map(str, make_bench_models(args.cache))
    res = {e: run_worker(e, args) for e in ("llama.cpp", "llamacpy")}
    nx, ny, n_tok = res["llamacpy"]["grid"]
    if res["llama.cpp"]["grid"][2] != n_tok:
        raise RuntimeError(f"grids differ: {res}")
    gflop = tower_gflop(args.mmproj, nx, ny)
    print(f"mmproj: {Path(args.mmproj).name}  image {args.size[0]}x{args.size[1]} -> {nx}x{ny} "
          f"= {n_tok} tokens ({4 * n_tok} patches, {gflop:.1f} GFLOP)  threads: {args.threads}  "
          f"repeat: {args.repeat}  llama.cpp flash-attn: {args.flash_attn}")
    print("| engine | prep ms | encode s | GFLOP/s | tokens/s | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|")
    med = {e: statistics.median(r["encode"]) for e, r in res.items()}
    for e, r in res.items():
        print(f"| {e} | {1000 * statistics.median(r['prep']):.1f} | {med[e]:.3f} | "
              f"{gflop / med[e]:.1f} | {n_tok / med[e]:.1f} | {r['rss_mib']:.0f} |")
    print(f"encode ratio llamacpy / llama.cpp speed: {med['llama.cpp'] / med['llamacpy']:.2f}x")


if __name__ == "__main__":
    main()
