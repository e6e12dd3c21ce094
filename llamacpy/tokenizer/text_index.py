"""`TextIndex`: text -> index over a `StringArray`, as `dict(zip(texts, range(n)))` would be
with the first index kept for a repeated text, in ~20 bytes per entry instead of ~60.

Layout: a table of 2^k >= 2n buckets, each a run of entry ids (sorted by bucket, ids ascending
within one) with the text's str hash beside each. The hash is Python's own, so a lookup costs
one `hash()` (cached in the str when it is reused); the table is built in this process and
rebuilt when unpickled, since str hashes differ between processes. A hit is confirmed by
comparing the text, so the result never depends on the hash.
"""

from __future__ import annotations

import numpy as np

from ..format import StringArray


class TextIndex:
    """Read-only mapping of str (or its UTF-8 bytes) to its first index in `texts`."""

    def __init__(self, texts: StringArray):
        self.texts, self._blob, self._off = texts, texts.blob, memoryview(texts.offsets)
        n = len(texts)
        bits = max(1, (2 * n - 1).bit_length())
        self._mask = (1 << bits) - 1
        hashes = np.fromiter(map(hash, texts), np.int64, count=n)
        buckets = hashes & np.int64(self._mask)  # SipHash: the low bits are already mixed
        order = np.argsort(buckets, kind="stable")  # ids ascending within a bucket: first wins
        starts = np.zeros(self._mask + 2, np.int32)
        np.cumsum(np.bincount(buckets, minlength=self._mask + 1), out=starts[1:])
        self._arrays = (starts, order.astype(np.int32), hashes[order])
        self._starts, self._ids, self._hashes = (memoryview(a) for a in self._arrays)

    def __reduce__(self):
        return TextIndex, (self.texts,)

    def get(self, text: str | bytes, default=None):
        # hot in every tokenizer's merge loop: locals only, and a miss on an empty bucket
        # returns after one hash and two array reads
        if text.__class__ is not str:
            text = text.decode("utf-8", "surrogateescape")
        h = hash(text)
        starts = self._starts
        j = starts[h & self._mask]
        end = starts[(h & self._mask) + 1]
        while j < end:
            if self._hashes[j] == h:
                i = self._ids[j]
                off = self._off
                if self._blob[off[i] : off[i + 1]].decode("utf-8", "surrogateescape") == text:
                    return i
            j += 1
        return default

    def __getitem__(self, text: str | bytes) -> int:
        i = self.get(text)
        if i is None:
            raise KeyError(text)
        return i

    def __contains__(self, text) -> bool:
        return isinstance(text, (str, bytes)) and self.get(text) is not None

    def n_repeats(self) -> int:
        """Entries whose text an earlier entry already has."""
        _, ids, hashes = self._arrays
        order = np.argsort(hashes, kind="stable")
        same = np.nonzero(hashes[order][1:] == hashes[order][:-1])[0]
        groups: dict[int, set] = {}
        for k in np.union1d(same, same + 1).tolist():
            j = int(order[k])
            groups.setdefault(int(hashes[j]), set()).add(self.texts.raw(int(ids[j])))
        members = np.isin(hashes, np.array(list(groups), np.int64)).sum()
        return int(members) - sum(len(s) for s in groups.values())
