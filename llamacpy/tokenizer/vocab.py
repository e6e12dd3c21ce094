"""The vocabulary from GGUF metadata (tokenizer.ggml.*), built as llama_vocab::impl::load does:
token attributes, special token ids and their fallbacks, the end-of-generation set and the
special-token cache that tokenize() splits on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..format import StringArray
from . import stl
from .pretokenizers import PreTokenizer, pre_tokenizer
from .text_index import TextIndex

NULL = -1  # LLAMA_TOKEN_NULL

# llama_token_attr
ATTR_UNDEFINED, ATTR_UNKNOWN, ATTR_UNUSED, ATTR_NORMAL = 0, 1 << 0, 1 << 1, 1 << 2
ATTR_CONTROL, ATTR_USER_DEFINED, ATTR_BYTE, ATTR_NORMALIZED = 1 << 3, 1 << 4, 1 << 5, 1 << 6
ATTR_LSTRIP, ATTR_RSTRIP, ATTR_SINGLE_WORD = 1 << 7, 1 << 8, 1 << 9

# tokenizer.ggml.token_type (llama_token_type) -> attribute; other values are UNDEFINED
_TYPE_TO_ATTR = np.array([ATTR_UNDEFINED, ATTR_NORMAL, ATTR_UNKNOWN, ATTR_CONTROL,
                          ATTR_USER_DEFINED, ATTR_UNUSED, ATTR_BYTE], dtype=np.int32)

KEY = "tokenizer.ggml."
# id slot -> metadata keys read for it, in llama.cpp's order (the deprecated ones come last)
_ID_KEYS = [("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"),
            ("eom", "eom_token_id"), ("unk", "unknown_token_id"), ("sep", "seperator_token_id"),
            ("pad", "padding_token_id"), ("mask", "mask_token_id"),
            ("fim_pre", "fim_pre_token_id"), ("fim_suf", "fim_suf_token_id"),
            ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"),
            ("fim_rep", "fim_rep_token_id"), ("fim_sep", "fim_sep_token_id"),
            ("fim_pre", "prefix_token_id"), ("fim_suf", "suffix_token_id"),
            ("fim_mid", "middle_token_id")]

# token texts that fill an id slot the metadata leaves empty (first in token_to_id order wins)
_AUTO_IDS = {
    "eot": ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
            "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
            "<end_of_utterance>"],
    "eom": ["<|eom_id|>"],
    "fim_pre": ["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"],
    "fim_suf": ["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"],
    "fim_mid": ["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"],
    "fim_pad": ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    "fim_rep": ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"],
    "fim_sep": ["<|file_sep|>"],
}

# token texts that end generation (special_eog_ids)
EOG_TEXTS = frozenset([
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
])


class SpecialIds(dict):
    """Special token ids by slot (bos, eos, eot, ...). A slot whose value depends on llama.cpp's
    token_to_id iteration order (and on nothing else) is worked out on first use."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.deferred: dict = {}

    def __missing__(self, slot: str) -> int:
        if slot not in self.deferred:
            raise KeyError(slot)
        value = self[slot] = self.deferred.pop(slot)()
        return value


@dataclass
class Vocab:
    """A vocabulary as llama.cpp holds it. `type` is SPM, BPE, WPM or UGM."""

    type: str
    model: str
    tokens: StringArray  # token texts (invalid UTF-8 bytes kept as surrogate escapes)
    scores: np.ndarray  # float32 [n_vocab]
    attrs: list[int]  # llama_token_attr of each token (an int64 array while loading)
    token_types: np.ndarray  # int32 [n_vocab]: tokenizer.ggml.token_type as stored
    token_to_id: TextIndex  # text (or its UTF-8 bytes) -> id
    pre: PreTokenizer | None = None
    merges: TextIndex | dict = field(default_factory=dict)  # "left right" -> rank
    ids: SpecialIds = field(default_factory=SpecialIds)  # bos, eos, eot, ... (NULL if absent)
    eog: set[int] = field(default_factory=set)
    special_cache: list[int] = field(default_factory=list)  # cache_special_tokens, in order
    add_space_prefix: bool = False
    add_bos: bool = False
    add_eos: bool = False
    add_sep: bool = False
    ignore_merges: bool = False
    clean_spaces: bool = False
    remove_extra_whitespaces: bool = False
    escape_whitespaces: bool = True
    charsmap: np.ndarray | None = None  # UGM: tokenizer.ggml.precompiled_charsmap
    default_pad: int = NULL  # the vocab type's PAD id before the metadata's (for llama_vocab_nl)
    lowercase: bool = True  # BertNormalizer options (WPM)
    strip_accents: bool = True

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)

    def text_to_token(self, text: str) -> int:
        return self.token_to_id.get(text, NULL)


def load_vocab(meta: dict) -> Vocab:
    """Build the vocabulary from GGUF metadata (llama_vocab::impl::load)."""
    model = meta.get(KEY + "model")
    if model is None:
        raise ValueError(f"required metadata key '{KEY}model' is missing")
    vocab = _new_vocab(meta, model)
    _apply_type_defaults(vocab, meta)
    _read_special_ids(vocab, meta)
    _autodetect_ids(vocab)
    _mark_unused(vocab)
    _build_eog(vocab)
    vocab.special_cache = _special_cache(vocab)
    _model_attrs(vocab, meta)
    vocab.attrs = vocab.attrs.tolist()  # numpy while loading, a list for per-token lookups
    return vocab


def _new_vocab(meta: dict, model: str) -> Vocab:
    vtype = {"llama": "SPM", "bert": "WPM", "gpt2": "BPE", "gemma4": "BPE", "t5": "UGM"}.get(model)
    if vtype is None:
        raise NotImplementedError(f"tokenizer model '{model}' is not supported")
    tokens = StringArray.from_strings(meta.get(KEY + "tokens") or [])
    n = len(tokens)
    if not n:
        raise ValueError(f"cannot find tokenizer vocab ('{KEY}tokens') in model file")
    if not tokens.byte_lengths().all():
        tokens = StringArray.from_strings(t or f"[EMPTY_{i}]" for i, t in enumerate(tokens))
    scores = np.asarray(meta.get(KEY + "scores", np.zeros(n)), dtype=np.float32)[:n]
    if len(scores) < n:
        raise ValueError(f"Index out of array bounds for scores ({len(scores)} < {n})")
    types = np.asarray(meta.get(KEY + "token_type", np.ones(n)), dtype=np.int32)[:n]
    if len(types) < n:
        raise ValueError(f"Index out of array bounds for toktypes ({len(types)} < {n})")
    token_to_id = TextIndex(tokens)
    repeats = token_to_id.n_repeats()
    if repeats:  # llama.cpp asserts id_to_token.size() == token_to_id.size()
        raise ValueError(f"vocab has {repeats} duplicate token text(s)")
    return Vocab(type=vtype, model=model, tokens=tokens, scores=scores, attrs=_attrs(types),
                 token_types=types, token_to_id=token_to_id)


def _attrs(types: np.ndarray) -> np.ndarray:
    # token type -> attribute; a missing token_type array means all NORMAL (type 1)
    known = (types >= 0) & (types < len(_TYPE_TO_ATTR))
    return np.where(known, _TYPE_TO_ATTR[np.clip(types, 0, 6)], ATTR_UNDEFINED).astype(np.int64)


def _apply_type_defaults(v: Vocab, meta: dict) -> None:
    # default special ids and flags of each vocab type, then the pre-tokenizer's flags
    null = dict.fromkeys(("eot", "eom", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep",
                          "fim_sep"), NULL)
    defaults = {
        "SPM": dict(bos=1, eos=2, unk=0, sep=NULL, pad=NULL, mask=NULL),
        "WPM": dict(bos=101, eos=NULL, unk=100, sep=102, pad=0, mask=103),
        "BPE": dict(bos=11, eos=11, unk=NULL, sep=NULL, pad=NULL, mask=NULL),
        "UGM": dict(bos=NULL, eos=1, unk=2, sep=NULL, pad=0, mask=NULL),
    }[v.type]
    if v.model == "gemma4":
        defaults = dict.fromkeys(defaults, NULL)
    v.ids = SpecialIds({**defaults, **null})
    v.default_pad = defaults["pad"] if defaults["pad"] < v.n_vocab else NULL
    if v.type == "BPE":
        _apply_pre_flags(v, meta)
    elif v.type == "SPM":
        v.add_space_prefix, v.add_bos = True, True
    elif v.type == "WPM":
        v.clean_spaces, v.add_bos, v.add_sep = True, True, True
    elif v.type == "UGM":
        v.add_eos = True
        v.charsmap = meta.get(KEY + "precompiled_charsmap")
    v.add_space_prefix = bool(meta.get(KEY + "add_space_prefix", v.add_space_prefix))
    v.remove_extra_whitespaces = bool(meta.get(KEY + "remove_extra_whitespaces", False))


def _apply_pre_flags(v: Vocab, meta: dict) -> None:
    name = "gemma4" if v.model == "gemma4" else meta.get(KEY + "pre", "")
    v.pre = pre_tokenizer(name)
    v.escape_whitespaces, v.clean_spaces = False, True
    if v.pre.flags.get("no_bos"):
        v.ids["bos"] = NULL
    for flag, value in v.pre.flags.items():
        if flag != "no_bos":
            setattr(v, flag, value)
    if KEY + "merges" not in meta:
        raise ValueError("cannot find tokenizer merges in model file")
    # bpe_ranks.emplace keeps the first rank of a pair, as TextIndex does
    v.merges = TextIndex(StringArray.from_strings(meta[KEY + "merges"]))


def _read_special_ids(v: Vocab, meta: dict) -> None:
    n = v.n_vocab
    for slot, key in _ID_KEYS:
        if v.ids[slot] >= n:
            v.ids[slot] = NULL  # default special token out of vocab range
        if KEY + key in meta and 0 <= int(meta[KEY + key]) < n:
            v.ids[slot] = int(meta[KEY + key])
    for flag in ("add_bos", "add_eos", "add_sep"):
        if KEY + flag + "_token" in meta:
            setattr(v, flag, bool(meta[KEY + flag + "_token"]))
    if v.pre is not None and v.pre.type == "GEMMA4":
        v.add_bos = True  # llama.cpp's workaround for Gemma 4
    v.lowercase = bool(meta.get(KEY + "normalizer.lowercase", v.lowercase))
    v.strip_accents = bool(meta.get(KEY + "normalizer.strip_accents", v.lowercase))


def _autodetect_ids(v: Vocab) -> None:
    # fill empty id slots from token texts; several candidates -> token_to_id iteration order
    picks = {}
    for slot, texts in _AUTO_IDS.items():
        cands = [v.token_to_id[t] for t in texts if t in v.token_to_id]
        if v.ids[slot] == NULL and cands:
            picks[slot] = cands
    ambiguous = {slot for slot, cands in picks.items() if len(cands) > 1}
    if ambiguous - {"eot"}:  # the pick decides which token turns CONTROL: resolve now
        rank = _map_rank(v)
        picks = {slot: [min(c, key=rank.__getitem__)] for slot, c in picks.items()}
    elif ambiguous:  # EOT candidates all become CONTROL and EOG anyway: resolve on demand
        cands = picks.pop("eot")
        del v.ids["eot"]
        v.ids.deferred["eot"] = lambda: min(cands, key=_map_rank(v).__getitem__)
    for slot, (tid, *_) in picks.items():
        v.ids[slot] = tid
        v.attrs[tid] |= ATTR_CONTROL


def _map_rank(v: Vocab) -> np.ndarray:
    """Position of each token id in the iteration order of llama.cpp's token_to_id map."""
    order = stl.unordered_map_order(v.tokens.blob, v.tokens.byte_lengths())
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank


def _mark_unused(v: Vocab) -> None:
    # control tokens with "unused" in their text are unused
    for i in np.nonzero(v.attrs & ATTR_CONTROL)[0].tolist():
        if "unused" in v.tokens[i]:
            v.attrs[i] |= ATTR_UNUSED


def _build_eog(v: Vocab) -> None:
    ids, attrs, text = v.ids, v.attrs, v.tokens
    eog = {ids[s] for s in ("fim_pad", "fim_rep", "fim_sep") if ids[s] != NULL}
    for t in sorted(t for t in EOG_TEXTS if t in v.token_to_id):
        eog.add(v.token_to_id[t])
        attrs[v.token_to_id[t]] |= ATTR_CONTROL
    for t in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):
        if t in v.token_to_id:  # gpt-oss: always render these
            attrs[v.token_to_id[t]] = ATTR_USER_DEFINED
    # .get: a deferred EOT is one of the EOG texts above, so nothing is lost
    eog |= {ids.get(s, NULL) for s in ("eos", "eot", "eom")} - {NULL}
    by_text = {text[i]: i for i in eog}
    has_call = "<|call|>" in by_text or "<|calls|>" in by_text
    if "<|end|>" in by_text and has_call and ("<|return|>" in by_text or "<|flush|>" in by_text):
        eog.discard(by_text["<|end|>"])  # o200k_harmony / solar-open: <|end|> is not EOG
        attrs[by_text["<|end|>"]] = ATTR_USER_DEFINED
    if "</s>" in by_text and {"<|tool_response>", "<|plamo:eos|>"} & by_text.keys():
        eog.discard(by_text["</s>"])  # gemma4 / plamo: </s> is a normal token
        attrs[by_text["</s>"]] = ATTR_NORMAL
    v.eog = eog


def _special_cache(v: Vocab) -> list[int]:
    # cache_special_tokens: longest text first, equal lengths in std::sort's order
    ids = np.nonzero(v.attrs & (ATTR_CONTROL | ATTR_USER_DEFINED | ATTR_UNKNOWN))[0].tolist()
    nbytes = v.tokens.byte_lengths()
    lengths = {i: int(nbytes[i]) for i in ids}
    return stl.std_sort(ids, lengths)


def _model_attrs(v: Vocab, meta: dict) -> None:
    # per-token lstrip/rstrip set by model, tokenizer or architecture name
    name = str(meta.get("general.name", "")).encode("utf-8", "surrogateescape").lower()
    name = name.decode("utf-8", "surrogateescape")  # std::tolower: ASCII letters only
    pre, arch = str(meta.get(KEY + "pre", "")), str(meta.get("general.architecture", ""))

    def set_attr(text: str, attr: int, on: bool) -> None:
        tid = v.token_to_id[text]  # llama.cpp: token_to_id.at() throws when missing
        v.attrs[tid] = v.attrs[tid] | attr if on else v.attrs[tid] & ~attr

    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in v.token_to_id:
            set_attr("<mask>", ATTR_LSTRIP, True)
    elif "phi-3" in name or "phi3" in name:
        for tid in v.special_cache:
            v.attrs[tid] |= ATTR_RSTRIP
        set_attr("</s>", ATTR_RSTRIP, True)
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            set_attr(text, ATTR_RSTRIP, False)
    elif "modern-bert" in name and "[MASK]" in v.token_to_id:
        set_attr("[MASK]", ATTR_LSTRIP, True)
