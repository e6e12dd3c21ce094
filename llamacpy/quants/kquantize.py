"""Reference quantizers for Q2_K..Q6_K, IQ4_NL and IQ4_XS (placeholder until implemented)."""

from __future__ import annotations

import numpy as np


def _todo(name: str):
    def quantize(x: np.ndarray) -> np.ndarray:
        raise NotImplementedError(f"{name} quantization is not implemented yet")
    return quantize


quantize_q2_k = _todo("Q2_K")
quantize_q3_k = _todo("Q3_K")
quantize_q4_k = _todo("Q4_K")
quantize_q5_k = _todo("Q5_K")
quantize_q6_k = _todo("Q6_K")
quantize_iq4_nl = _todo("IQ4_NL")
quantize_iq4_xs = _todo("IQ4_XS")
