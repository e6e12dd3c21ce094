"""JSON schemas for constrained generation with a real model (test_constrained_generation.py).

Each case is a schema whose valid outputs are short (every string has a maxLength, every array
a maxItems, every object a closed set of keys), so a generation is expected to end by the
grammar (stop type "eos"), not by the token limit. `task` is what the prompt asks for; the
schema itself is shown to the model too. Where llama.cpp reads a schema differently from JSON
Schema, the note says so: an object with `properties` and no `additionalProperties` allows no
other keys (common/json-schema-to-grammar.cpp), which `closed()` applies before validating.
"""

from __future__ import annotations

from typing import NamedTuple


class SchemaCase(NamedTuple):
    name: str
    schema: dict
    task: str


def s(max_length: int, min_length: int = 0, **kw) -> dict:
    """A bounded string."""
    return {"type": "string", "minLength": min_length, "maxLength": max_length, **kw}


def obj(properties: dict, required: list[str] | None = None, **kw) -> dict:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required, **kw}


POINT = obj({"x": {"type": "integer", "minimum": -100, "maximum": 100},
             "y": {"type": "integer", "minimum": -100, "maximum": 100}})

CASES = [
    SchemaCase("person_required_optional", obj(
        {"name": s(24, 1), "age": {"type": "integer", "minimum": 0, "maximum": 120},
         "city": s(20)}, required=["name", "age"]), "a person"),
    SchemaCase("all_optional", obj(
        {"nickname": s(12), "score": {"type": "integer", "minimum": 0, "maximum": 10}},
        required=[]), "a player, any fields you like"),
    SchemaCase("additional_properties_default_closed", obj(
        {"id": {"type": "integer", "minimum": 1, "maximum": 999}, "label": s(10)}),
        "an item with an id and a label, and a price"),
    SchemaCase("additional_properties_false", obj(
        {"id": {"type": "integer", "minimum": 1, "maximum": 999}}, additionalProperties=False),
        "a record"),
    SchemaCase("additional_properties_schema", obj(
        {"name": s(10, 1)}, additionalProperties={"type": "integer", "minimum": 0,
                                                  "maximum": 9}, maxProperties=3),
        "a fruit basket: its name and the count of up to two fruits"),
    SchemaCase("pattern_properties", {
        "type": "object", "maxProperties": 3, "additionalProperties": False,
        "patternProperties": {"^[a-z]{1,8}$": {"type": "integer", "minimum": 0, "maximum": 9}}},
        "stock counts of up to three fruits"),
    SchemaCase("enums", obj(
        {"color": {"enum": ["red", "green", "blue"]},
         "size": {"enum": ["S", "M", "L", None, 42]}}), "a t-shirt"),
    SchemaCase("const", obj(
        {"version": {"const": 2}, "kind": {"const": "point"},
         "tags": {"const": ["a", "b"]}, "x": {"type": "integer", "minimum": 0, "maximum": 9}}),
        "a versioned point"),
    SchemaCase("integer_bounds", obj(
        {"a": {"type": "integer", "minimum": -5, "maximum": 5},
         "b": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 100},
         "c": {"type": "integer", "minimum": 1000, "maximum": 1010}}), "three numbers"),
    SchemaCase("number_bounds", obj(
        {"p": {"type": "number", "minimum": 0, "maximum": 1},
         "t": {"type": "number", "exclusiveMinimum": -10, "exclusiveMaximum": 10}}),
        "a probability and a temperature"),
    SchemaCase("string_lengths", obj(
        {"code": s(6, 3), "tag": s(4, 1), "note": s(16)}), "a product code and a tag"),
    SchemaCase("pattern_root", {"type": "string", "pattern": "^(ab|cd){1,3}-[0-9]{2,4}$"},
               "an identifier"),
    SchemaCase("patterns_in_object", obj(
        {"phone": {"type": "string", "pattern": "^\\([0-9]{3}\\) [0-9]{3}-[0-9]{4}$"},
         "sku": {"type": "string", "pattern": "^[A-Z]{2,3}(-[0-9]{1,2})?$"},
         "hex": {"type": "string", "pattern": "^#([0-9a-f]{3}|[0-9a-f]{6})$"}}),
        "a phone number, a stock code and a colour"),
    SchemaCase("formats", obj(
        {"day": {"type": "string", "format": "date"},
         "at": {"type": "string", "format": "date-time"},
         "clock": {"type": "string", "format": "time"},
         "id": {"type": "string", "format": "uuid"}}), "an appointment"),
    SchemaCase("email", obj({"email": {"type": "string", "format": "email", "maxLength": 32}}),
               "a contact"),
    SchemaCase("array_root_bounds", {
        "type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99},
        "minItems": 2, "maxItems": 4}, "a few lottery numbers"),
    SchemaCase("nested_array_of_objects", obj({"order": {
        "type": "array", "minItems": 1, "maxItems": 3,
        "items": obj({"name": s(10, 1), "qty": {"type": "integer", "minimum": 1, "maximum": 9},
                      "sizes": {"type": "array", "items": {"enum": ["S", "M", "L"]},
                                "maxItems": 2}})}}), "a shopping order"),
    SchemaCase("any_of_scalars", {"anyOf": [
        {"type": "integer", "minimum": 0, "maximum": 9}, s(6), {"type": "boolean"}]},
        "an answer"),
    SchemaCase("one_of", obj({"v": {"oneOf": [
        {"type": "integer", "minimum": 10, "maximum": 99},
        {"type": "string", "enum": ["none", "many"]}]}}), "how many"),
    SchemaCase("all_of_scalars", {"allOf": [
        {"type": "integer", "minimum": 1}, {"type": "integer", "maximum": 9}]},
        "a digit"),
    SchemaCase("any_of_objects_by_const", obj({"shape": {"anyOf": [
        obj({"kind": {"const": "circle"}, "r": {"type": "integer", "minimum": 1, "maximum": 50}}),
        obj({"kind": {"const": "rect"}, "w": {"type": "integer", "minimum": 1, "maximum": 50},
             "h": {"type": "integer", "minimum": 1, "maximum": 50}})]}}), "a shape"),
    SchemaCase("type_lists", obj(
        {"middle_name": {"type": ["string", "null"], "maxLength": 10},
         "count": {"type": ["integer", "boolean"], "minimum": 0, "maximum": 9}}),
        "a name record"),
    SchemaCase("refs_to_defs", {
        "$defs": {"point": POINT}, "type": "object",
        "properties": {"start": {"$ref": "#/$defs/point"}, "end": {"$ref": "#/$defs/point"}},
        "required": ["start", "end"]}, "a line segment"),
    SchemaCase("tuple_prefix_items", {
        "type": "array", "prefixItems": [s(8, 1), {"type": "integer", "minimum": 0,
                                                    "maximum": 9}, {"type": "boolean"}],
        "items": False, "minItems": 3}, "a name, a digit and a flag"),
    SchemaCase("string_root", s(12, 2), "a city"),
    SchemaCase("integer_root", {"type": "integer", "minimum": 1, "maximum": 1000},
               "a number of pages"),
    SchemaCase("enum_root", {"enum": ["alpha", "beta", "gamma"]}, "a release stage"),
    SchemaCase("boolean_root", {"type": "boolean"}, "is water wet"),
    SchemaCase("nested_objects", obj({
        "user": obj({"name": s(12, 1), "admin": {"type": "boolean"}}),
        "meta": obj({"created": {"type": "string", "format": "date"}, "rev": {
            "type": "integer", "minimum": 0, "maximum": 99}}, required=["rev"])}),
        "a user account"),
]

BY_NAME = {c.name: c for c in CASES}

# the few that go through the chat endpoint and the Python API instead of /completion
CHAT_JSON_OBJECT = ["person_required_optional", "any_of_objects_by_const"]
CHAT_JSON_SCHEMA = ["nested_array_of_objects", "formats"]
PYTHON_API = ["refs_to_defs", "enums"]


def closed(schema):
    """llama.cpp's reading as plain JSON Schema: an object schema with `properties` and no
    `additionalProperties` gets `additionalProperties: false` (written here, independently of
    llamacpy.grammar.json_schema, which does the same for the grammar)."""
    if isinstance(schema, list):
        return [closed(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) if k not in ("const", "enum") else v for k, v in schema.items()}
    for key in ("properties", "patternProperties", "$defs"):
        if isinstance(schema.get(key), dict):
            out[key] = {k: closed(v) for k, v in schema[key].items()}
    if "properties" in schema and "additionalProperties" not in schema:
        out["additionalProperties"] = False
    return out
