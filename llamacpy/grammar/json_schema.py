"""JSON schemas as grammars, with llama.cpp's reading of a schema (common/json-schema.cpp,
json-schema-to-grammar.cpp) where it differs from llguidance's defaults:
  - an object schema with `properties` and no `additionalProperties` allows no other keys
    (JSON Schema itself, and llguidance, would allow any);
  - whitespace between tokens is llama.cpp's `space` rule: nothing, one space, or one or two
    newlines and up to 20 spaces or tabs, so a sampled reply cannot run on in whitespace.
llguidance compiles the schema; keywords it does not implement are an error, not ignored.
"""

from __future__ import annotations

import json

from .gbnf import GrammarError

# llama.cpp's SPACE_RULE: | " " | "\n"{1,2} [ \t]{0,20}
WHITESPACE = r"(?: |\n{1,2}[ \t]{0,20})?"

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_ONE = ("additionalProperties", "items", "not", "if", "then", "else", "contains",
               "propertyNames", "unevaluatedProperties", "additionalItems")


def load_schema(schema: dict | str | bool) -> dict | bool:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise GrammarError(f"the JSON schema is not valid JSON: {e.msg}", e.lineno,
                               e.colno) from None
    if not isinstance(schema, (dict, bool)):
        raise GrammarError(f"a JSON schema must be an object or a boolean, not "
                           f"{type(schema).__name__}")
    return schema


def closed_objects(schema):
    """A copy where objects with `properties` and no `additionalProperties` allow no others, and
    an allOf of plain object schemas is merged into one object first, as llama.cpp merges it
    (closing each part before JSON Schema's intersection would leave only {})."""
    return _close(schema, schema)


_MERGEABLE = {"type", "properties", "required", "additionalProperties", "title", "description",
              "$comment"}


def _close(schema, root, close: bool = True):
    if isinstance(schema, list):
        return [_close(s, root) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = _merge_all_of(dict(schema), root)
    if isinstance(out.get("prefixItems"), dict):  # llama.cpp reads it as `items`
        out.setdefault("items", out.pop("prefixItems"))
    for key in _SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: _close(v, root) for k, v in out[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(out.get(key), list):  # allOf parts left open: they intersect
            out[key] = [_close(s, root, close=key != "allOf") for s in out[key]]
    for key in _SCHEMA_ONE:
        if key in out:
            out[key] = _close(out[key], root)
    if close and isinstance(out.get("properties"), dict) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def _merge_all_of(schema: dict, root) -> dict:
    parts = schema.get("allOf")
    if not isinstance(parts, list):
        return schema
    resolved = [_local_ref(p, root) for p in parts]
    if not all(isinstance(p, dict) and set(p) <= _MERGEABLE and p.get("type", "object") ==
               "object" for p in resolved) or schema.get("type", "object") != "object":
        return schema
    del schema["allOf"]
    schema["type"] = "object"
    properties = dict(schema.get("properties") or {})
    required = list(schema.get("required") or [])
    for part in resolved:
        properties.update(part.get("properties") or {})
        required += [r for r in part.get("required") or [] if r not in required]
        if "additionalProperties" in part and "additionalProperties" not in schema:
            schema["additionalProperties"] = part["additionalProperties"]
    schema["properties"] = properties
    if required:
        schema["required"] = required
    return schema


def _local_ref(schema, root):
    """A `#/...` reference followed within the root schema (others are left to llguidance)."""
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/") or len(schema) != 1:
        return schema
    node = root
    for key in ref[2:].split("/"):
        if not isinstance(node, dict) or key not in node:
            return schema
        node = node[key]
    return node


def schema_grammar(schema: dict | str | bool) -> str:
    """The llguidance grammar for a JSON schema; GrammarError for one it cannot enforce."""
    import llguidance  # here, not at import: see matcher.vocabulary

    schema = closed_objects(load_schema(schema))
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema, defaults={"whitespace_pattern": WHITESPACE})
    except ValueError as e:
        raise GrammarError(str(e)) from None
    error = llguidance.LLMatcher.validate_grammar(grammar)
    if error:
        raise GrammarError(error)
    return grammar


def schema_lark(schema: dict | str | bool) -> str:
    """The schema as a Lark `%json` item, for grammars that embed a JSON value (tool calls)."""
    return "%json " + json.dumps(closed_objects(load_schema(schema)))
