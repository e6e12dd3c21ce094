"""llamacpy: llama.cpp rebuilt in Python."""

from .llama import Llama  # noqa: E402

__version__ = "0.1.0"
