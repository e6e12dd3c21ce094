"""Stop strings, as llama.cpp's server looks for them in generated text."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T", str, bytes)


def find_partial_stop(text: T, stop: T) -> int | None:
    """string_find_partial_stop (common.h): where the longest prefix of stop that ends text
    starts, or None."""
    if not text or not stop:
        return None
    for length in range(min(len(text), len(stop)), 0, -1):
        if text.endswith(stop[:length]):
            return len(text) - length
    return None


def find_stop(
    text: T, stops: Iterable[T], last_token_size: int | None = None
) -> tuple[int | None, bool]:
    """find_stopping_strings (server-context.cpp): (index, partial).

    A complete stop string anywhere (or, given last_token_size, within the tail the last token
    could have completed) gives its earliest index and partial=False: cut the text there. Else a
    stop string begun at the very end gives partial=True: hold that text back until the next
    token decides. (None, False) when neither.
    """
    stops = [s for s in stops if s]
    full = [i for i in (_find_full(text, s, last_token_size) for s in stops) if i >= 0]
    if full:
        return min(full), False
    partial = [i for i in (find_partial_stop(text, s) for s in stops) if i is not None]
    return (min(partial), True) if partial else (None, False)


def _find_full(text: T, stop: T, last_token_size: int | None) -> int:
    if last_token_size is None:
        return text.find(stop)
    return text.find(stop, max(0, len(text) - (len(stop) + last_token_size)))
