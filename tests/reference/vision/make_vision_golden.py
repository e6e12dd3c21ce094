"""Golden data for tests/vision: tiny random-weight vision towers converted by llama.cpp, test
images, and three references per image, none of them llamacpy's output:

1. llama.cpp (llama-cpp-python 0.3.36, mtmd): stb_image's decoded RGB (images.npz), the resized
   RGB it fed the encoder (`llamacpp_rgb`, read back from the patch-embedding im2col node: those
   values are rounded to fp16 there, which still pins every 8-bit level), the image grid
   (`grid`: nx, ny, n_tokens, n_pos) and its embeddings (`llamacpp_embd`, flash attention off);
   for qwen35 also the grids under --image-min-tokens / --image-max-tokens (`token_limits`).
2. transformers' vision tower + merger on llama.cpp's pixels (normalised by this script):
   `hf_embd` with the merger's GELU in the tanh form llama.cpp uses (Qwen), `hf_embd_erf` stock.
3. transformers' image processors, for the figures in versions.json.

Outputs in tests/golden/vision/: <model>.gguf (mmproj), <model>.npz, images/*, images.npz,
versions.json.
Needs torch, transformers, Pillow and llama-cpp-python:

    .venv/bin/python tests/reference/vision/make_vision_golden.py
"""

from __future__ import annotations

import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_vision as tv  # noqa: E402
from mtmd_ref import Mtmd, as_mrope_text_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "golden" / "vision"
TINY_HF = ROOT / "tests" / "golden" / "tiny_hf"

# name -> (builder, outtype, text model, M-RoPE text model?, deepstack layers)
SPECS = {
    "qwen35": (lambda: tv.build_qwen(tv.QWEN_TEXT, tv.QWEN_VISION), "f32", "qwen3.gguf", True, 0),
    "qwen35-f16": (lambda: tv.build_qwen(tv.QWEN_TEXT, tv.QWEN_VISION), "f16", "qwen3.gguf",
                   True, 0),
    "qwen3vl-deepstack": (tv.build_qwen3vl, "f32", "qwen3.gguf", True, 2),
    "gemma3": (tv.build_gemma, "f32", "gemma3.gguf", False, 0),
}


def pattern(w: int, h: int, seed: int) -> np.ndarray:
    """uint8 [h, w, 3]: smooth colour ramps and waves plus noise, so resampling matters."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 100 * np.sin(x / 7.0 + y / 13.0)
    g = 255 * x / max(w - 1, 1)
    b = 128 + 90 * np.cos(np.hypot(x - w / 3, y - h / 2) / 5.0)
    img = np.stack([r, g, b], axis=-1) + rng.normal(0, 12, (h, w, 3))
    return img.clip(0, 255).astype(np.uint8)


def encoded(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def smooth(w: int, h: int) -> np.ndarray:
    """uint8 [h, w, 3] colour ramps without noise (compresses to a small PNG at any size)."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([255 * x // max(w - 1, 1), 255 * y // max(h - 1, 1),
                     (x + y) % 256], axis=-1).astype(np.uint8)


def make_images() -> dict[str, bytes]:
    """name -> file bytes. 128x64 needs no resize for Qwen (8 tokens); the others are resized,
    letterboxed, or exercise greyscale, alpha, JPEG decoding, one pixel and a 200:1 strip."""
    rgba = np.concatenate([pattern(80, 48, 6), pattern(80, 48, 7)[..., :1]], axis=2)
    return {
        "dot_1x1.png": encoded(Image.fromarray(np.array([[[200, 30, 90]]], np.uint8)), "PNG"),
        "strip_2000x10.png": encoded(Image.fromarray(smooth(2000, 10)), "PNG"),
        "wide_128x64.png": encoded(Image.fromarray(pattern(128, 64, 1)), "PNG"),
        "small_100x70.png": encoded(Image.fromarray(pattern(100, 70, 2)), "PNG"),
        "tall_40x150.png": encoded(Image.fromarray(pattern(40, 150, 3)), "PNG"),
        "square_96x96.png": encoded(Image.fromarray(pattern(96, 96, 4)), "PNG"),
        "gray_60x60.png": encoded(Image.fromarray(pattern(60, 60, 5)[..., 0], "L"), "PNG"),
        "rgba_80x48.png": encoded(Image.fromarray(rgba, "RGBA"), "PNG"),
        "photo_120x90.jpg": encoded(Image.fromarray(pattern(120, 90, 8)), "JPEG", quality=90),
    }


def normalise(rgb: np.ndarray) -> np.ndarray:
    """clip_image_f32 from_u8 + normalize, float32, written out here independently."""
    mean, std = np.float32(tv.IMAGE_MEAN), np.float32(tv.IMAGE_STD)
    return ((rgb.astype(np.float32) / np.float32(255)) - mean) / std


def to_rgb8(pixels: np.ndarray) -> np.ndarray:
    """llama.cpp's normalised pixels (fp16-rounded) back to the 8-bit levels they came from."""
    mean, std = np.float64(tv.IMAGE_MEAN), np.float64(tv.IMAGE_STD)
    levels = (pixels.astype(np.float64) * std + mean) * 255
    rgb = np.rint(levels)
    assert np.abs(levels - rgb).max() < 0.2, "captured pixels are not 8-bit levels"
    return rgb.astype(np.uint8)


@torch.no_grad()
def hf_qwen(model, pixels: np.ndarray, tanh_gelu: bool) -> np.ndarray:
    """transformers' Qwen3.5 / Qwen3-VL vision tower on normalised pixels [h, w, 3]: the
    processor's patch layout (frame repeated twice, 2x2 blocks contiguous), merger output and
    deepstack features concatenated as llama.cpp does."""
    visual = model.model.visual
    visual.config._attn_implementation = "eager"
    p = visual.patch_size
    h, w = pixels.shape[:2]
    gh, gw = h // p, w // p
    frame = pixels.transpose(2, 0, 1)[None]
    patches = np.concatenate([frame, frame]).reshape(1, 2, 3, gh // 2, 2, p, gw // 2, 2, p)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(gh * gw, -1)
    mergers = [visual.merger, *getattr(visual, "deepstack_merger_list", [])]
    saved = [m.act_fn for m in mergers]
    if tanh_gelu:
        for m in mergers:
            m.act_fn = torch.nn.GELU(approximate="tanh")
    try:
        out = visual(torch.from_numpy(np.ascontiguousarray(patches)),
                     grid_thw=torch.tensor([[1, gh, gw]]))
    finally:
        for m, act in zip(mergers, saved):
            m.act_fn = act
    feats = [out.pooler_output, *(getattr(out, "deepstack_features", None) or [])]
    return torch.cat(feats, dim=-1).float().numpy()


@torch.no_grad()
def hf_gemma(model, pixels: np.ndarray) -> np.ndarray:
    model.model.vision_tower.config._attn_implementation = "eager"
    x = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)[None]))
    return model.model.get_image_features(x).pooler_output[0].float().numpy()


# models whose preprocessing is qwen35's (same patch, merge, mean and std): their llama.cpp
# pixels are checked equal here and stored once, in qwen35.npz
SAME_PIXELS_AS = {"qwen35-f16": "qwen35", "qwen3vl-deepstack": "qwen35"}

# (image size, --image-min-tokens, --image-max-tokens): llama.cpp's grid for each (Qwen)
TOKEN_LIMITS = [((w, h), lo, hi) for (w, h) in [(128, 64), (100, 70), (40, 150), (1000, 700)]
                for lo, hi in [(-1, -1), (-1, 16), (64, -1), (4, 8), (300, 600)]]


def token_limit_grids(gguf: Path, text_model: Path) -> np.ndarray:
    """int32 [n, 7]: width, height, min, max tokens, then llama.cpp's nx, ny, n_tokens."""
    rows = []
    for (w, h), lo, hi in TOKEN_LIMITS:
        mtmd = Mtmd(gguf, text_model, image_min_tokens=lo, image_max_tokens=hi)
        try:
            r = mtmd.encode(encoded(Image.fromarray(smooth(w, h)), "PNG"))
        finally:
            mtmd.close()
        rows.append([w, h, lo, hi, r["nx"], r["ny"], r["n_tokens"]])
    return np.array(rows, np.int32)


def reference(name: str, model, mtmd: Mtmd, images: dict[str, bytes]) -> dict:
    arrays, info = {}, {}
    for img_name, data in images.items():
        r = mtmd.encode(data)
        rgb = to_rgb8(r["pixels"])
        pixels = normalise(rgb)
        key = img_name.replace(".", "_")
        arrays[f"{key}__llamacpp_rgb"] = rgb
        arrays[f"{key}__llamacpp_embd"] = r["embd"]
        arrays[f"{key}__grid"] = np.array([r["nx"], r["ny"], r["n_tokens"], r["n_pos"]], np.int32)
        if name.startswith("gemma"):
            arrays[f"{key}__hf_embd"] = hf_gemma(model, pixels)
        else:
            arrays[f"{key}__hf_embd"] = hf_qwen(model, pixels, tanh_gelu=True)
            arrays[f"{key}__hf_embd_erf"] = hf_qwen(model, pixels, tanh_gelu=False)
        hf = arrays[f"{key}__hf_embd"]
        info[img_name] = {"grid": [int(v) for v in arrays[f"{key}__grid"]],
                          "llamacpp_vs_hf_rel": float(np.abs(r["embd"] - hf).max()
                                                      / np.abs(hf).max())}
    return arrays, info


def make(name: str, work: Path, images: dict[str, bytes]) -> dict:
    build, outtype, text, mrope, deepstack = SPECS[name]
    model = build()
    folder = work / name
    extra = {"image_seq_length": tv.GEMMA_TOKENS} if name.startswith("gemma") else {}
    tv.save(model, folder, **extra)
    gguf = GOLDEN / f"{name}.gguf"
    tv.convert_mmproj(folder, gguf, outtype)
    if name.startswith("gemma"):  # the converter stores mm.input_projection as F16
        p = model.model.multi_modal_projector.mm_input_projection_weight
        p.data.copy_(p.data.half().float())
    text_model = TINY_HF / text
    if mrope:
        text_model = as_mrope_text_model(text_model, work / f"{name}-text.gguf", deepstack)
    mtmd = Mtmd(gguf, text_model, capture=True)
    try:
        arrays, info = reference(name, model, mtmd, images)
        if name == "qwen35":  # stb_image's decode, once for all models
            np.savez_compressed(GOLDEN / "images.npz", **{
                n.replace(".", "_"): mtmd.decode(data) for n, data in images.items()})
    finally:
        mtmd.close()
    if name == "qwen35":
        arrays["token_limits"] = token_limit_grids(gguf, text_model)
    if name in SAME_PIXELS_AS:
        shared = np.load(GOLDEN / f"{SAME_PIXELS_AS[name]}.npz")
        for key in [k for k in arrays if k.endswith("__llamacpp_rgb")]:
            assert np.array_equal(arrays.pop(key), shared[key]), (name, key)
    np.savez_compressed(GOLDEN / f"{name}.npz", **arrays)
    return {"outtype": outtype, "text_model": str(text_model.name), "images": info}


def hf_processor_figures(images: dict[str, bytes]) -> dict:
    """How transformers' own image processors compare with llama.cpp's preprocessing."""
    from transformers.models.gemma3.image_processing_pil_gemma3 import Gemma3ImageProcessorPil
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil, smart_resize)

    golden = np.load(GOLDEN / "gemma3.npz")
    proc = Gemma3ImageProcessorPil(size={"height": 64, "width": 64}, image_mean=tv.IMAGE_MEAN,
                                   image_std=tv.IMAGE_STD)
    out = {}
    for img_name in ("square_96x96.png", "small_100x70.png"):
        hf = proc(Image.open(io.BytesIO(images[img_name])).convert("RGB"), return_tensors="np")
        ours = normalise(golden[f"{img_name.replace('.', '_')}__llamacpp_rgb"])
        out[f"gemma3 {img_name}: max |HF pixels - llama.cpp pixels|"] = float(
            np.abs(hf["pixel_values"][0].transpose(1, 2, 0) - ours).max())
    golden = np.load(GOLDEN / "qwen35.npz")
    rgb = golden["wide_128x64_png__llamacpp_rgb"]
    qproc = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2, image_mean=tv.IMAGE_MEAN,
                                     image_std=tv.IMAGE_STD, do_resize=False)
    hf = qproc(Image.fromarray(rgb), return_tensors="np")["pixel_values"]
    p, pixels = 16, normalise(rgb)
    frame = pixels.transpose(2, 0, 1)[None]
    mine = np.concatenate([frame, frame]).reshape(1, 2, 3, 2, 2, p, 4, 2, p)
    mine = mine.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(hf.shape)
    out["qwen35 wide_128x64.png (no resize): max |HF patches - llama.cpp patches|"] = float(
        np.abs(hf - mine).max())
    sys.path.insert(0, str(ROOT))
    from llamacpy.vision.preprocess import smart_size  # the C++ rule, compared with HF's

    differ = [(w, h) for w in range(16, 1600, 13) for h in range(16, 1600, 17)
              if smart_size(w, h, 32, 8 * 1024, 4096 * 1024)[::-1]
              != smart_resize(h, w, 32, 8 * 1024, 4096 * 1024)]
    out["qwen target sizes: llama.cpp rule != HF smart_resize"] = (
        f"{len(differ)} of {len(range(16, 1600, 13)) * len(range(16, 1600, 17))} sizes, e.g. "
        f"{differ[:3]} (half blocks: std::round rounds them away from zero, Python's round "
        "to even)")
    return out


def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    (GOLDEN / "images").mkdir(exist_ok=True)
    images = make_images()
    for img_name, data in images.items():
        (GOLDEN / "images" / img_name).write_bytes(data)
    info = {"transformers": transformers.__version__, "torch": torch.__version__,
            "llama_cpp_python": __import__("llama_cpp").__version__, "seed": tv.SEED,
            "converter": str(tv.llama_cpp_source() / "convert_hf_to_gguf.py"), "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in SPECS:
            info["models"][name] = make(name, Path(tmp), images)
            print(name, json.dumps(info["models"][name]["images"], indent=None))
    info["hf_processors"] = hf_processor_figures(images)
    print(json.dumps(info["hf_processors"], indent=1))
    (GOLDEN / "versions.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
