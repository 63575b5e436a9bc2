"""The simulator's JSON schema instances (``rrcli.sim.schema_instance``): what a simulated tool
call's arguments and a simulated structured output contain."""

from __future__ import annotations

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from rrcli.sim.schema_instance import instance

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 3},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
        "detailed": {"type": "boolean"},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}


def test_an_instance_is_valid_and_the_same_for_the_same_seed() -> None:
    """A tool's parameters schema gives a valid object with every property, enums at their
    first value; the same seed the same object, another seed other values."""
    one, again, other = instance(WEATHER, 3), instance(WEATHER, 3), instance(WEATHER, 4)
    jsonschema.validate(one, WEATHER)
    assert one == again
    assert one != other
    assert ({"city", "unit", "days", "detailed"}, "celsius") == (set(one), one["unit"])


def test_refs_unions_all_of_and_formats_are_followed() -> None:
    """Local ``$ref`` pointers, the first non-null ``anyOf`` branch, ``allOf`` merged, ``const``,
    nullable type lists and common string formats give valid values."""
    schema = {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        "type": "object",
        "properties": {
            "at": {"$ref": "#/$defs/point"},
            "email": {"anyOf": [{"type": "null"}, {"type": "string", "format": "email"}]},
            "both": {
                "allOf": [
                    {"properties": {"a": {"type": "integer", "multipleOf": 5}}},
                    {"properties": {"b": {"const": "fixed"}}, "required": ["b"]},
                ]
            },
            "when": {"type": ["string", "null"], "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
        },
        "required": ["at", "email", "both", "when", "id"],
    }
    value = instance(schema, 11)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    assert ("fixed", "2024-01-01T00:00:00Z") == (value["both"]["b"], value["when"])
    assert value["email"].endswith("@example.com")


def test_arrays_and_numbers_keep_their_bounds() -> None:
    """minItems/maxItems, prefixItems, exclusive bounds and multipleOf are kept."""
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 4},
            "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "boolean"}]},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "step": {"type": "number", "multipleOf": 0.25, "minimum": 2},
            "short": {"type": "string", "maxLength": 2},
        },
    }
    value = instance(schema, 2)
    jsonschema.validate(value, schema)
    assert (3, 2) == (len(value["tags"]), len(value["pair"]))


def test_a_recursive_schema_ends() -> None:
    """A schema that refers to itself gives a finite value (the recursion stops at a depth)."""
    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            }
        },
        "$ref": "#/$defs/node",
    }
    jsonschema.validate(instance(schema, 0), schema)


_LEAVES = st.sampled_from(
    [
        {"type": "string"},
        {"type": "string", "minLength": 5, "maxLength": 9},
        {"type": "integer", "minimum": -3, "maximum": 3},
        {"type": "number", "exclusiveMinimum": 10},
        {"type": "boolean"},
        {"type": "null"},
        {"enum": ["a", 1, None]},
        {"type": ["integer", "null"]},
        {"type": "string", "format": "date"},
    ]
)
_SCHEMAS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.builds(
            lambda props, n: {
                "type": "object",
                "properties": props,
                "required": sorted(props)[:n],
                "additionalProperties": False,
            },
            st.dictionaries(st.text("abcdef", min_size=1, max_size=4), inner, max_size=4),
            st.integers(0, 4),
        ),
        st.builds(
            lambda items, lo: {"type": "array", "items": items, "minItems": lo},
            inner,
            st.integers(0, 3),
        ),
        st.builds(lambda a, b: {"anyOf": [a, b]}, inner, inner),
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(_SCHEMAS, st.integers(0, 2**32))
def test_every_instance_validates_against_its_schema(schema: dict, seed: int) -> None:
    """For any schema built of objects, arrays, unions and bounded leaves, and any seed, the
    instance is valid."""
    jsonschema.validate(instance(schema, seed), schema)
