"""llamacpy: llama.cpp rebuilt in Python."""

import os

# Idle OpenBLAS workers otherwise spin ~0.1 s after each sgemm and starve numba's threads in the
# prompt path (dequantize tile, sgemm, repeat); must be set before numpy loads OpenBLAS.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .llama import Llama, LlamaDraftModel, LlamaGrammar, LlamaPromptLookupDecoding  # noqa: E402
from .whisper import Whisper  # noqa: E402

__version__ = "0.1.0"
