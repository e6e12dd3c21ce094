"""Time to first token of the reference deployment: llamacpy's llama-server against llama.cpp on
the Qwen3.5 stand-in with the F16 projector (bench/qwen35_deployment.py's inputs), answering the
image question (a 448x252 JPEG frame and a text part, enable_thinking false, greedy).

    python bench/qwen35_ttft.py [-t 1] [-r 5]

llamacpy: `llama-server --model <stand-in> --mmproj <projector> --ctx-size 2048 --parallel 1
--jinja -t T`, the request with max_tokens 1 and cache_prompt false, timed from sending it to
the response (the JPEG as a base64 data URL, as a client sends it).

llama.cpp: what its llama-server does for that request, through llama-cpp-python's C API in a
worker process (there is no llama-server binary in the wheel): decode the JPEG
(mtmd_helper_bitmap_init_from_buf), mtmd_tokenize the same prompt text (the same template,
rendered by llamacpy), mtmd_helper_eval_chunks (image encoding, then the prompt, n_batch 2048 and
n_ubatch 512 as llama-server), and the argmax of the last logits. No HTTP, JSON or base64, so
the comparison leaves out what a server adds on llama.cpp's side only.

Rounds alternate between the engines; one untimed round each first (numba's kernels, llama.cpp's
graph allocation). Prints each engine's median and the ratio llama.cpp / llamacpy (higher is
better for llamacpy).
"""

from __future__ import annotations

import argparse
import base64
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "reference" / "vision"))

from bench.qwen35_deployment import (BENCH_CACHE, CHAT_STANDIN, QUESTION, STANDIN,  # noqa: E402
                                     dress_for_chat, frame_jpeg)
from tests.server.conftest import start_server, stop_server  # noqa: E402

N_CTX, N_BATCH, N_UBATCH = 2048, 2048, 512  # llama-server's defaults, --ctx-size 2048


def prompt_text(model: Path) -> str:
    """The prompt both servers render for the request, with mtmd's marker where the image goes."""
    from llamacpy.chat import ChatTemplate
    from llamacpy.format import open_gguf
    from llamacpy.vision.mtmd import media_marker

    source = open_gguf(model).metadata["tokenizer.chat_template"]
    messages = [{"role": "user", "content": [{"type": "media_marker", "text": media_marker()},
                                             {"type": "text", "text": QUESTION}]}]
    return ChatTemplate(source).render(messages, enable_thinking=False)


def llamacpp_worker(model: str, mmproj: str, threads: int, prompt: str) -> None:
    """On each stdin line, one request's work; prints {seconds, n_tokens, n_past, token}."""
    import ctypes

    import llama_cpp
    import numpy as np
    from llama_cpp import mtmd_cpp as mtmd

    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.use_extra_bufts = False  # the AMX/repack buffers crash on some of these machines
    lm = llama_cpp.llama_model_load_from_file(model.encode(), mparams)
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = N_CTX, N_BATCH, N_UBATCH
    cparams.n_threads = cparams.n_threads_batch = threads
    lctx = llama_cpp.llama_init_from_model(lm, cparams)
    p = mtmd.mtmd_context_params_default()
    p.use_gpu, p.print_timings, p.n_threads, p.warmup = False, False, threads, True
    mctx = mtmd.mtmd_init_from_file(mmproj.encode(), lm, p)
    if not lm or not lctx or not mctx:
        raise RuntimeError("llama.cpp could not load the model, context or projector")
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(lm))
    jpeg, raw = frame_jpeg(), prompt.encode()
    print("ready", flush=True)
    for _ in sys.stdin:
        t0 = time.perf_counter()
        buf = (ctypes.c_uint8 * len(jpeg)).from_buffer_copy(jpeg)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(mctx, buf, len(jpeg), False)
        chunks = mtmd.mtmd_input_chunks_init()
        text = mtmd.mtmd_input_text(raw, len(raw), True, True)  # llama-server: special on
        bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
        if mtmd.mtmd_tokenize(mctx, chunks, ctypes.byref(text), bitmaps, 1) != 0:
            raise RuntimeError("mtmd_tokenize failed")
        n_past = llama_cpp.llama_pos(0)
        if mtmd.mtmd_helper_eval_chunks(mctx, lctx, chunks, 0, 0, N_BATCH, True,
                                        ctypes.byref(n_past)) != 0:
            raise RuntimeError("mtmd_helper_eval_chunks failed")
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(lctx, -1), (n_vocab,))
        token = int(logits.argmax())
        seconds = time.perf_counter() - t0
        n_tokens = mtmd.mtmd_helper_get_n_tokens(chunks)
        mtmd.mtmd_input_chunks_free(chunks)
        mtmd.mtmd_bitmap_free(bitmap)
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(lctx), True)
        print(json.dumps({"seconds": seconds, "n_tokens": n_tokens, "n_past": n_past.value,
                          "token": token}), flush=True)


def llamacpy_request(url: str, jpeg: bytes) -> dict:
    body = {"messages": [{"role": "user", "content": [
        {"type": "image_url",
         "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()}},
        {"type": "text", "text": QUESTION}]}],
        "max_tokens": 1, "temperature": 0, "cache_prompt": False,
        "chat_template_kwargs": {"enable_thinking": False}}
    t0 = time.perf_counter()
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
    r.raise_for_status()
    seconds = time.perf_counter() - t0
    t = r.json()["timings"]
    return {"seconds": seconds, "prompt_n": t["prompt_n"], "image_ms": t.get("image_ms"),
            "prompt_ms": t["prompt_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-r", "--rounds", type=int, default=5)
    ap.add_argument("--worker", nargs=3, metavar=("MODEL", "MMPROJ", "PROMPT_FILE"))
    args = ap.parse_args()
    if args.worker:
        model, mmproj, prompt_file = args.worker
        return llamacpp_worker(model, mmproj, args.threads, Path(prompt_file).read_text())
    if not STANDIN.exists():
        sys.exit(f"{STANDIN} is missing: make it with bench/make_qwen35_standin.py")
    from tiny_vision import make_bench_models

    model = dress_for_chat(STANDIN, CHAT_STANDIN)
    mmproj, _ = make_bench_models(BENCH_CACHE)
    tmp = Path(tempfile.mkdtemp())
    (tmp / "prompt.txt").write_text(prompt_text(model))
    env = {"OMP_NUM_THREADS": str(args.threads), "OPENBLAS_NUM_THREADS": str(args.threads)}
    ref = subprocess.Popen([sys.executable, __file__, "-t", str(args.threads), "--worker",
                            str(model), str(mmproj), str(tmp / "prompt.txt")],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           env={**__import__("os").environ, **env})
    if ref.stdout.readline().strip() != "ready":
        sys.exit("the llama.cpp worker did not start")
    server = start_server(["--model", str(model), "--mmproj", str(mmproj), "--ctx-size",
                           str(N_CTX), "--parallel", "1", "--jinja", "-t", str(args.threads)],
                          str(tmp / "server.log"))
    jpeg = frame_jpeg()
    ours, theirs = [], []
    try:
        for rnd in range(args.rounds + 1):  # round 0 warms both up and is not counted
            ref.stdin.write("go\n")
            ref.stdin.flush()
            r = json.loads(ref.stdout.readline())
            o = llamacpy_request(server.url, jpeg)
            print(f"round {rnd}: llama.cpp {r['seconds']:.3f} s ({r['n_tokens']} tokens, n_past "
                  f"{r['n_past']}), llamacpy {o['seconds']:.3f} s (prompt_n {o['prompt_n']}, "
                  f"image {o['image_ms']} ms, prompt {o['prompt_ms']:.0f} ms)", flush=True)
            if rnd:
                theirs.append(r["seconds"])
                ours.append(o["seconds"])
    finally:
        stop_server(server)
        ref.stdin.close()
        ref.wait(timeout=60)
    a, b = statistics.median(theirs), statistics.median(ours)
    print(f"\ntime to first token, median of {args.rounds}: llama.cpp {a:.3f} s, llamacpy "
          f"{b:.3f} s, ratio {a / b:.2f}x  (threads {args.threads})")


if __name__ == "__main__":
    main()
