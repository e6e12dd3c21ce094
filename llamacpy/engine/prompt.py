"""A prompt as a sequence's KV cells hold it: text tokens and images, one entry per cell
(llama.cpp: mtmd's input chunks, and the server's server_tokens that flattens them).

An image's cells hold its `key`, a negative id from a hash of the image's bytes (mtmd's bitmap
id), so comparing two prompts cell by cell, as prompt-prefix reuse does, only runs through an
image when it is the same image. Images are encoded on first use, so one already in the cache is
never encoded again.

Positions: a text cell's rope position is the previous one plus one; an image placed at position
p takes n_pos positions (M-RoPE models: max(nx, ny), its tokens at (p, p + row, p + col); other
models: one per token), so after an M-RoPE image the rope position and the cell index differ.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from ..memory.batch import Batch


def image_key(data: bytes) -> int:
    """A negative id for an image's cells, from its bytes (mtmd: bitmap id = fnv hash)."""
    return -1 - int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") % (1 << 62)


@dataclass
class ImageChunk:
    """One image in a prompt: its cells [start, start + n_tokens) and how to encode it."""

    start: int
    key: int
    nx: int  # token grid width (M-RoPE columns)
    ny: int
    n_tokens: int
    n_pos: int  # rope positions it takes (mtmd_image_tokens_get_n_pos)
    encode: object  # () -> ImageEmbedding, called once on first use
    embedding: object | None = None  # ImageEmbedding once encoded
    t_encode: float = 0.0  # seconds spent encoding (0 when it came from the cache)

    @property
    def stop(self) -> int:
        return self.start + self.n_tokens

    def embed(self):
        """The ImageEmbedding, encoding the image now if it was not yet."""
        if self.embedding is None:
            t0 = time.perf_counter()
            self.embedding = self.encode()
            self.t_encode = time.perf_counter() - t0
            self.encode = None  # drop the prepared pixels
        return self.embedding


@dataclass
class Prompt:
    tokens: list[int]  # text token ids; an image's cells hold its key (< 0)
    images: list[ImageChunk] = field(default_factory=list)  # by start
    mrope: bool = False  # rows carry M-RoPE positions (the text model uses them)
    non_causal: bool = False  # image tokens attend to each other both ways (Gemma 3)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def text_tokens(self) -> list[int]:
        return [t for t in self.tokens if t >= 0]

    @property
    def shifts(self) -> list[tuple[int, int]]:
        """(cell after an image, rope positions it gained over its cell count) per image."""
        return [(im.stop, im.n_pos - im.n_tokens) for im in self.images
                if im.n_pos != im.n_tokens]

    def snap(self, n: int) -> int:
        """n, moved back to the start of an image it would cut (a prefix never splits one)."""
        for im in self.images:
            if im.start < n < im.stop:
                return im.start
        return n

    def chunk_end(self, start: int, stop: int) -> int:
        """`stop` for a chunk [start, stop) of this prompt, moved so it never cuts a non-causal
        image (its tokens must be decoded together): back to the image's start, or on to its
        end when the chunk starts with it."""
        if not self.non_causal:
            return stop
        for im in self.images:
            if im.start < stop < im.stop:
                return im.stop if im.start <= start else im.start
        return stop

    def position(self, cell: int) -> int:
        """Rope position of `cell` (text) or of its image (the image's t); len(self): the
        position after the prompt."""
        shift = sum(gain for end, gain in self.shifts if end <= cell)
        return cell + shift

    def batch(self, start: int, stop: int, seq: int, last_logits: bool = True) -> Batch:
        """Rows [start, stop) for sequence `seq`; logits for the last row when asked."""
        n = stop - start
        tokens = np.array([max(t, -1) for t in self.tokens[start:stop]], np.int32)
        logits = np.zeros(n, bool)
        logits[-1] = last_logits
        batch = Batch(tokens, np.arange(start, stop, dtype=np.int32), np.full(n, seq, np.int32),
                      logits)
        images = [im for im in self.images if im.start < stop and im.stop > start]
        if images:
            self._fill_images(batch, images, start)
        if self.mrope and (images or self.shifts):
            self._fill_text_mrope(batch, start)
        return batch

    def _fill_images(self, batch: Batch, images: list[ImageChunk], start: int) -> None:
        n = len(batch)
        width = images[0].embed().embeddings.shape[1]
        batch.embeddings = np.zeros((n, width), np.float32)
        batch.non_causal = np.zeros(n, bool) if self.non_causal else None
        mrope = np.zeros((n, 4), np.int32) if self.mrope else None
        for im in images:
            lo, hi = max(im.start, start), min(im.stop, start + n)
            emb = im.embed()
            rows = slice(lo - start, hi - start)
            batch.embeddings[rows] = emb.embeddings[lo - im.start : hi - im.start]
            if batch.non_causal is not None:
                batch.non_causal[rows] = True
            if mrope is not None:
                pos = emb.mrope_positions(self.position(im.start)).T  # [n_tokens, 4]
                mrope[rows] = pos[lo - im.start : hi - im.start]
        batch.mrope_positions = mrope

    def _fill_text_mrope(self, batch: Batch, start: int) -> None:
        if batch.mrope_positions is None:
            batch.mrope_positions = np.zeros((len(batch), 4), np.int32)
        for i in np.flatnonzero(batch.tokens >= 0):
            p = self.position(start + int(i))
            batch.mrope_positions[i] = (p, p, p, 0)


def rope_position(n_cells: int, shifts: list[tuple[int, int]]) -> int:
    """The rope position of the next cell of a sequence holding n_cells cells, given its images'
    (end cell, gained positions) pairs: where a generated token goes."""
    return n_cells + sum(gain for end, gain in shifts if end <= n_cells)


def text_batch(tokens: list[int], n_cells: int, n_pos: int, seq: int,
               all_logits: bool = False) -> Batch:
    """Text tokens appended at cell n_cells and rope position n_pos (M-RoPE rows only when the
    two differ, after an image)."""
    batch = Batch.from_tokens(tokens, pos0=n_cells, seq=seq, all_logits=all_logits)
    if n_pos != n_cells:
        p = np.arange(n_pos, n_pos + len(tokens), dtype=np.int32)
        batch.mrope_positions = np.stack([p, p, p, np.zeros_like(p)], axis=1)
    return batch
