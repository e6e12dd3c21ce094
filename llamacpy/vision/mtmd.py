"""Prompts with images, as llama.cpp's mtmd builds them (tools/mtmd/mtmd.cpp: mtmd_tokenize).

The text is split at the media marker; each text part is tokenized on its own (no BOS, special
tokens parsed), each image becomes the projector's begin text, one cell per image token and the
end text; BOS goes in front when the vocabulary adds one. Images are decoded and preprocessed
here (so a bad image fails the request at once) and encoded on first use (engine/prompt.py).
"""

from __future__ import annotations

import os

from ..engine.prompt import ImageChunk, Prompt, image_key
from ..tokenizer import Tokenizer
from .clip import Projector
from .registry import MEDIA_MARKER, image_markers

# projector types whose image tokens attend to each other both ways (mtmd_decode_use_non_causal)
NON_CAUSAL = {"gemma3"}


def media_marker() -> str:
    """The marker a prompt places images with: mtmd's default, or LLAMA_MEDIA_MARKER."""
    return os.environ.get("LLAMA_MEDIA_MARKER") or MEDIA_MARKER


class MtmdContext:
    """A projector bound to a text model and its tokenizer (mtmd_init_from_file)."""

    def __init__(self, projector: Projector, tokenizer: Tokenizer, model):
        n_text = model.args.n_embd
        if projector.n_embd != n_text:
            raise ValueError(f"mismatch between text model (n_embd = {n_text}) and mmproj "
                             f"(n_embd = {projector.n_embd}); hint: you may be using wrong mmproj")
        self.projector, self.tokenizer = projector, tokenizer
        self.begin, self.end = image_markers(projector.projector_type)
        self.mrope = bool(getattr(model, "uses_mrope", False))  # mtmd_decode_use_mrope
        self.non_causal = projector.projector_type in NON_CAUSAL
        self.marker = media_marker()

    def tokenize(self, text: str, images: list, add_special: bool = True,
                 parse_special: bool = True) -> Prompt:
        """The prompt for `text` with one image (file bytes, PIL image or uint8 RGB) per marker.
        Raises ImageError for an image that cannot be used, ValueError when the markers and the
        images do not pair up."""
        parts = split_text(text, self.marker)
        n_markers = sum(p == self.marker for p in parts)
        if n_markers != len(images):
            raise ValueError(f"number of media markers in text ({n_markers}) does not match "
                             f"number of images ({len(images)})")
        prompt = Prompt([], mrope=self.mrope, non_causal=self.non_causal)
        pending = iter(images)
        for part in parts:
            if part == self.marker:
                self._add_image(prompt, next(pending))
            else:
                prompt.tokens += self._text(part, parse_special)
        tok = self.tokenizer
        if add_special and tok.add_bos and tok.bos >= 0:
            prompt.tokens.insert(0, tok.bos)
            for im in prompt.images:
                im.start += 1
        if add_special and tok.add_eos and tok.eos >= 0:
            prompt.tokens.append(tok.eos)
        return prompt

    def _text(self, text: str, parse_special: bool = True) -> list[int]:
        return self.tokenizer.tokenize(text, add_special=False, parse_special=parse_special)

    def _add_image(self, prompt: Prompt, image) -> None:
        from .preprocess import as_rgb

        prompt.tokens += self._text(self.begin)
        prepared = self.projector.prepare(as_rgb(image))
        n = prepared.n_tokens
        n_pos = max(prepared.nx, prepared.ny) if self.mrope else n  # mtmd_image_tokens_get_n_pos
        key = image_key(image_bytes(image))
        chunk = ImageChunk(len(prompt.tokens), key, prepared.nx, prepared.ny, n, n_pos,
                           lambda: self.projector.encode_prepared(prepared))
        prompt.images.append(chunk)
        prompt.tokens += [key] * n
        prompt.tokens += self._text(self.end)


def image_bytes(image) -> bytes:
    """What identifies an image: its file bytes, or its pixels."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return bytes(image)
    import numpy as np

    return np.asarray(image, np.uint8).tobytes()


def split_text(text: str, marker: str) -> list[str]:
    """Text parts and markers in order, empty parts dropped (mtmd_tokenizer::split_text)."""
    out: list[str] = []
    for i, part in enumerate(text.split(marker)):
        if i:
            out.append(marker)
        if part:
            out.append(part)
    return out
