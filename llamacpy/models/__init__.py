"""Model architectures, one file per family, found by general.architecture (registry.py)."""

from .registry import ARCHITECTURES, load_model

__all__ = ["ARCHITECTURES", "load_model"]
