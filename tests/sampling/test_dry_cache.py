"""DRY's sequence-breaker tables are cached per tokenizer, but each request may send its own
breakers: the cache stays bounded, and a table rebuilt after eviction is the same."""

from __future__ import annotations

from llamacpy.sampling import Sampler, SamplingParams
from llamacpy.sampling import sampler as sampler_module
from llamacpy.tokenizer import Tokenizer


def test_breaker_tables_are_bounded():
    tok = Tokenizer.from_gguf("tests/golden/tiny_hf/llama.gguf")
    first = None
    for i in range(sampler_module.DRY_TABLES_KEPT + 8):
        params = SamplingParams(dry_multiplier=0.8, dry_sequence_breakers=[f"x{i}", "\n"])
        dry = next(s for s in Sampler(params, tok).steps if type(s).__name__ == "Dry")
        table = dry.breakers if first is None else None
        first = first or table
    tables = sampler_module._DRY_TABLES[tok]["tables"]
    assert first and len(tables) == sampler_module.DRY_TABLES_KEPT
    assert ("x0", "\n") not in tables
    again = sampler_module._tokenizer_breakers(tok, ["x0", "\n"])
    assert again == first
