"""Constrained generation: GBNF grammars and JSON schemas as token masks (llguidance)."""

from .gbnf import GrammarError, parse_gbnf
from .json_schema import schema_grammar, schema_lark
from .matcher import Grammar, GrammarMask, LazyGrammarMask, trigger_finder, vocabulary

__all__ = ["Grammar", "GrammarError", "GrammarMask", "LazyGrammarMask", "parse_gbnf",
           "schema_grammar", "schema_lark", "trigger_finder", "vocabulary"]
