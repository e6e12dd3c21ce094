"""llama.cpp's Qwen3.5 MTP head through llama-cpp-python 0.3.36's library (the staging API of
src/llama-ext.h, exported as C++ symbols): a target context that keeps every row's h_nextn, and
an MTP context (ctx_type LLAMA_CONTEXT_TYPE_MTP, ctx_other = the target) decoding batches that
carry both tokens and h rows, as common_speculative_impl_draft_mtp does.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from .llamacpp import patch_default_params


def _lib():
    import llama_cpp

    lib = llama_cpp.llama_cpp._lib
    set_nextn = lib._Z26llama_set_embeddings_nextnP13llama_contextbb
    set_nextn.argtypes, set_nextn.restype = [ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool], None
    get_ith = lib._Z30llama_get_embeddings_nextn_ithP13llama_contexti
    get_ith.argtypes, get_ith.restype = [ctypes.c_void_p, ctypes.c_int32], \
        ctypes.POINTER(ctypes.c_float)
    return llama_cpp, set_nextn, get_ith


class MtpReference:
    """decode_target(tokens) -> (logits, h_nextn) of every row; decode_mtp(tokens, h, pos0)
    -> (logits, h_nextn) of the MTP head for tokens paired with h rows, at positions pos0.."""

    def __init__(self, path: Path, n_ctx: int = 256):
        patch_default_params()
        self.llama_cpp, self.set_nextn, self.get_ith = _lib()
        lc = self.llama_cpp
        lc.llama_backend_init()
        mp = lc.llama_model_default_params()
        mp.load_mtp = True  # common.cpp sets it for --spec-type draft-mtp
        self.model = lc.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        self.vocab = lc.llama_model_get_vocab(self.model)
        self.n_vocab = lc.llama_vocab_n_tokens(self.vocab)
        self.n_embd = lc.llama_model_n_embd(self.model)
        cp = lc.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = \
            n_ctx, n_ctx, n_ctx, 1, 1
        cp.type_k = cp.type_v = 0  # f32, as the tests' own contexts
        self.ctx = lc.llama_init_from_model(self.model, cp)
        self.set_nextn(self.ctx, True, False)
        cp.ctx_type = lc.LLAMA_CONTEXT_TYPE_MTP
        cp.ctx_other = self.ctx
        cp.n_rs_seq = 0
        self.ctx_mtp = lc.llama_init_from_model(self.model, cp)
        if not self.ctx or not self.ctx_mtp:
            raise RuntimeError("llama.cpp could not create the contexts")
        self.set_nextn(self.ctx_mtp, True, True)

    def _decode(self, ctx, tokens, pos0: int, h: np.ndarray | None):
        lc, n = self.llama_cpp, len(tokens)
        batch = lc.llama_batch_init(n, self.n_embd if h is not None else 0, 1)
        tok = (ctypes.c_int32 * n)(*tokens)
        batch.token = ctypes.cast(tok, type(batch.token))
        batch.n_tokens = n
        if h is not None:
            ctypes.memmove(batch.embd, np.ascontiguousarray(h, np.float32).ctypes.data,
                           h.nbytes)
        for i in range(n):
            batch.pos[i], batch.n_seq_id[i], batch.logits[i] = pos0 + i, 1, 1
            batch.seq_id[i][0] = 0
        rc = lc.llama_decode(ctx, batch)
        batch.token = ctypes.cast(None, type(batch.token))  # ours, not the batch's to free
        if rc != 0:
            lc.llama_batch_free(batch)
            raise RuntimeError(f"llama_decode returned {rc}")
        logits = np.stack([np.ctypeslib.as_array(lc.llama_get_logits_ith(ctx, i),
                                                 (self.n_vocab,)).copy() for i in range(n)])
        hidden = np.stack([np.ctypeslib.as_array(self.get_ith(ctx, i), (self.n_embd,)).copy()
                           for i in range(n)])
        lc.llama_batch_free(batch)
        return logits, hidden

    def reset(self) -> None:
        """Empty both contexts' memory (each decode must follow the cells they hold)."""
        for ctx in (self.ctx, self.ctx_mtp):
            self.llama_cpp.llama_memory_clear(self.llama_cpp.llama_get_memory(ctx), True)

    def decode_target(self, tokens, pos0: int = 0):
        return self._decode(self.ctx, tokens, pos0, None)

    def decode_mtp(self, tokens, h: np.ndarray, pos0: int):
        return self._decode(self.ctx_mtp, tokens, pos0, h)

    def close(self) -> None:
        lc = self.llama_cpp
        lc.llama_free(self.ctx_mtp)
        lc.llama_free(self.ctx)
        lc.llama_model_free(self.model)
