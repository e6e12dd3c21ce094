"""Record llama.cpp's tokenization of seeded random texts into tests/golden/tokenizer_golden.json,
so that tests/tokenizer/test_golden.py can check our tokenizer without llama-cpp-python.

usage: python -m tests.reference.make_tokenizer_golden [N_PER_VOCAB]   (needs llama_cpp)

For every ggml-vocab-*.gguf of llama.cpp and every catalogue model, each case holds the text, the
tokenize flags (bit 0 add_special, bit 1 parse_special), llama.cpp's token ids, the detokenize
flags (bit 0 remove_special, bit 1 unparse_special) and the CRC-32 of llama_detokenize's bytes.
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path

from llamacpy.hub import CATALOG, pull
from llamacpy.tokenizer import Tokenizer
from tests.reference.vocab_data import VERSION, vocab_names, vocab_path
from tests.tokenizer.compare import seed_of, vocab_specials
from tests.tokenizer.fuzz_text import random_texts

OUT = Path(__file__).resolve().parents[1] / "golden" / "tokenizer_golden.json"


def encode_text(text: bytes):
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": text.hex()}


def decode_text(value) -> bytes:
    return bytes.fromhex(value["hex"]) if isinstance(value, dict) else value.encode("utf-8")


def record(name: str, path: Path, n: int) -> list:
    from tests.tokenizer.llamacpp_ref import LlamaCppVocab

    ref, tok = LlamaCppVocab(path), Tokenizer.from_gguf(path)
    cases = []
    for k, text in enumerate(random_texts(seed_of(name) + 1, n, vocab_specials(tok), 12)):
        tflags, dflags = k % 4, (k // 4) % 4
        ids = ref.tokenize(text, bool(tflags & 1), bool(tflags & 2))
        detok = ref.detokenize(ids, bool(dflags & 1), bool(dflags & 2))
        cases.append([encode_text(text), tflags, ids, dflags, zlib.crc32(detok)])
    return cases


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    golden = {"llama_cpp_python": VERSION, "vocabs": {}, "models": {}}
    for name in vocab_names(with_vectors=False):
        golden["vocabs"][name] = record(name, vocab_path(name), n)
    for name in CATALOG:
        golden["models"][name] = record(name, pull(name, quiet=True), n)
    OUT.write_text(json.dumps(golden, ensure_ascii=False, separators=(",", ":")))
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
