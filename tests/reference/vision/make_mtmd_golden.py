"""Golden data for tests/vision/test_mtmd_prompt.py: llama.cpp's own prompts with images and the
logits its text models give after them, through llama-cpp-python 0.3.36's mtmd bindings.

For each case: mtmd_tokenize of a prompt with media markers (add_special, parse_special) gives
the chunk layout (text tokens, and per image nx, ny, n_tokens, n_pos); mtmd_helper_eval_chunks
decodes it (images encoded by mtmd, Gemma 3's non-causal, Qwen's M-RoPE positions and n_pos
advance) with an f32 KV cache and flash attention off; then FORCED tokens are decoded one by one
at the positions that follow (new_n_past), and the logits after the prompt and after each forced
token are recorded: they pin the rope positions of text after images.

Output: tests/golden/vision/mtmd_prompts.npz (per case: cells int64 [n] with text token ids and
-1 - image index for image cells, grids int32 [n_images, 4] (nx, ny, n_tokens, n_pos), n_pos
(the position after the prompt), logits float32 [1 + len(FORCED), n_vocab], embd<i> float32
[n_tokens, n_embd]: llama.cpp's embeddings of image i) and
mtmd_prompts.json (prompts, image names). Needs llama-cpp-python:

    .venv/bin/python tests/reference/vision/make_mtmd_golden.py
"""

from __future__ import annotations

import ctypes
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mtmd_ref import Mtmd  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "vision"
IMAGES = GOLDEN / "images"
TEXT = {"qwen35": ROOT / "tests/golden/qwen35/qwen35.gguf",
        "gemma3": ROOT / "tests/golden/tiny_hf/gemma3.gguf"}
FORCED = [17, 203, 5, 88, 140, 9]
N_BATCH = 16  # mtmd_helper_eval_chunks' batch: text and image rows go in pieces of 16
# name -> (mmproj, prompt, images)
CASES = {
    "qwen35-one": ("qwen35", "Describe <__media__> now, please.", ["photo_120x90.jpg"]),
    "qwen35-two": ("qwen35", "<__media__>A then B<__media__> and then the end",
                   ["wide_128x64.png", "tall_40x150.png"]),
    "gemma3-one": ("gemma3", "Describe <__media__> now, please.", ["photo_120x90.jpg"]),
    "gemma3-two": ("gemma3", "One <__media__> and two <__media__> end.",
                   ["square_96x96.png", "rgba_80x48.png"]),
}


def run_case(m: Mtmd, prompt: str, images: list[bytes]) -> dict:
    lib, mtmd = m.lib, m.mtmd
    cp = lib.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 256, 256, 256
    cp.n_threads = cp.n_threads_batch = 1
    cp.type_k = cp.type_v = 0  # GGML_TYPE_F32
    cp.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    lctx = lib.llama_init_from_model(m.model, cp)
    bitmaps = [m._bitmap(b) for b in images]
    chunks = mtmd.mtmd_input_chunks_init()
    try:
        text = mtmd.mtmd_input_text(prompt.encode(), len(prompt.encode()), True, True)
        arr = (mtmd.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        if mtmd.mtmd_tokenize(m.ctx, chunks, ctypes.byref(text), arr, len(bitmaps)) != 0:
            raise RuntimeError("mtmd_tokenize failed")
        cells, grids = layout(mtmd, chunks)
        new_n_past = lib.llama_pos(0)
        if mtmd.mtmd_helper_eval_chunks(m.ctx, lctx, chunks, 0, 0, N_BATCH, True,
                                        ctypes.byref(new_n_past)) != 0:
            raise RuntimeError("mtmd_helper_eval_chunks failed")
        n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(m.model))
        logits = [last_logits(lib, lctx, n_vocab)]
        n_pos = new_n_past.value
        for i, t in enumerate(FORCED):
            decode_one(lib, lctx, t, n_pos + i)
            logits.append(last_logits(lib, lctx, n_vocab))
        return {"cells": np.array(cells, np.int64), "grids": np.array(grids, np.int32),
                "n_pos": n_pos, "logits": np.stack(logits)}
    finally:
        mtmd.mtmd_input_chunks_free(chunks)
        for b in bitmaps:
            mtmd.mtmd_bitmap_free(b)
        lib.llama_free(lctx)


def layout(mtmd, chunks) -> tuple[list[int], list[list[int]]]:
    cells, grids = [], []
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        c = mtmd.mtmd_input_chunks_get(chunks, i)
        if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t(0)
            ptr = mtmd.mtmd_input_chunk_get_tokens_text(c, ctypes.byref(n))
            cells += [ptr[j] for j in range(n.value)]
        else:
            t = mtmd.mtmd_input_chunk_get_tokens_image(c)
            n = mtmd.mtmd_image_tokens_get_n_tokens(t)
            cells += [-1 - len(grids)] * n
            grids.append([mtmd.mtmd_image_tokens_get_nx(t), mtmd.mtmd_image_tokens_get_ny(t), n,
                          mtmd.mtmd_input_chunk_get_n_pos(c)])
    return cells, grids


def decode_one(lib, lctx, token: int, pos: int) -> None:
    batch = lib.llama_batch_init(1, 0, 1)
    try:
        batch.n_tokens = 1
        batch.token[0], batch.pos[0], batch.n_seq_id[0] = token, pos, 1
        batch.seq_id[0][0], batch.logits[0] = 0, True
        if lib.llama_decode(lctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
    finally:
        lib.llama_batch_free(batch)


def last_logits(lib, lctx, n_vocab: int) -> np.ndarray:
    return np.ctypeslib.as_array(lib.llama_get_logits_ith(lctx, -1), (n_vocab,)).copy()


def main() -> None:
    out, meta = {}, {"llama_cpp_python": "0.3.36", "forced": FORCED, "n_batch": N_BATCH,
                     "cases": {}}
    contexts = {}
    for name, (kind, prompt, images) in CASES.items():
        if kind not in contexts:
            contexts[kind] = Mtmd(GOLDEN / f"{kind}.gguf", TEXT[kind], flash_attn=False)
        files = [(IMAGES / i).read_bytes() for i in images]
        result = run_case(contexts[kind], prompt, files)
        for i, data in enumerate(files):  # what mtmd_encode_chunk gave each image
            result[f"embd{i}"] = contexts[kind].encode(data)["embd"]
        for key, value in result.items():
            out[f"{name}.{key}"] = value
        meta["cases"][name] = {"mmproj": f"{kind}.gguf", "text_model": str(
            TEXT[kind].relative_to(ROOT)), "prompt": prompt, "images": images,
            "grids": result["grids"].tolist(), "n_pos": result["n_pos"]}
        print(name, result["grids"].tolist(), "n_pos", result["n_pos"], "cells",
              len(result["cells"]), file=sys.stderr)
    for m in contexts.values():
        m.close()
    np.savez_compressed(GOLDEN / "mtmd_prompts.npz", **out)
    (GOLDEN / "mtmd_prompts.json").write_text(json.dumps(meta, indent=1) + "\n")


if __name__ == "__main__":
    main()
