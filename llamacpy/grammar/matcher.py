"""Grammars as token masks: llguidance computes, for each step, the tokens that keep the output
inside the grammar (llama.cpp: llama_sampler_grammar / its llguidance backend).

llguidance is the engine because it is well kept, small (one wheel, no torch), reads GBNF-like
Lark and JSON schemas itself, and computes a 150k-token mask in tens of microseconds; xgrammar
needs torch. The pieces here:
  - `Grammar`: a checked grammar, made from GBNF, a JSON schema or Lark;
  - `vocabulary(tokenizer)`: our tokenizer as llguidance sees it (built once per tokenizer);
  - `GrammarMask`: one generation's matcher, the engine's TokenMask;
  - `LazyGrammarMask`: a grammar that starts at a trigger string (tool calls).
"""

from __future__ import annotations

import codecs
import functools
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from ..tokenizer import ATTR_CONTROL, ATTR_UNKNOWN, Tokenizer
from .gbnf import GrammarError, parse_gbnf, to_lark, token_refs
from .json_schema import schema_grammar

_vocabularies: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_lock = threading.Lock()


class _TokenizerView:
    """What llguidance.TokenizerWrapper reads: each token's bytes (special tokens marked with a
    leading 0xff, llguidance's convention, so that text never matches them), the end tokens,
    and a tokenize function."""

    def __init__(self, tokenizer: Tokenizer):
        attrs = tokenizer.vocab.attrs
        self.tokens = []
        for i in range(tokenizer.n_vocab):
            piece = tokenizer.token_to_piece(i, special=True)
            self.tokens.append(b"\xff" + piece if attrs[i] & (ATTR_CONTROL | ATTR_UNKNOWN)
                               else piece)
        self.special_token_ids = [i for i, t in enumerate(self.tokens) if t[:1] == b"\xff"]
        self.eog = [i for i in range(tokenizer.n_vocab) if tokenizer.is_eog(i)]
        self.eos_token_id = self.eog[0] if self.eog else 0
        self.bos_token_id = None
        self._tokenizer = tokenizer

    def __call__(self, text: bytes) -> list[int]:
        return self._tokenizer.tokenize(text, add_special=False, parse_special=False)


def vocabulary(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """The tokenizer as llguidance needs it (about half a second for 150k tokens, so cached)."""
    import llguidance  # here, not at import: 2.6 MB of RSS that a run with no grammar never needs

    with _lock:
        vocab = _vocabularies.get(tokenizer)
        if vocab is None:
            view = _TokenizerView(tokenizer)
            vocab = llguidance.LLTokenizer(llguidance.TokenizerWrapper(view), eos_token=view.eog)
            _vocabularies[tokenizer] = vocab
        return vocab


def _token_id(tokenizer: Tokenizer):
    """<text> references: the one token whose text is exactly `text`."""
    def find(text: str) -> int | None:
        ids = tokenizer.tokenize(text, add_special=False, parse_special=True)
        return ids[0] if len(ids) == 1 else None
    return find


class Grammar:
    """A grammar checked when it is made; `mask(tokenizer)` starts one generation under it."""

    def __init__(self, lark: str | None = None, kind: str = "lark", rules=None,
                 checked: bool = False):
        self.kind = kind
        self._lark, self._rules = lark, rules  # GBNF with <text> references binds per tokenizer
        if lark is not None and not checked:
            _validate(lark)

    @classmethod
    def from_gbnf(cls, text: str) -> Grammar:
        rules = parse_gbnf(text)
        if any(t.text is not None for t in token_refs(rules)):
            return cls(kind="gbnf", rules=rules)
        return cls(to_lark(rules), "gbnf")

    @classmethod
    def from_json_schema(cls, schema: dict | str | bool) -> Grammar:
        return cls(schema_grammar(schema), "json_schema", checked=True)

    @classmethod
    def from_lark(cls, text: str) -> Grammar:
        return cls(text, "lark")

    def lark(self, tokenizer: Tokenizer) -> str:
        if self._lark is not None:
            return self._lark
        return to_lark(self._rules, _token_id(tokenizer))

    def mask(self, tokenizer: Tokenizer) -> GrammarMask:
        return GrammarMask(self.matcher(tokenizer), tokenizer.n_vocab)

    def matcher(self, tokenizer: Tokenizer) -> llguidance.LLMatcher:
        import llguidance

        matcher = llguidance.LLMatcher(vocabulary(tokenizer), self.lark(tokenizer), log_level=0)
        if matcher.is_error():
            raise GrammarError(matcher.get_error())
        return matcher

    def accepts(self, tokenizer: Tokenizer, text: str) -> bool:
        """Whether `text` is a complete match (the text's own tokens, fed to a matcher)."""
        matcher = self.matcher(tokenizer)
        tokens = tokenizer.tokenize(text, add_special=False, parse_special=False)
        return matcher.consume_tokens(tokens) and matcher.is_accepting()


def _validate(lark: str) -> None:
    import llguidance

    error = llguidance.LLMatcher.validate_grammar(lark)
    if error:
        raise GrammarError(error)


class GrammarMask:
    """The engine's TokenMask for one generation: the allowed tokens as a bool array.

    The next mask depends only on the tokens taken so far, so `accept` starts computing it on
    a helper thread (llguidance releases the GIL) while the model decodes that token; `allowed`
    then mostly finds it ready. The matcher is never touched by two threads at once."""

    def __init__(self, matcher: llguidance.LLMatcher, n_vocab: int):
        self.matcher, self.n_vocab = matcher, n_vocab
        self._bits = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._next: Future | None = None
        self._stopped = matcher.is_stopped()

    def _compute(self) -> None:
        m = self.matcher
        if m.is_error():
            raise GrammarError(f"grammar: {m.get_error()}")
        m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)

    def allowed(self) -> np.ndarray | None:
        if self._next is not None:
            self._next, pending = None, self._next
            pending.result()
        else:
            self._compute()
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
        return bits[: self.n_vocab].view(bool)

    def accept(self, token: int) -> None:
        self.accept_tokens([int(token)])

    def accept_tokens(self, tokens: list[int]) -> None:
        if self._next is not None:  # a mask computed but not used (a forced token)
            self._next, pending = None, self._next
            pending.exception()
        if not self.matcher.consume_tokens(tokens):
            raise GrammarError(f"grammar: the output does not fit: {self.matcher.get_error()}")
        self._stopped = self.matcher.is_stopped()
        if not self._stopped:
            self._next = _mask_thread().submit(self._compute)

    def is_finished(self) -> bool:
        return self._stopped


@functools.cache
def _mask_thread() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(1, thread_name_prefix="grammar-mask")


class LazyGrammarMask:
    """A grammar that applies only once its start shows in the generated text (llama.cpp's
    lazy grammar, used for tool calls): the text before is free; `find(text)` says where the
    grammar starts in the text so far (None: not yet). From there the matcher is given the
    text from that point and constrains every token after."""

    def __init__(self, grammar: Grammar, tokenizer: Tokenizer,
                 find: Callable[[str], int | None]):
        self.tokenizer, self.find = tokenizer, find
        self.text = ""  # generated so far, until the grammar starts
        self._decode = codecs.getincrementaldecoder("utf-8")("replace")
        self.active: GrammarMask | None = None
        self.given_up = False
        # compiled now, so that a grammar error shows before the request is queued
        self._matcher: llguidance.LLMatcher | None = grammar.matcher(tokenizer)

    def allowed(self) -> np.ndarray | None:
        return self.active.allowed() if self.active is not None else None

    def accept(self, token: int) -> None:
        if self.active is not None:
            return self.active.accept(token)
        if self.given_up:
            return
        self.text += self._decode.decode(self.tokenizer.token_to_piece(int(token), special=True))
        start = self.find(self.text)
        if start is None:
            return
        matcher, self._matcher = self._matcher, None
        tail = self.tokenizer.tokenize(self.text[start:], add_special=False, parse_special=False)
        if not matcher.consume_tokens(tail):
            # the model wrote something the grammar cannot continue before it could apply:
            # no constraint can mend that, so the rest stays free (llama.cpp fails the request)
            self.given_up = True
            return
        self.active = GrammarMask(matcher, self.tokenizer.n_vocab)

    def is_finished(self) -> bool:
        return self.active is not None and self.active.is_finished()


def trigger_finder(triggers: list[str]) -> Callable[[str], int | None]:
    """`find` for LazyGrammarMask: the first of these words, anywhere in the text."""
    def find(text: str) -> int | None:
        hits = [i for i in (text.find(t) for t in triggers) if i >= 0]
        return min(hits) if hits else None
    return find
