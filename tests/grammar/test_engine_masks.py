"""Grammars inside the generation core, on the stub model (scripted logits): the mask overrides
what the model prefers, ends generation when the grammar allows nothing more, and a lazy grammar
starts only where its trigger appears; llama.cpp's grammar_triggers forms."""

from __future__ import annotations

import re

import pytest

from llamacpy.grammar import Grammar, LazyGrammarMask, trigger_finder
from llamacpy.server.params import RequestError
from llamacpy.server.params import trigger_finder as request_trigger_finder
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


@pytest.mark.parametrize("triggers, text, start", [
    ([{"type": 1, "value": "<call>"}], "ab <call> x", 3),
    ([{"type": 1, "value": "<call>"}], "ab <cal", None),
    ([{"type": 2, "value": r"x(<c>)"}], "abx<c>", 3),  # the first group's start
    ([{"type": 2, "value": r"\d+"}], "ab12", 2),
    ([{"type": 3, "value": r"\s*\{.*"}], " {\"a\"", 0),
    ([{"type": 3, "value": r"\{.*"}], "a{", None),  # must match the whole text
    ([{"type": 0, "token": 5}], "..T5..", 2),
])
def test_grammar_triggers_as_llama_cpp_reads_them(triggers, text, start):
    find = request_trigger_finder(triggers, lambda t: f"T{t}")
    assert find(text) == start


@pytest.mark.parametrize("triggers", [[{"type": 1}], [{"type": 0}], [{"type": 2, "value": "("}]])
def test_bad_triggers_are_refused(triggers):
    with pytest.raises(RequestError):
        request_trigger_finder(triggers, str)
