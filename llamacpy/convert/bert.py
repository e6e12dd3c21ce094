"""BertModel -> `bert` (llama.cpp: BertModel): WordPiece vocab in phantom-space form, no causal
mask, sentence-transformers pooling; the pooler and the masked-LM head are dropped."""

from __future__ import annotations

from .base import Converter
from .kv import KV
from .vocab import CONTROL, SpecialVocab, bpe_vocab

SKIPPED = ("embeddings.position_ids", "pooler.dense.weight", "pooler.dense.bias")


class BertConverter(Converter):
    arch = "bert"
    hf_archs = ("BertModel", "BertForMaskedLM", "BertForSequenceClassification")
    global_map = {
        "embeddings.word_embeddings": "token_embd",
        "embeddings.token_type_embeddings": "token_types",
        "embeddings.position_embeddings": "position_embd",
        "embeddings.LayerNorm": "token_embd_norm",
        "classifier.out_proj": "cls.output",
        "classifier.dense": "cls",
    }
    block_map = {
        "encoder.layer.{bid}.attention.self.query": "blk.{bid}.attn_q",
        "encoder.layer.{bid}.attention.self.key": "blk.{bid}.attn_k",
        "encoder.layer.{bid}.attention.self.value": "blk.{bid}.attn_v",
        "encoder.layer.{bid}.attention.output.dense": "blk.{bid}.attn_output",
        "encoder.layer.{bid}.attention.output.LayerNorm": "blk.{bid}.attn_output_norm",
        "encoder.layer.{bid}.intermediate.dense": "blk.{bid}.ffn_up",
        "encoder.layer.{bid}.output.dense": "blk.{bid}.ffn_down",
        "encoder.layer.{bid}.output.LayerNorm": "blk.{bid}.layer_output_norm",
    }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # AutoConfig turns id2label's keys into ints (they order numerically)
        labels = {int(k): v for k, v in (self.hp.get("id2label") or {}).items()}
        if len(labels) == 2 and labels.get(0) == "LABEL_0":
            labels = {}  # transformers' placeholder labels
        self.labels = labels

    def filter_tensor(self, name):
        name = name.removeprefix("bert.")
        if name.endswith(".gamma"):
            name = name[:-6] + ".weight"
        if name.endswith(".beta"):
            name = name[:-5] + ".bias"
        if name in SKIPPED or name.startswith(("cls.predictions", "cls.seq_relationship")):
            return None
        return super().filter_tensor(name)

    def set_params(self, kv: KV) -> None:
        super().set_params(kv)
        kv.boolean(f"{self.arch}.attention.causal", False)
        self.pooling_type(kv)
        if self.labels:
            kv.array(f"{self.arch}.classifier.output_labels",
                     [v for _, v in sorted(self.labels.items())])

    def set_vocab(self, kv: KV) -> None:
        tokens, types, pre = bpe_vocab(self.dir, self.hp.get("vocab_size"))
        kv.u32("tokenizer.ggml.token_type_count", self.hp.get("type_vocab_size", 1))
        # WordPiece continuations lose '##'; word starts get the phantom space U+2581
        tokens = [t if ty == CONTROL else t[2:] if t.startswith("##") else "\u2581" + t
                  for t, ty in zip(tokens, types)]
        kv.string("tokenizer.ggml.model", "bert")
        kv.string("tokenizer.ggml.pre", pre)
        kv.array("tokenizer.ggml.tokens", tokens)
        kv.array("tokenizer.ggml.token_type", types)
        SpecialVocab(n_vocab=len(tokens)).load(self.dir).write(kv)

    def modify(self, data, name, bid):
        if self.labels and name in ("classifier.weight", "classifier.bias"):
            name = "classifier.out_proj." + name.rsplit(".", 1)[1]
        yield self.map_name(name), data
