"""The reference deployment on the real-shaped random Qwen3.5-0.8B: `llama-server --model <Q4_0>
--mmproj <F16 projector> --ctx-size 2048 --parallel 1 --jinja` answering an image question (a
448x252 JPEG frame as a base64 data URL plus a text part, max_tokens 128, temperature 0,
enable_thinking false), non-streamed and streamed, with the server's timings.

    python bench/qwen35_deployment.py [-t 1] [-n 128] [-r 2]

Inputs, made once and cached (not committed):
- the text stand-in from bench/make_qwen35_standin.py, "dressed for chat" here: Qwen3.5's chat
  special tokens written over padding entries of its vocabulary (control tokens, ids as in the
  real vocabulary's layout) and llama.cpp's Qwen3.5-4B.jinja template added, tensors unchanged;
- the F16 projector with the real vision shapes (depth 12, width 768, projection 1024) that
  bench/vision_encode.py builds (tests/reference/vision/tiny_vision.make_bench_models).
The speed ratios against llama.cpp come from bench/compare_llamacpp.py (prompt, decode) and
bench/vision_encode.py (image encoding); this script checks the whole path works and reports
what the server itself measured.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "reference" / "vision"))

from bench.make_qwen35_standin import STANDIN  # noqa: E402
from llamacpy.format.constants import GGMLType  # noqa: E402
from llamacpy.format.reader import open_gguf  # noqa: E402
from llamacpy.format.writer import TensorToWrite, write_gguf  # noqa: E402
from tests.reference.vocab_data import template_path  # noqa: E402
from tests.server.conftest import start_server, stop_server  # noqa: E402

CHAT_STANDIN = STANDIN.with_name("qwen35-0.8b-random-q4_0-chat.gguf")
BENCH_CACHE = Path.home() / ".cache" / "llamacpy-bench"
SPECIALS_AT = 248044  # Qwen3.5's special tokens follow its 248044 BPE entries
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
            "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
            "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
            "<|image_pad|>", "<|video_pad|>"]
THINK_AT = SPECIALS_AT + 24
TOKEN_CONTROL, TOKEN_USER_DEFINED = 3, 4
QUESTION = "Describe this camera frame in one sentence."


def dress_for_chat(src: Path, dst: Path) -> Path:
    """Copy `src` with chat special tokens and Qwen3.5's template in its metadata."""
    if dst.exists():
        return dst
    g = open_gguf(src)
    meta = dict(g.metadata)
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = np.array(meta["tokenizer.ggml.token_type"], np.int32)
    for i, tok in enumerate(SPECIALS):
        if tok not in tokens:  # the stand-in's tokenizer has <|endoftext|> already (id 0)
            tokens[SPECIALS_AT + i], types[SPECIALS_AT + i] = tok, TOKEN_CONTROL
    for i, tok in enumerate(["<think>", "</think>"]):  # plain text pieces in the real vocabulary
        tokens[THINK_AT + i], types[THINK_AT + i] = tok, TOKEN_USER_DEFINED
    meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"] = tokens, types
    meta["tokenizer.ggml.eos_token_id"] = SPECIALS_AT + SPECIALS.index("<|im_end|>")
    meta["tokenizer.ggml.add_bos_token"] = False
    meta["tokenizer.chat_template"] = template_path("Qwen3.5-4B").read_text()
    meta.pop("general.alignment", None)
    tensors = [TensorToWrite(t.name, GGMLType(t.ggml_type), tuple(t.ne), lambda t=t: t.data)
               for t in g.tensors.values()]
    write_gguf(dst, meta, tensors, value_types=dict(g.value_types))
    return dst


def frame_jpeg(width: int = 448, height: int = 252) -> bytes:
    """A synthetic camera frame: sky, ground, a sun and some noise, as a JPEG."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(1)
    y = np.linspace(0, 1, height)[:, None, None]
    img = np.where(y < 0.6, [90, 150, 230], [70, 120, 50]) * (0.8 + 0.2 * y)
    img = (img + rng.normal(0, 6, (height, width, 3))).clip(0, 255).astype(np.uint8)
    pil = Image.fromarray(img)
    ImageDraw.Draw(pil).ellipse((320, 30, 380, 90), fill=(250, 220, 80))
    buf = io.BytesIO()
    pil.save(buf, "JPEG", quality=85)
    return buf.getvalue()


def request(url: str, jpeg: bytes, n: int, stream: bool) -> dict:
    """The reference request; returns text, usage-like counts, timings and wall time."""
    body = {"messages": [{"role": "user", "content": [
        {"type": "image_url",
         "image_url": {"url": "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()}},
        {"type": "text", "text": QUESTION}]}],
        "max_tokens": n, "temperature": 0, "stream": stream,
        "chat_template_kwargs": {"enable_thinking": False}, "cache_prompt": False}
    t0 = time.perf_counter()
    if not stream:
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=600)
        r.raise_for_status()
        out = r.json()
        msg = out["choices"][0]["message"]
        return {"text": msg["content"], "reasoning": msg.get("reasoning_content"),
                "finish": out["choices"][0]["finish_reason"], "timings": out["timings"],
                "wall_s": time.perf_counter() - t0}
    text, finish, timings = [], None, None
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            timings = chunk.get("timings", timings)
            for c in chunk["choices"]:
                text.append(c["delta"].get("content") or "")
                finish = c.get("finish_reason") or finish
    return {"text": "".join(text), "reasoning": None, "finish": finish, "timings": timings,
            "wall_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("-r", "--rounds", type=int, default=2)
    args = ap.parse_args()
    if not STANDIN.exists():
        sys.exit(f"{STANDIN} is missing: make it with bench/make_qwen35_standin.py")
    from tiny_vision import make_bench_models

    model = dress_for_chat(STANDIN, CHAT_STANDIN)
    mmproj, _ = make_bench_models(BENCH_CACHE)
    log = Path(tempfile.mkdtemp()) / "server.log"
    server = start_server(["--model", str(model), "--mmproj", str(mmproj), "--ctx-size", "2048",
                           "--parallel", "1", "--jinja", "-t", str(args.threads)], str(log))
    jpeg = frame_jpeg()
    try:
        rows = []
        for rnd in range(args.rounds):
            for stream in (False, True):
                res = request(server.url, jpeg, args.n_predict, stream)
                t = res["timings"]
                rows.append((rnd, stream, res, t))
                print(f"round {rnd} stream={stream}: finish={res['finish']} "
                      f"{t['predicted_n']} tokens, image {t.get('image_ms', 0):.0f} ms, "
                      f"prompt {t['prompt_n']} tok {t['prompt_per_second']:.1f} tok/s, "
                      f"decode {t['predicted_per_second']:.1f} tok/s, wall {res['wall_s']:.1f} s; "
                      f"reasoning_content={res['reasoning']!r}; text[:60]={res['text'][:60]!r}",
                      flush=True)
    finally:
        stop_server(server)
    same = all(r[2]["text"] == rows[0][2]["text"] for r in rows)
    print(f"\nall {len(rows)} answers identical (greedy, streamed and not): {same}")
    print("| measurement | median |\n|---|---:|")
    for key, label in (("image_ms", "image encoding ms (first request of a round)"),
                       ("prompt_per_second", "prompt tokens/s"),
                       ("predicted_per_second", "decode tokens/s")):
        print(f"| {label} | {statistics.median(r[3].get(key, 0) for r in rows):.1f} |")


if __name__ == "__main__":
    main()
