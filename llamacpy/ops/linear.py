"""Linear layers and embedding lookups over GGUF weights read in place from the mapped file."""

from __future__ import annotations

import numpy as np

from ..format.constants import GGMLType
from ..format.reader import GGUFTensor
from ..kernels.dequant import call_kernel, dequantize_rows, weight_view
from ..kernels.elementwise import gated_1d
from ..kernels.matmul import (MULTI_KERNELS, NO_ZMM, SMALL_BATCH_Q6_K_BYTES,
                              ZMM_KERNELS, matmul, multi_q6_k_bytes, row_chunks,
                              small_batch_limit)
from ..kernels.matvec import MATVEC_KERNELS, matvec
from ..kernels.repack import REPACKABLE, repack_as_q8_0, repack_q6_k_bytes
from ..kernels.simd import HAS_AVX512BW


class Linear:
    """y = W x for a 2-D GGUF weight W [out_features, in_features] (ggml ne = (in, out)).

    The weight stays a zero-copy uint8 view [rows, row_bytes] of the mapped file unless
    `repack_q8_0` is set (llama-server with --parallel > 1): Q5_0 and IQ4_NL blocks are then
    rewritten once as Q8_0 (exact: the same results bit for bit for one token, to float32 rounding
    for several; 1.5-1.9x the bytes; the decode kernels run ~1.3x (Q5_0) and ~1.1x (IQ4_NL)
    faster per thread on it, ~5% of a Gemma 3 270M decode step), and without AVX-512BW Q6_K gets
    a copy in bytes for the few-token kernel (repack_q6_k_bytes: 1.5x the bytes, ~1.4x faster at
    4 tokens; with it kernels/kquant_tokens.py is 2x faster again on the file's blocks) while one
    token still reads the file's blocks.
    """

    def __init__(self, tensor: GGUFTensor, repack_q8_0: bool = False):
        if len(tensor.ne) != 2:
            raise ValueError(f"tensor '{tensor.name}' has shape {list(tensor.ne)}; "
                             "Linear needs 2-D")
        self.name = tensor.name
        self.in_features, self.out_features = int(tensor.ne[0]), int(tensor.ne[1])
        self.ggml_type = GGMLType(tensor.ggml_type)
        self.weight = tensor.blocks()  # uint8 [out_features, row bytes]
        if repack_q8_0 and self.ggml_type in REPACKABLE:
            self.weight = repack_as_q8_0(self.weight, self.ggml_type)
            self.ggml_type = GGMLType.Q8_0
        # one-token fast path: the kernel and its weight view, looked up once
        self._matvec = MATVEC_KERNELS.get(self.ggml_type)
        self._weight_view = weight_view(self.weight, self.ggml_type)
        # few-token fast path (the server's batched decode): matmul()'s small-batch kernel
        # (and from `_zmm_from` tokens on, its four-tokens-a-vector twin where the CPU has one)
        self._multi = MULTI_KERNELS.get(self.ggml_type)
        self._multi_zmm, self._zmm_from = ZMM_KERNELS.get(self.ggml_type, NO_ZMM)
        self._multi_max = small_batch_limit(self.ggml_type)
        self._multi_weight = self._weight_view
        if repack_q8_0 and self.ggml_type == GGMLType.Q6_K and not HAS_AVX512BW:
            self._multi, self._multi_weight = multi_q6_k_bytes, repack_q6_k_bytes(self.weight)
            self._multi_zmm, self._zmm_from = NO_ZMM
            self._multi_max = SMALL_BATCH_Q6_K_BYTES

    def __call__(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """x float32 [..., in_features] -> float32 [..., out_features]."""
        if x.shape[-1] != self.in_features:
            raise ValueError(f"{self.name}: input has {x.shape[-1]} features, expected "
                             f"{self.in_features}")
        if out is not None and not out.flags.c_contiguous:
            raise ValueError(f"{self.name}: out must be C-contiguous")
        if x.size == self.in_features and self._matvec is not None:
            return self._one_token(x, out)
        if x.ndim == 2 and 0 < x.shape[0] <= self._multi_max and self._multi is not None:
            return self._few_tokens(x, out)
        if x.ndim == 1:
            return matvec(self.weight, self.ggml_type, x, out)
        flat = x.reshape(-1, self.in_features)
        y = matmul(self.weight, self.ggml_type, flat,
                   None if out is None else out.reshape(-1, self.out_features))
        return y.reshape(*x.shape[:-1], self.out_features)

    def gated(self, x: np.ndarray, gate: np.ndarray, kind: int) -> np.ndarray:
        """act(gate) * self(x), written into `gate` (a gated FFN's gate projection, float32
        [tokens, out_features]; kind 0 SiLU, 1 tanh-GELU). A prompt's integer GEMM applies it as
        it stores each panel, so its [tokens, n_ff] up projection never exists as an array."""
        flat = x.reshape(-1, self.in_features)
        if gate.dtype != np.float32 or not gate.flags.c_contiguous or \
                gate.size != flat.shape[0] * self.out_features:
            raise ValueError(f"{self.name}: the gate must be C-contiguous float32 "
                             f"[{flat.shape[0]}, {self.out_features}]")
        if flat.shape[0] > self._multi_max:  # the path __call__ takes to matmul()
            matmul(self.weight, self.ggml_type, flat, gate.reshape(-1, self.out_features), kind)
        else:
            gated_1d(gate.reshape(-1), self(x).reshape(-1), kind)
        return gate

    def _one_token(self, x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """Decode: one token straight to the matvec kernel (matvec()'s checks cost ~10 us)."""
        y = np.empty((*x.shape[:-1], self.out_features), np.float32) if out is None else out
        if y.dtype != np.float32 or y.size != self.out_features:
            raise ValueError(f"{self.name}: out must be float32 with {self.out_features} values")
        x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
        call_kernel(self._matvec, self._weight_view, x, y.reshape(-1))
        return y

    def _few_tokens(self, x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
        """A few tokens [T, in] straight to the multi-token kernel, as `_one_token` does."""
        shape = (x.shape[0], self.out_features)
        y = np.empty(shape, np.float32) if out is None else out
        if y.dtype != np.float32 or y.shape != shape:
            raise ValueError(f"{self.name}: out must be float32 {shape}")
        x = np.ascontiguousarray(x, dtype=np.float32)
        kernel = self._multi_zmm if x.shape[0] >= self._zmm_from else self._multi
        call_kernel(kernel, self._multi_weight, x, y, row_chunks(self.out_features))
        return y

    def __repr__(self) -> str:
        return (f"Linear({self.name!r}, {self.ggml_type.name}, in={self.in_features}, "
                f"out={self.out_features})")


def get_rows(tensor: GGUFTensor, ids, out: np.ndarray | None = None) -> np.ndarray:
    """Embedding lookup (ggml_get_rows): rows `ids` of a 2-D tensor as float32 [len(ids), ne[0]]."""
    if len(tensor.ne) != 2:
        raise ValueError(f"tensor '{tensor.name}' has shape {list(tensor.ne)}; get_rows needs 2-D")
    return dequantize_rows(tensor.blocks(), tensor.ggml_type, np.asarray(ids), out)
