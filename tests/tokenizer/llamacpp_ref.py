"""llama.cpp's tokenizer through llama-cpp-python's low-level API (llama_tokenize,
llama_detokenize, llama_token_to_piece and the llama_vocab_* queries) on a vocab-only model.

Import only where llama_cpp is installed (tests.reference.llamacpp.available()).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import llama_cpp

from tests.reference.llamacpp import patch_default_params

class LlamaCppVocab:
    """One GGUF vocabulary loaded by llama.cpp (vocab_only)."""

    def __init__(self, path: str | Path):
        patch_default_params()
        self.llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
        self.vocab = self.llm._model.vocab
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)

    def tokenize(self, text: bytes, add_special: bool, parse_special: bool) -> list[int]:
        n_max = len(text) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(self.vocab, text, len(text), buf, n_max, add_special,
                                     parse_special)
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(self.vocab, text, len(text), buf, n_max, add_special,
                                         parse_special)
        return list(buf[:n])

    def detokenize(self, tokens: list[int], remove_special: bool, unparse_special: bool) -> bytes:
        arr = (llama_cpp.llama_token * max(len(tokens), 1))(*tokens)
        size = 64 + 16 * len(tokens)
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_detokenize(self.vocab, arr, len(tokens), buf, size,
                                           remove_special, unparse_special)
            if n >= 0:
                return buf.raw[:n]
            size = -n + 1
        raise RuntimeError("llama_detokenize kept asking for a larger buffer")

    def token_to_piece(self, token: int, special: bool, lstrip: int = 0) -> bytes:
        size = 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, size, lstrip, special)
            if n >= 0:
                return buf.raw[:n]
            size = -n
        raise RuntimeError("llama_token_to_piece kept asking for a larger buffer")

    def facts(self) -> dict:
        """Special ids, flags, per-token attributes and the EOG set."""
        v, lc = self.vocab, llama_cpp
        ids = {name: getattr(lc, f"llama_vocab_{name}")(v) for name in
               ("bos", "eos", "eot", "sep", "nl", "pad", "mask", "fim_pre", "fim_suf",
                "fim_mid", "fim_pad", "fim_rep", "fim_sep")}
        return {
            "ids": ids,
            "add_bos": bool(lc.llama_vocab_get_add_bos(v)),
            "add_eos": bool(lc.llama_vocab_get_add_eos(v)),
            "attrs": [int(lc.llama_vocab_get_attr(v, i)) for i in range(self.n_vocab)],
            "eog": {i for i in range(self.n_vocab) if lc.llama_vocab_is_eog(v, i)},
        }
