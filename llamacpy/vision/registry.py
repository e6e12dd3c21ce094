"""Vision projectors by `clip.projector_type`, as llama.cpp's PROJECTOR_TYPE_NAMES spells them,
and the text that surrounds an image in the prompt (mtmd_context::init_vision)."""

from __future__ import annotations

import os

from ..format import GGUFError, open_gguf
from .clip import CLIP, VISION, Projector
from .gemma3 import Gemma3Projector
from .qwen3vl import Qwen3VLProjector

PROJECTORS: dict[str, type[Projector]] = {
    "qwen3vl_merger": Qwen3VLProjector,
    "gemma3": Gemma3Projector,
}

# (text before, text after) each image's embeddings; mtmd tokenizes both with special tokens
# parsed, in place of the media marker. Empty strings: nothing is added.
IMAGE_MARKERS: dict[str, tuple[str, str]] = {
    "qwen3vl_merger": ("<|vision_start|>", "<|vision_end|>"),
    "gemma3": ("<start_of_image>", "<end_of_image>"),
}
MEDIA_MARKER = "<__media__>"  # mtmd_default_marker(): where the chat template put the image


def image_markers(projector_type: str) -> tuple[str, str]:
    """(begin, end) text llama.cpp puts around the image embeddings for this projector type."""
    if projector_type not in IMAGE_MARKERS:
        raise ValueError(f"unsupported projector type '{projector_type}' "
                         f"(llamacpy supports: {', '.join(PROJECTORS)})")
    return IMAGE_MARKERS[projector_type]


def load_projector(path: str | os.PathLike, image_min_tokens: int = -1,
                   image_max_tokens: int = -1) -> Projector:
    """Open an mmproj GGUF (`--mmproj`) and build its vision tower.

    image_min_tokens / image_max_tokens: llama.cpp's --image-min-tokens / --image-max-tokens
    (projectors with dynamic resolution only; -1 keeps the projector's defaults). An mmproj
    without a vision encoder or with an unsupported projector type is a GGUFError naming it."""
    g = open_gguf(path)
    try:
        arch = g.get("general.architecture")
        if arch != "clip":
            raise GGUFError(f"{g.path}: not an mmproj file (general.architecture is {arch!r}, "
                            "expected 'clip')")
        if not g.get(CLIP.HAS_VISION_ENCODER, False):
            raise GGUFError(f"{g.path}: this mmproj has no vision encoder")
        kind = g.get(CLIP.PROJECTOR_TYPE) or g.get(VISION.PROJECTOR_TYPE)
        if kind is None:
            raise GGUFError(f"{g.path}: required metadata key '{CLIP.PROJECTOR_TYPE}' is missing")
        if kind not in PROJECTORS:
            raise GGUFError(f"{g.path}: unsupported projector type '{kind}' "
                            f"(llamacpy supports: {', '.join(PROJECTORS)})")
        return PROJECTORS[kind](g, image_min_tokens, image_max_tokens)
    except Exception:
        g.close()
        raise
