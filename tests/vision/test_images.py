"""Image input that is broken, empty, tiny, huge, grey, transparent or in another format: each
either encodes or fails with an ImageError (a ValueError, which the server turns into a 400)."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from llamacpy.vision import ImageError, ImageTooLargeError, decode_image, load_projector
from llamacpy.vision.preprocess import MAX_IMAGE_PIXELS, as_rgb

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "vision"


@pytest.fixture(scope="module", params=["qwen35", "gemma3"])
def proj(request):
    p = load_projector(GOLDEN / f"{request.param}.gguf")
    yield p
    p.close()


def encoded(img: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def png_with_size(width: int, height: int) -> bytes:
    """A 1x1 PNG whose header claims width x height (CRC fixed): only the header is valid."""
    data = bytearray(encoded(Image.new("RGB", (1, 1)), "PNG"))
    ihdr = data.index(b"IHDR")
    data[ihdr + 4 : ihdr + 12] = struct.pack(">II", width, height)
    crc = zlib.crc32(bytes(data[ihdr : ihdr + 17])) & 0xFFFFFFFF
    data[ihdr + 17 : ihdr + 21] = struct.pack(">I", crc)
    return bytes(data)


def rgb_pattern(w: int, h: int) -> np.ndarray:
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 7 % 256, y * 5 % 256, (x + y) % 256], axis=-1).astype(np.uint8)


@pytest.mark.parametrize("data, what", [
    (b"", "empty"),
    (np.random.default_rng(0).bytes(4096), "random bytes"),
    (b"\xff\xd8\xff\xe0" + bytes(100), "JPEG magic, garbage after"),
    (b"GIF89a", "header only"),
])
def test_garbage_is_an_image_error(data, what, proj):
    with pytest.raises(ImageError):
        decode_image(data)
    with pytest.raises(ValueError):  # what the server catches
        proj.encode(data)


def test_truncated_jpeg():
    data = (GOLDEN / "images" / "photo_120x90.jpg").read_bytes()
    for cut in (len(data) // 2, 200, 20):
        with pytest.raises(ImageError, match="decode"):
            decode_image(data[:cut])


def test_truncated_png():
    data = (GOLDEN / "images" / "square_96x96.png").read_bytes()
    with pytest.raises(ImageError):
        decode_image(data[: len(data) - 100])


def test_zero_size():
    with pytest.raises(ImageError):
        decode_image(png_with_size(0, 10))
    with pytest.raises(ImageError, match="no pixels"):
        as_rgb(np.zeros((0, 5, 3), np.uint8))
    with pytest.raises(ImageError):
        as_rgb(np.zeros((4, 4), np.uint8))  # not [h, w, 3]
    with pytest.raises(ImageError):
        as_rgb("picture.png")  # a path is not image data


def test_too_many_pixels_refused_before_decoding():
    with pytest.raises(ImageTooLargeError, match="pixels"):
        decode_image(png_with_size(9000, 9000))  # 81 Mpx: the header alone says so
    assert 9000 * 9000 > MAX_IMAGE_PIXELS >= 8000 * 8000


def test_one_pixel(proj):
    emb = proj.encode(encoded(Image.new("RGB", (1, 1), (200, 30, 90)), "PNG"))
    assert emb.n_tokens == emb.embeddings.shape[0] > 0
    assert np.isfinite(emb.embeddings).all()


@pytest.mark.slow
def test_huge_image_is_resized_within_limits():
    """8000x8000 decodes and shrinks to Qwen's 4096-token limit (2048x2048 pixels)."""
    proj = load_projector(GOLDEN / "qwen35.gguf")
    data = encoded(Image.new("RGB", (8000, 8000), (30, 120, 200)), "PNG", compress_level=1)
    prepared = proj.prepare(decode_image(data))
    assert prepared.pixels.shape == (2048, 2048, 3)
    assert prepared.n_tokens == 4096 == prepared.nx * prepared.ny
    assert proj.n_tokens(8000, 8000) == (64, 64, 4096)
    proj.close()


def test_alpha_is_dropped_not_composited():
    """stb_image's 3-channel load keeps the colour under transparent pixels."""
    rgba = np.concatenate([rgb_pattern(20, 10), np.zeros((10, 20, 1), np.uint8)], axis=2)
    rgba[..., 3] = np.arange(20, dtype=np.uint8)[None, :] * 12
    out = decode_image(encoded(Image.fromarray(rgba, "RGBA"), "PNG"))
    np.testing.assert_array_equal(out, rgba[..., :3])
    la = decode_image(encoded(Image.fromarray(rgba[..., [0, 3]], "LA"), "PNG"))
    np.testing.assert_array_equal(la, np.repeat(rgba[..., :1], 3, axis=2))


def test_grey_and_palette():
    grey = rgb_pattern(30, 20)[..., 0]
    out = decode_image(encoded(Image.fromarray(grey, "L"), "PNG"))
    np.testing.assert_array_equal(out, np.repeat(grey[..., None], 3, axis=2))
    grey16 = (grey.astype(np.uint16) * 257 + 3)
    out16 = decode_image(encoded(Image.fromarray(grey16), "PNG"))  # 16-bit grey: high byte
    np.testing.assert_array_equal(out16[..., 0], grey16 >> 8)
    pal = Image.fromarray(rgb_pattern(30, 20)).quantize(16)
    np.testing.assert_array_equal(decode_image(encoded(pal, "PNG")),
                                  np.asarray(pal.convert("RGB")))


@pytest.mark.parametrize("fmt, kw", [("WEBP", {"lossless": True}), ("GIF", {}), ("BMP", {}),
                                     ("PNG", {})])
def test_lossless_formats_round_trip(fmt, kw):
    rgb = rgb_pattern(33, 17)
    if fmt == "GIF":  # 256 colours at most
        rgb = (rgb // 64 * 64).astype(np.uint8)
    np.testing.assert_array_equal(decode_image(encoded(Image.fromarray(rgb), fmt, **kw)), rgb)


def test_bytes_pil_and_array_inputs_agree(proj):
    rgb = rgb_pattern(70, 50)
    a = proj.encode(encoded(Image.fromarray(rgb), "PNG")).embeddings
    b = proj.encode(Image.fromarray(rgb)).embeddings
    c = proj.encode(rgb).embeddings
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
