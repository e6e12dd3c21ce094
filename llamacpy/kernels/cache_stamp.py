"""numba's on-disk cache, kept honest across files. numba stamps a cached kernel with its own
source file's hash only, but our kernels inline code from other files (simd.py's intrinsics,
dequant.py's decoders, float_tiles.py's tiles): after an edit or a `git pull` that changes only
those, the unchanged file's kernels would load their old machine code. Here every kernel under
llamacpy/ is also stamped with a hash of all of kernels/*.py, so a change to any of them compiles
the package's kernels again. Imported by kernels/__init__.py before any kernel is defined."""

from __future__ import annotations

import functools
import hashlib
import os

from numba.core.caching import (CacheImpl, InTreeCacheLocator, UserProvidedCacheLocator,
                                UserWideCacheLocator)

KERNELS = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.dirname(KERNELS)


@functools.lru_cache(maxsize=None)
def kernels_hash() -> bytes:
    """sha256 over kernels/*.py, names and contents, in name order (once per process)."""
    h = hashlib.sha256()
    for name in sorted(os.listdir(KERNELS)):
        if name.endswith(".py"):
            h.update(name.encode() + b"\0")
            with open(os.path.join(KERNELS, name), "rb") as f:
                h.update(f.read())
    return h.digest()


class _PackageStamp:
    """A locator mixin: this package's kernels only, their stamp also covering kernels/."""

    def get_source_stamp(self):
        return super().get_source_stamp(), kernels_hash()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not os.path.abspath(py_file).startswith(PACKAGE + os.sep):
            return None
        return super().from_function(py_func, py_file)


class PackageUserProvidedLocator(_PackageStamp, UserProvidedCacheLocator):
    """NUMBA_CACHE_DIR set: numba's own choice, with the package stamp."""


class PackageInTreeLocator(_PackageStamp, InTreeCacheLocator):
    """The __pycache__ beside the source, with the package stamp."""


class PackageUserWideLocator(_PackageStamp, UserWideCacheLocator):
    """A read-only install: the user-wide cache directory, with the package stamp."""


LOCATORS = [PackageUserProvidedLocator, PackageInTreeLocator, PackageUserWideLocator]


def install() -> None:
    """Put the package's locators first, in numba's own order (once): numba takes the first that
    accepts a function."""
    if LOCATORS[0] not in CacheImpl._locator_classes:
        CacheImpl._locator_classes[:0] = LOCATORS


install()
