"""Tokenizer API, vocab facts and the streaming detokenizer."""

from __future__ import annotations

import pytest

from llamacpy.format import open_gguf
from llamacpy.tokenizer import ATTR_CONTROL, NULL, StreamingDetokenizer, Tokenizer, load_vocab
from tests.reference.vocab_data import vocab_path

TEXTS = [
    "Hello 👋🏽 world! 👨‍👩‍👧‍👦 family, 🏳️‍🌈 flag and 🇯🇵.",
    "中文分词测试：今天天气很好。日本語のテキスト、한국어 텍스트.",
    "Rare: 𝔸𝔹ℂ 𓀀 𐍈 ꙮ 🀄 and math ∮ ∇ ⊗ — done",
    "It 's a test ? Yes , it ' s . They 're here and we 've gone !",
    "<start_of_turn>user\nHi<end_of_turn>\n<|im_start|>assistant\n😀<|im_end|>",
]


@pytest.fixture(scope="module")
def spm():
    return Tokenizer.from_gguf(vocab_path("llama-spm"))


@pytest.fixture(scope="module")
def gpt2():
    return Tokenizer.from_gguf(vocab_path("gpt-2"))


def test_from_gguf_accepts_file_or_path(spm):
    tok = Tokenizer.from_gguf(open_gguf(vocab_path("llama-spm")))
    assert tok.tokenize("Hello world") == spm.tokenize("Hello world") == [1, 15043, 3186]
    assert spm.n_vocab == 32000 and spm.bos == 1 and spm.eos == 2 and spm.eot == NULL
    assert spm.bos_token == "<s>" and spm.eos_token == "</s>" and spm.nl == 13


def test_special_flags(spm):
    assert spm.tokenize("<s>x", add_special=False) != spm.tokenize("<s>x", False, True)
    assert spm.tokenize("<s>x", False, True)[0] == spm.bos
    assert spm.token_attr(spm.bos) & ATTR_CONTROL and spm.is_eog(spm.eos)
    assert spm.token_type(spm.bos) == 3 and spm.token_type(13) == 6  # control, byte <0x0A>
    assert spm.token_to_piece(spm.bos) == b"" and spm.token_to_piece(spm.bos, True) == b"<s>"
    # llama_detokenize drops the prefix space only when no BOS precedes it
    ids = spm.tokenize("Hi there")
    assert spm.detokenize(ids) == spm.detokenize(ids, remove_special=True) == b" Hi there"
    assert spm.detokenize(ids, unparse_special=True) == b"<s> Hi there"
    assert spm.detokenize(ids[1:]) == b"Hi there"


def test_eog_and_eot_follow_llama_cpp():
    tok = Tokenizer.from_gguf(vocab_path("qwen2"))
    im_end, eot_text = tok.vocab.token_to_id["<|im_end|>"], tok.vocab.token_to_id["<|endoftext|>"]
    assert tok.is_eog(im_end) and tok.is_eog(eot_text) and not tok.is_eog(0)
    assert tok.eot == im_end  # llama.cpp's token_to_id iteration order meets <|im_end|> first


def test_bert_adds_cls_and_sep():
    tok = Tokenizer.from_gguf(vocab_path("bert-bge"))
    ids = tok.tokenize("Hello, World!")
    assert ids[0] == 101 and ids[-1] == 102 and tok.detokenize(ids) == b" hello, world!"


def test_unsupported_vocab_type_is_reported():
    meta = {"tokenizer.ggml.model": "rwkv", "tokenizer.ggml.tokens": ["a", "b"]}
    with pytest.raises(NotImplementedError):
        load_vocab(meta)
    with pytest.raises(NotImplementedError):  # Kimi-K2's splitter is not reproduced
        load_vocab({**meta, "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "kimi-k2",
                    "tokenizer.ggml.merges": []})


def test_unigram_vocab():
    tok = Tokenizer.from_gguf(vocab_path("nomic-bert-moe"))
    ids = tok.tokenize("Hello  world!")
    assert ids[0] == tok.bos and ids[-1] == tok.eos and len(ids) > 3
    assert tok.detokenize(ids, remove_special=True) == b" Hello world!"


def stream(tok: Tokenizer, ids: list[int], **flags) -> list[str]:
    det = StreamingDetokenizer(tok, **flags)
    return [det.feed(t) for t in ids] + [det.flush()]


def check_stream(tok: Tokenizer, text: str, **flags) -> int:
    """Streaming equals whole detokenization; returns how many pieces split a character."""
    ids = tok.tokenize(text, add_special=True, parse_special=True)
    whole = tok.detokenize(ids, **flags).decode("utf-8", "replace")
    chunks = stream(tok, ids, **flags)
    assert "".join(chunks) == whole
    if "\ufffd" not in whole:
        assert not any("\ufffd" in c for c in chunks)
    pieces = [tok.token_to_piece(t, flags.get("unparse_special", False)) for t in ids]
    return sum(1 for p in pieces if p and not _is_utf8(p))


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@pytest.mark.parametrize("name", ["llama-spm", "gpt-2", "qwen2", "phi-3", "bert-bge"])
def test_streaming_vocab_files(name):
    tok = Tokenizer.from_gguf(vocab_path(name))
    split = 0
    for text in TEXTS:
        for flags in ({}, {"remove_special": True}, {"unparse_special": True},
                      {"remove_special": True, "unparse_special": True}):
            split += check_stream(tok, text, **flags)
    if name != "bert-bge":
        assert split > 0, "no token split a character; the test would prove nothing"


@pytest.mark.parametrize("name", ["gemma3-270m", "smollm2-135m", "qwen2.5-coder-0.5b"])
def test_streaming_real_models(name, real_models):
    tok = Tokenizer.from_gguf(real_models[name])
    assert sum(check_stream(tok, t, unparse_special=True) for t in TEXTS) > 0


def test_streaming_cleanup_waits_for_lookahead(gpt2):
    # gpt-2 cleans " ?" and " 's": a trailing space or quote must wait for the next piece
    ids = gpt2.tokenize("Is it ? It ' s fine , isn 't it ' ll", add_special=False)
    chunks = stream(gpt2, ids)
    assert "".join(chunks) == gpt2.detokenize(ids).decode()
    assert "".join(chunks).startswith("Is it? It's fine,")
