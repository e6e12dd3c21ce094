"""Image decoding and preprocessing as llama.cpp's mtmd does it (tools/mtmd/mtmd-image.cpp).

decode_image: bytes -> uint8 RGB [h, w, 3] (Pillow; llama.cpp uses stb_image with 3 channels:
alpha is dropped, not composited, grey is replicated, EXIF orientation is ignored).
resize_image: img_tool::resize, llama.cpp's port of Pillow's separable fixed-point resample
(resample.py) with PAD_CEIL letterboxing.
smart_size: img_tool::calc_size_preserved_ratio in float32, as the C++ computes it.
normalize: clip_image_f32::from_u8 + normalize, float32 [h, w, 3].
"""

from __future__ import annotations

import io
import math
import warnings

import numpy as np

try:
    from PIL import Image
except ImportError:  # pragma: no cover - Pillow is a dependency; the error says so when used
    Image = None

from .resample import Resample, pillow_resize

MAX_IMAGE_PIXELS = 1 << 26  # 67 Mpx (8192 x 8192): larger images are refused before decoding
MAX_RESIZE_SIDE = 65536  # resize_pillow refuses targets beyond this


class ImageError(ValueError):
    """An image that cannot be used: undecodable, truncated, empty or too large."""


class ImageTooLargeError(ImageError):
    """The image has more than MAX_IMAGE_PIXELS pixels."""


def _pillow():
    if Image is None:
        raise ImportError("image input needs Pillow: pip install pillow")
    return Image


def decode_image(data: bytes | bytearray | memoryview) -> np.ndarray:
    """Decode a JPEG, PNG, WebP, GIF or BMP file into uint8 RGB [height, width, 3].

    Raises ImageError (a ValueError) for data that is not a decodable image, a truncated file,
    an empty image or one of more than MAX_IMAGE_PIXELS pixels."""
    pil = _pillow()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ImageError(f"image data must be bytes, not {type(data).__name__}")
    if len(data) == 0:
        raise ImageError("image data is empty")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", pil.DecompressionBombWarning)
            img = pil.open(io.BytesIO(bytes(data)))
            check_size(*img.size)
            img.load()  # decodes now: a truncated file fails here
            return image_to_rgb(img)
    except ImageError:
        raise
    except (pil.DecompressionBombError, pil.DecompressionBombWarning) as e:
        raise ImageTooLargeError(f"image is too large: {e}") from None
    except Exception as e:  # Pillow raises OSError, SyntaxError, ValueError, struct.error...
        raise ImageError(f"cannot decode image: {e}") from None


def check_size(width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise ImageError(f"image has no pixels ({width}x{height})")
    if width * height > MAX_IMAGE_PIXELS:
        raise ImageTooLargeError(f"image is {width}x{height} = {width * height} pixels, more than "
                                 f"the {MAX_IMAGE_PIXELS} allowed")


def image_to_rgb(img) -> np.ndarray:
    """A PIL image as uint8 RGB [h, w, 3]: alpha dropped and 16-bit grey taken by its high byte,
    as stb_image's 3-channel load does."""
    check_size(*img.size)
    if img.mode in ("I;16", "I;16B", "I;16L", "I"):
        grey = (np.asarray(img).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8)
        return np.repeat(grey[..., None], 3, axis=2)
    if img.mode != "RGB":
        img = img.convert("RGB")
    return np.ascontiguousarray(np.asarray(img, dtype=np.uint8))


def as_rgb(image) -> np.ndarray:
    """bytes, a PIL image or a uint8 [h, w, 3] array -> uint8 RGB [h, w, 3]."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return decode_image(image)
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
            raise ImageError(f"an image array must be uint8 [height, width, 3], not "
                             f"{image.dtype} {list(image.shape)}")
        check_size(image.shape[1], image.shape[0])
        return np.ascontiguousarray(image)
    if Image is not None and isinstance(image, Image.Image):
        return image_to_rgb(image)
    raise ImageError(f"unsupported image input of type {type(image).__name__}")


def resize_image(rgb: np.ndarray, width: int, height: int, algo: Resample, pad: bool = True,
                 pad_color: tuple[int, int, int] = (0, 0, 0)) -> np.ndarray:
    """img_tool::resize: to exactly width x height; with `pad` (PAD_CEIL, llama.cpp's default)
    the aspect ratio is kept and the rest filled with pad_color, the image centred."""
    h, w = rgb.shape[:2]
    if (w, h) == (width, height):
        return rgb
    if not (0 < width <= MAX_RESIZE_SIDE and 0 < height <= MAX_RESIZE_SIDE):
        raise ImageError(f"resize target {width}x{height} is out of range (max {MAX_RESIZE_SIDE})")
    if not pad:
        return pillow_resize(rgb, width, height, algo)
    f32 = np.float32
    scale = min(f32(width) / f32(w), f32(height) / f32(h))
    new_w = min(int(math.ceil(f32(w) * scale)), width)
    new_h = min(int(math.ceil(f32(h) * scale)), height)
    inner = pillow_resize(rgb, new_w, new_h, algo)
    out = np.empty((height, width, 3), np.uint8)
    out[...] = np.asarray(pad_color, np.uint8)
    ox, oy = (width - new_w) // 2, (height - new_h) // 2
    out[oy : oy + new_h, ox : ox + new_w] = inner
    return out


def _round_half_away(x: float) -> int:
    """std::round."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def smart_size(width: int, height: int, align: int, min_pixels: int = 0,
               max_pixels: int = 0) -> tuple[int, int]:
    """img_tool::calc_size_preserved_ratio without longest_edge ("smart_resize"): (w, h) as
    multiples of `align` near the original, scaled into [min_pixels, max_pixels], in float32."""
    f32, fa = np.float32, np.float32(align)

    def round_by(x):
        return _round_half_away(float(f32(x) / fa)) * align

    def ceil_by(x):
        return int(math.ceil(float(f32(x) / fa))) * align

    def floor_by(x):
        return int(math.floor(float(f32(x) / fa))) * align

    w_bar = max(align, round_by(f32(width)))
    h_bar = max(align, round_by(f32(height)))
    if max_pixels > 0 and h_bar * w_bar > max_pixels:
        beta = np.sqrt(f32(height) * f32(width) / f32(max_pixels))
        h_bar = max(align, floor_by(f32(height) / beta))
        w_bar = max(align, floor_by(f32(width) / beta))
    elif min_pixels > 0 and h_bar * w_bar < min_pixels:
        beta = np.sqrt(f32(min_pixels) / (f32(height) * f32(width)))
        h_bar = ceil_by(f32(height) * beta)
        w_bar = ceil_by(f32(width) * beta)
    return w_bar, h_bar


def normalize(rgb: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """(x / 255 - mean) / std per channel, float32 [h, w, 3] (clip_image_f32 from_u8, normalize)."""
    x = rgb.astype(np.float32) / np.float32(255)
    return (x - mean.astype(np.float32)) / std.astype(np.float32)
