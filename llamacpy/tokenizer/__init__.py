"""Tokenizers built from GGUF metadata, matching llama.cpp's llama-vocab.cpp token for token.

    tok = Tokenizer.from_gguf("model.gguf")
    ids = tok.tokenize("Hello", add_special=True, parse_special=False)
    text = tok.detokenize(ids)  # bytes

SPM (llama, gemma), BPE (gpt2-style with the pre-tokenizers of pretokenizers.py, and gemma4),
WPM (bert) and UGM (t5) vocabularies are supported; RWKV and PLaMo-2 are not.
"""

from .detokenizer import StreamingDetokenizer
from .tokenizer import Tokenizer
from .vocab import (ATTR_BYTE, ATTR_CONTROL, ATTR_LSTRIP, ATTR_NORMAL, ATTR_RSTRIP, ATTR_UNKNOWN,
                    ATTR_UNUSED, ATTR_USER_DEFINED, NULL, Vocab, load_vocab)

__all__ = [
    "Tokenizer", "StreamingDetokenizer", "Vocab", "load_vocab", "NULL",
    "ATTR_UNKNOWN", "ATTR_UNUSED", "ATTR_NORMAL", "ATTR_CONTROL", "ATTR_USER_DEFINED", "ATTR_BYTE",
    "ATTR_LSTRIP", "ATTR_RSTRIP",
]
