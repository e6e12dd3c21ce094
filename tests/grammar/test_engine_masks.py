"""Grammars inside the generation core, on the stub model (scripted logits): the mask overrides
what the model prefers, ends generation when the grammar allows nothing more, and a lazy grammar
starts only where its trigger appears, or not at all if the text there cannot fit it;
llama.cpp's grammar_triggers forms."""

from __future__ import annotations

import re

import pytest

from llamacpy.grammar import Grammar, LazyGrammarMask, trigger_finder
from llamacpy.server.params import NotSupported, RequestError, trigger_words
from tests.engine.test_scheduler import make, request, run_one, words


def test_the_grammar_beats_the_model_and_ends_generation():
    sched, tok = make(lambda h: 300)  # the model wants token 300 forever
    mask = Grammar.from_gbnf('root ::= "yes" | "no"').mask(tok)
    text, tokens, done = run_one(sched, request([1], token_mask=mask, n_predict=50))
    assert text in ("yes", "no") and done["stop_type"] == "eos", (text, done)
    assert 300 not in tokens


def test_a_grammar_cut_by_the_limit_reports_it():
    seven = words(make(lambda h: 0)[1], "7")[0]
    sched, tok = make(lambda h: seven)
    mask = Grammar.from_gbnf("root ::= [0-9]+").mask(tok)
    text, _, done = run_one(sched, request([1], token_mask=mask, n_predict=6))
    assert re.fullmatch(r"[0-9]+", text) and done["stop_type"] == "limit"


def test_a_lazy_grammar_starts_at_its_trigger():
    tok0 = make(lambda h: 300)[1]
    free = words(tok0, "say <n>")
    sched, tok = make(lambda h: free[len(h) - 1] if len(h) - 1 < len(free) else 300)
    grammar = Grammar.from_gbnf('root ::= "<n>" [0-9]{2} "</n>"')
    mask = LazyGrammarMask(grammar, tok, trigger_finder(["<n>"]))
    text, _, done = run_one(sched, request([1], token_mask=mask, n_predict=40))
    assert text.startswith("say <n>"), text  # free text up to and with the trigger
    assert re.fullmatch(r"say <n>[0-9]{2}</n>", text) and done["stop_type"] == "eos", text


def test_without_its_trigger_a_lazy_grammar_never_applies():
    sched, tok = make(lambda h: 300)
    free_text, _, _ = run_one(sched, request([1], n_predict=5))
    mask = LazyGrammarMask(Grammar.from_gbnf('root ::= "<n>" [0-9]'), tok,
                           trigger_finder(["<n>"]))
    text, _, done = run_one(make(lambda h: 300)[0], request([1], token_mask=mask, n_predict=5))
    assert text == free_text and done["stop_type"] == "limit"


def test_a_lazy_grammar_the_text_cannot_fit_leaves_generation_free():
    """The model wrote past the trigger something the grammar cannot continue: no mask can mend
    it, so the request goes on unconstrained instead of failing."""
    tok0 = make(lambda h: 300)[1]
    free = words(tok0, "The end")
    script = lambda h: free[len(h) - 1] if len(h) - 1 < len(free) else 300  # noqa: E731
    plain, _, _ = run_one(make(script)[0], request([1], n_predict=12))
    sched, tok = make(script)
    assert tok.token_to_piece(free[0]) == b"The"  # one token: it overshoots the trigger "Th"
    mask = LazyGrammarMask(Grammar.from_gbnf('root ::= "Th!"'), tok, trigger_finder(["Th"]))
    text, _, done = run_one(sched, request([1], token_mask=mask, n_predict=12))
    assert text == plain and text.startswith("The end") and done["stop_type"] == "limit"
    assert mask.given_up and mask.allowed() is None


@pytest.mark.parametrize("triggers, text, start", [
    ([{"type": 1, "value": "<call>"}], "ab <call> x", 3),
    ([{"type": 1, "value": "<call>"}], "ab <cal", None),
    ([{"type": 1, "value": "b"}, {"type": 0, "token": 5}], "..T5..b", 2),  # the first of them
    ([{"type": 0, "token": 5}], "..T5..", 2),
])
def test_grammar_triggers_as_llama_cpp_reads_them(triggers, text, start):
    find = trigger_finder(trigger_words(triggers, lambda t: f"T{t}"))
    assert find(text) == start


@pytest.mark.parametrize("triggers", [[{"type": 1}], [{"type": 0}]])
def test_bad_triggers_are_refused(triggers):
    with pytest.raises(RequestError) as e:
        trigger_words(triggers, str)
    assert e.value.kind == "invalid_request_error"


@pytest.mark.parametrize("kind", [2, 3])
def test_pattern_triggers_are_refused(kind):
    """A user's regex over the growing output, at every token, in the engine thread, could
    backtrack for ever: refused, not run."""
    with pytest.raises(NotSupported):
        trigger_words([{"type": kind, "value": "(a+)+b"}], str)
