"""Tokenizer export: BPE from tokenizer.json, SentencePiece from tokenizer.model, WordPiece for
BERT, and the special tokens, added tokens, add_*_token flags and chat template
(llama.cpp: TextModel.get_vocab_base / _create_vocab_sentencepiece, gguf-py SpecialVocab).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .kv import KV
from .pretok_table import CHECK_TEXT, PRE_TOKENIZER_BY_HASH
from .safetensors import ConvertError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6  # llama_token_type
SPECIAL_TYPES = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
# the token types gguf-py's writer has an id key for (cls has none there: it is skipped)
ID_KEYS = {"bos": "bos_token_id", "eos": "eos_token_id", "unk": "unknown_token_id",
           "sep": "seperator_token_id", "pad": "padding_token_id", "mask": "mask_token_id",
           "eot": "eot_token_id", "eom": "eom_token_id"}
ADD_KEYS = ("bos", "eos", "sep")


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ConvertError(f"{path.name}: not valid JSON ({e})") from None


def looks_special(text: str) -> bool:
    """llama.cpp's does_token_look_special: added tokens some models forget to mark special."""
    return (text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
            or (text.startswith("<|") and text.endswith("|>"))
            or (text.startswith("<｜") and text.endswith("｜>"))
            or (text.startswith("<unused") and text.endswith(">")))


def _hf_tokenizer(model_dir: Path):
    path = model_dir / "tokenizer.json"
    if not path.is_file():
        raise ConvertError(f"{model_dir}: no tokenizer.json or tokenizer.model (missing tokenizer)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ConvertError("reading tokenizer.json needs the 'tokenizers' package") from None
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # the Rust library raises its own exception type
        raise ConvertError(f"tokenizer.json: cannot be read ({e})") from None
    # transformers loads a tokenizer.json without its saved truncation and padding
    tok.no_truncation()
    tok.no_padding()
    return tok


def pre_tokenizer_name(tok) -> str:
    """tokenizer.ggml.pre: the hash of CHECK_TEXT's token ids, looked up in llama.cpp's table."""
    ids = tok.encode(CHECK_TEXT).ids
    digest = hashlib.sha256(str(ids).encode()).hexdigest()
    if digest not in PRE_TOKENIZER_BY_HASH:
        raise ConvertError(f"BPE pre-tokenizer not recognized (hash {digest}): llama.cpp's table "
                           "has no entry for this tokenizer")
    return PRE_TOKENIZER_BY_HASH[digest]


def bpe_vocab(model_dir: Path, vocab_size: int | None) -> tuple[list[str], list[int], str]:
    """Tokens, token types and pre-tokenizer name of a tokenizer.json (get_vocab_base)."""
    tok = _hf_tokenizer(model_dir)
    vocab = tok.get_vocab(with_added_tokens=True)
    n = vocab_size if vocab_size is not None else len(vocab)
    if max(vocab.values()) >= n:
        raise ConvertError(f"tokenizer.json has token id {max(vocab.values())}, beyond the "
                           f"model's vocab_size {n}")
    pre = pre_tokenizer_name(tok)
    added = {a.content: (i, a) for i, a in tok.get_added_tokens_decoder().items()}
    reverse = {i: t for t, i in vocab.items()}
    tokens, types = [], []
    for i in range(n):
        token = reverse.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(UNUSED)
            continue
        if token in added:
            token, ttype = _added_token(tok, token, added[token][1])
        else:
            ttype = NORMAL
        tokens.append(token)
        types.append(ttype)
    return tokens, types, pre


def _added_token(tok, token: str, info) -> tuple[str, int]:
    # llama.cpp expects control and user-defined tokens pre-normalized
    if not info.normalized:
        token = tok.decode(tok.encode(token, add_special_tokens=False).ids,
                           skip_special_tokens=False)
    if info.special or looks_special(token):
        return token, CONTROL
    return token.replace("\u2581", " "), USER_DEFINED


def vocab_real_size_json(model_dir: Path) -> int:
    """Gemma 3's count of real tokens in a tokenizer.json (vocab plus added tokens)."""
    data = read_json(model_dir / "tokenizer.json")
    return len(data["model"]["vocab"]) + len(data["added_tokens"])


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise ConvertError("tokenizer.model: truncated protobuf")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, pos


def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message, the minimum sentencepiece needs."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ConvertError(f"tokenizer.model: unsupported protobuf wire type {wire}")
        yield num, wire, value


def sentencepiece_pieces(path: Path) -> list[tuple[bytes, float, int]]:
    """(piece, score, sentencepiece type) of every piece of a tokenizer.model (ModelProto)."""
    import struct
    pieces = []
    for num, wire, value in _fields(path.read_bytes()):
        if num != 1 or wire != 2:
            continue
        piece, score, ptype = b"", 0.0, NORMAL
        for n, w, v in _fields(value):
            if n == 1 and w == 2:
                piece = bytes(v)
            elif n == 2 and w == 5:
                score = struct.unpack("<f", v)[0]
            elif n == 3 and w == 0:
                ptype = v
        pieces.append((piece, score, ptype))
    if not pieces:
        raise ConvertError(f"{path.name}: no sentencepiece pieces in it")
    return pieces


def spm_vocab(model_dir: Path, vocab_size: int | None
              ) -> tuple[list[bytes], list[float], list[int]]:
    """Tokens, scores and types of a SentencePiece vocab (_create_vocab_sentencepiece)."""
    pieces = sentencepiece_pieces(model_dir / "tokenizer.model")
    n = vocab_size or len(pieces)
    tokens = [f"[PAD{i}]".encode() for i in range(n)]
    scores, types = [-10000.0] * n, [UNUSED] * n
    for i, (piece, score, ptype) in enumerate(pieces[:n]):
        # a user-defined piece counts as normal there (no IsUserDefined check)
        tokens[i], scores[i] = piece, score
        types[i] = ptype if ptype in (UNKNOWN, CONTROL, UNUSED, BYTE) else NORMAL
    added = model_dir / "added_tokens.json"
    if added.is_file():
        for text, i in read_json(added).items():
            if i < n:
                tokens[i], scores[i], types[i] = text.encode(), -1000.0, USER_DEFINED
    _spm_config_tokens(model_dir, tokens, scores, types)
    return tokens, scores, types


def _spm_config_tokens(model_dir: Path, tokens: list, scores: list, types: list) -> None:
    config = model_dir / "tokenizer_config.json"
    if not config.is_file():
        return
    for key, data in read_json(config).get("added_tokens_decoder", {}).items():
        i, text = int(key), data["content"]
        if i >= len(tokens):
            continue
        if data.get("special") or looks_special(text):
            types[i] = CONTROL
        else:
            text = text.replace("\u2581", " ")
            types[i] = USER_DEFINED
        scores[i], tokens[i] = -1000.0, text.encode()


@dataclass
class SpecialVocab:
    """Merges, special token ids, add_*_token flags, chat template and normalizer flags
    (gguf-py SpecialVocab, loaded from tokenizer.json, tokenizer_config.json and config.json)."""

    n_vocab: int | None = None
    load_merges: bool = False
    types: tuple[str, ...] = SPECIAL_TYPES
    merges: list[str] = field(default_factory=list)
    ids: dict[str, int] = field(default_factory=dict)
    add: dict[str, bool] = field(default_factory=dict)
    chat_template: Any = None
    lowercase: bool | None = None
    strip_accents: bool | None = None

    def load(self, model_dir: Path) -> SpecialVocab:
        self._from_tokenizer_json(model_dir)
        config = model_dir / "config.json"
        if config.is_file():
            cfg = read_json(config)
            for typ in self.types:
                tid = cfg.get(f"{typ}_token_id")
                if tid is None and "text_config" in cfg:
                    tid = cfg["text_config"].get(f"{typ}_token_id")
                self._set(typ, tid)
        if self.load_merges and not self.merges:
            self._merges_txt(model_dir / "merges.txt")
        return self

    def _set(self, typ: str, tid: Any) -> None:
        if not isinstance(tid, int) or isinstance(tid, bool):
            return
        if tid < 0:
            raise ConvertError(f"invalid id {tid} for special token type {typ}")
        if (self.n_vocab is None or tid < self.n_vocab) and typ not in self.ids:
            self.ids[typ] = tid

    def _merges_txt(self, path: Path) -> None:
        if not path.is_file():
            return
        lines = path.read_text(encoding="utf-8").splitlines()
        if lines and lines[0].strip().startswith("#"):
            lines = lines[1:]
        self.merges = [" ".join(p) for p in (ln.strip().split(None, 3) for ln in lines)
                       if len(p) == 2]

    def _normalizer(self, norm: dict) -> None:
        kind = norm.get("type")
        if kind == "Lowercase":
            self.lowercase = True
        elif kind == "StripAccents":
            self.strip_accents = True
        elif kind == "BertNormalizer":
            self.lowercase = norm.get("lowercase", self.lowercase)
            self.strip_accents = norm.get("strip_accents", self.strip_accents)
        elif kind == "Sequence":
            for sub in norm.get("normalizers", []):
                self._normalizer(sub)

    def _json_merges(self, merges: Any) -> None:
        if not (self.load_merges and isinstance(merges, list) and merges):
            return
        if isinstance(merges[0], str):
            self.merges = merges
        elif isinstance(merges[0], list) and len(merges[0]) == 2:
            # newer tokenizers store pairs; a space inside a part is written as U+0120
            self.merges = [" ".join("".join(chr(ord(c) + 256) if c == " " else c for c in part)
                                    for part in pair) for pair in merges]
        else:
            raise ConvertError("tokenizer.json: unknown merges format")

    def _from_tokenizer_json(self, model_dir: Path) -> None:
        tok_path, cfg_path = model_dir / "tokenizer.json", model_dir / "tokenizer_config.json"
        tokenizer = read_json(tok_path) if tok_path.is_file() else None
        config = read_json(cfg_path) if cfg_path.is_file() else None
        added = []
        if tokenizer:
            self._json_merges(tokenizer.get("model", {}).get("merges"))
            if tokenizer.get("normalizer"):
                self._normalizer(tokenizer["normalizer"])
            added = tokenizer.get("added_tokens", [])
            self._post_processor(tokenizer.get("post_processor"), config)
        if not config:
            return
        self._chat_template(model_dir, config)
        for typ in self.types:
            flag = config.get(f"add_{typ}_token")
            if isinstance(flag, bool) and typ not in self.add:
                self.add[typ] = flag
            entry = config.get(f"{typ}_token")
            content = entry.get("content") if isinstance(entry, dict) else entry
            if isinstance(content, str):
                self._set(typ, next((a.get("id") for a in added if a.get("content") == content),
                                    None))

    def _chat_template(self, model_dir: Path, config: dict) -> None:
        alt = None
        jinja, js = model_dir / "chat_template.jinja", model_dir / "chat_template.json"
        if jinja.is_file():
            alt = jinja.read_text(encoding="utf-8")
            extra = sorted((model_dir / "additional_chat_templates").glob("*.jinja"))
            if extra:
                alt = [{"name": "default", "template": alt}] + [
                    {"name": p.stem, "template": p.read_text(encoding="utf-8")} for p in extra]
        elif js.is_file():
            alt = read_json(js).get("chat_template")
        template = config.get("chat_template", alt)
        if template is None or isinstance(template, (str, list)):
            self.chat_template = template

    def _post_processor(self, post: dict | None, config: dict | None) -> None:
        """add_bos/eos/sep from the post-processor (SpecialVocab._try_load_from_tokenizer_json);
        like llama.cpp it fills in tokenizer_config's bos/eos/cls/sep entries it implies."""
        cfg = config if config is not None else {}
        sp = {k: cfg.get(f"{k}_token") for k in ("bos", "cls", "eos", "sep")}
        if not sp["bos"] and sp["cls"] and config:
            cfg["bos_token"] = sp["bos"] = sp["cls"]
        if not sp["eos"] and sp["sep"] and config:
            cfg["eos_token"] = sp["eos"] = sp["sep"]
        if not post:
            return
        for proc in post.get("processors", [post]):
            kind = proc.get("type")
            if kind == "ByteLevel":
                self.add.setdefault("bos", False)
                self.add.setdefault("eos", False)
            elif kind == "RobertaProcessing":
                self.add.update(bos=True, eos=True, sep=True)
                if not sp["cls"] and config:
                    cfg["cls_token"] = sp["cls"] = proc.get("cls", [sp["bos"]])[0]
                if not sp["sep"] and config:
                    cfg["sep_token"] = sp["sep"] = proc.get("sep", [sp["eos"]])[0]
            elif kind == "TemplateProcessing":
                self._template_processing(proc, config, sp)

    def _template_processing(self, proc: dict, config: dict | None, sp: dict) -> None:
        single, pair = proc.get("single", []), proc.get("pair", [])
        first = last = None
        cfg = config if config is not None else {}
        if len(single) > 1:
            first = single[0].get("SpecialToken", {}).get("id")
            if first:
                if not config:
                    sp["bos"] = first
                elif first not in (sp["bos"], sp["cls"]):
                    if not sp["bos"]:
                        cfg["bos_token"] = sp["bos"] = first
                    if not sp["cls"]:
                        cfg["cls_token"] = sp["cls"] = first
                self.add["bos"] = first in (sp["bos"], sp["cls"])
            last = single[-1].get("SpecialToken", {}).get("id")
            if last:
                if not config:
                    sp["eos"] = last
                elif last != sp["eos"]:
                    for extra in ("eot", "eom"):
                        if extra not in self.types:
                            self.types = tuple(self.types) + (extra,)
                            cfg[f"{extra}_token"] = sp["eos"]
                            break
                    cfg["eos_token"] = sp["eos"] = last
                self.add["eos"] = last == sp["eos"]
        self._template_pair(pair, first, last, config, sp)

    def _template_pair(self, pair: list, first, last, config: dict | None, sp: dict) -> None:
        if not pair:
            return
        start = 1 if first and pair[0].get("SpecialToken", {}).get("id") == first else 0
        stop = -1 if last and pair[-1].get("SpecialToken", {}).get("id") == last else None
        pair = pair[start:stop]
        if not pair:
            return
        a, b = pair[0].get("Sequence", {}).get("id"), pair[-1].get("Sequence", {}).get("id")
        middle = pair[1:-1]
        if a != "A" or b != "B" or not middle:
            return
        add_sep = False
        entry = middle[0].get("SpecialToken", {}).get("id")
        if entry and entry in (sp["sep"], sp["eos"]) and not last:
            add_sep = True
        if len(middle) == 2:
            second = middle[1].get("SpecialToken", {}).get("id")
            if second and second in (sp["sep"], sp["eos"]):
                add_sep = True
        self.add["sep"] = add_sep
        if add_sep and not sp["sep"] and config:
            config["sep_token"] = sp["eos"]

    def write(self, kv: KV) -> None:
        """The keys in SpecialVocab.add_to_gguf's order."""
        if self.merges:
            kv.array("tokenizer.ggml.merges", self.merges)
        for typ, tid in self.ids.items():
            if typ in ID_KEYS:
                kv.u32(f"tokenizer.ggml.{ID_KEYS[typ]}", tid)
        for typ, value in self.add.items():
            if typ in ADD_KEYS:
                kv.boolean(f"tokenizer.ggml.add_{typ}_token", value)
        if self.chat_template is not None:
            write_chat_template(kv, self.chat_template)
        if self.lowercase is not None:
            kv.boolean("tokenizer.ggml.normalizer.lowercase", self.lowercase)
        if self.strip_accents is not None:
            kv.boolean("tokenizer.ggml.normalizer.strip_accents", self.strip_accents)


def write_chat_template(kv: KV, template: str | list) -> None:
    """tokenizer.chat_template, or named templates for a list (GGUFWriter.add_chat_template)."""
    if isinstance(template, str):
        kv.string("tokenizer.chat_template", template)
        return
    default, names = None, []
    for choice in template:
        name = "".join(c if c.isascii() and c.isalnum() else "_" for c in choice.get("name", ""))
        body = choice.get("template")
        if name and body is not None:
            if name == "default":
                default = body
            else:
                names.append(name)
                kv.string(f"tokenizer.chat_template.{name}", body)
    if names:
        kv.array("tokenizer.chat_templates", list(dict.fromkeys(names)))
    if default is not None:
        kv.string("tokenizer.chat_template", default)
