"""A deterministic valid instance of a JSON schema: the arguments of a simulated tool call and the
content of a simulated structured output.

``instance(schema, seed)`` walks the schema the way a model's constrained decoder would: ``const``
and the first ``enum`` value, the first branch of ``anyOf``/``oneOf``, ``allOf`` merged, local
``$ref`` pointers (``#/$defs/...``), the first non-null of a list of types, every declared property
of an object (and any required one it does not declare), ``minItems`` items of an array (at least
one, at most ``maxItems``), numbers inside their bounds and on their ``multipleOf``, strings of the
simulator's words within ``minLength``/``maxLength`` and in the shape of common ``format``\\ s.
``pattern`` is not honoured. The same schema and seed give the same value; another seed other
words and numbers. Pure: no clock, no randomness but the seed.
"""

from __future__ import annotations

import math
import uuid
from typing import Any

from rrcli.sim.behaviour import WORDS

__all__ = ["instance"]

_MAX_DEPTH = 12  # a recursive $ref ends here with the least value of its type
_FORMATS = {
    "date-time": "2024-01-01T00:00:00Z",
    "date": "2024-01-01",
    "time": "00:00:00Z",
    "duration": "P1D",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
}
_LEAST = {"object": {}, "array": [], "string": "", "integer": 0, "number": 0, "boolean": False}


def instance(schema: Any, seed: int = 0) -> Any:
    """A value valid against ``schema`` (a JSON schema as parsed JSON), the same for the same
    seed."""
    return _Walk(schema, seed).value(schema, 0)


class _Walk:
    """One walk over a schema: the root (for ``$ref``) and a counter that varies the leaves."""

    __slots__ = ("count", "root", "seed")

    def __init__(self, root: Any, seed: int) -> None:
        self.root, self.seed, self.count = root, seed, 0

    def value(self, schema: Any, depth: int) -> Any:
        schema = self.resolve(schema, 0)
        if not isinstance(schema, dict):
            return None if schema is False else self.word()
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        kind = _kind(schema)
        if depth >= _MAX_DEPTH:
            return _LEAST.get(kind)
        if kind == "object":
            return self.object(schema, depth)
        if kind == "array":
            return self.array(schema, depth)
        if kind in ("integer", "number"):
            return self.number(schema, kind == "integer")
        if kind == "boolean":
            return self.tick() % 2 == 0
        if kind == "null":
            return None
        return self.string(schema)

    def resolve(self, schema: Any, hops: int) -> Any:
        """``schema`` with its ``$ref`` followed and its first ``anyOf``/``oneOf`` branch and its
        ``allOf`` parts merged in (``hops`` bounds a loop of references)."""
        if hops > _MAX_DEPTH:
            return {}
        for _ in range(_MAX_DEPTH):
            if not isinstance(schema, dict):
                return schema
            if isinstance(schema.get("$ref"), str):
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = {**self.pointer(schema["$ref"]), **rest}
                continue
            for key in ("anyOf", "oneOf"):
                branches = schema.get(key)
                if isinstance(branches, list) and branches:
                    rest = {k: v for k, v in schema.items() if k != key}
                    schema = _merge(rest, self.resolve(_first_not_null(branches), hops + 1))
                    break
            else:
                parts = schema.get("allOf")
                if not isinstance(parts, list):
                    return schema
                schema = {k: v for k, v in schema.items() if k != "allOf"}
                for part in parts:
                    schema = _merge(schema, self.resolve(part, hops + 1))
        return schema

    def pointer(self, ref: str) -> Any:
        """The local schema ``ref`` points at (``#/$defs/x``); an empty schema elsewhere."""
        if not ref.startswith("#"):
            return {}
        node = self.root
        for raw in ref[1:].split("/")[1:]:
            key = raw.replace("~1", "/").replace("~0", "~")
            node = node.get(key) if isinstance(node, dict) else None
        return node if isinstance(node, dict) else {}

    def object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        out = {n: self.value(s, depth + 1) for n, s in properties.items() if s is not False}
        required = schema.get("required")
        for name in required if isinstance(required, list) else ():
            if isinstance(name, str) and name not in out:
                extra = schema.get("additionalProperties")
                out[name] = self.value(extra if isinstance(extra, dict) else {}, depth + 1)
        extra = schema.get("additionalProperties")
        while len(out) < _int(schema.get("minProperties"), 0):
            out[f"{self.word()}_{len(out)}"] = self.value(
                extra if isinstance(extra, dict) else {}, depth + 1
            )
        return out

    def array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items")
        if isinstance(items, list):  # draft 4-7 tuple form
            prefix, items = items, schema.get("additionalItems")
        least = _int(schema.get("minItems"), 0)
        most = _int(schema.get("maxItems"), max(least, len(prefix), 1))
        count = min(max(least, len(prefix), 1), most)
        out = [self.value(sub, depth + 1) for sub in prefix[:count]]
        while len(out) < count:
            out.append(self.value(items if items is not None else {}, depth + 1))
        return out

    def number(self, schema: dict[str, Any], integer: bool) -> int | float:
        low, high = _bounds(schema, integer)
        step = schema.get("multipleOf")
        step = step if isinstance(step, (int, float)) and step > 0 else (1 if integer else 0.5)
        wanted = (self.tick() % 9 + 1) * step
        low_k = math.ceil(low / step) if low is not None else None
        high_k = math.floor(high / step) if high is not None else None
        k = round(wanted / step)
        if low_k is not None and k < low_k:
            k = low_k
        if high_k is not None and k > high_k:
            k = high_k
        for candidate in range(k, k + 10 if high_k is None else min(k + 10, high_k + 1)):
            if (candidate * step) / step == candidate:  # a float step may not divide back
                k = candidate
                break
        value = k * step
        return int(value) if integer else float(value)

    def string(self, schema: dict[str, Any]) -> str:
        fmt = schema.get("format")
        if fmt in _FORMATS:
            return _FORMATS[fmt]
        word = self.word()
        if fmt == "email":
            return f"{word}@example.com"
        if fmt in ("uri", "url", "iri"):
            return f"https://example.com/{word}"
        if fmt == "hostname":
            return f"{word}.example.com"
        if fmt == "uuid":
            return str(uuid.UUID(int=(self.seed * 1_000_003 + self.count) % (1 << 128)))
        least = _int(schema.get("minLength"), 0)
        text = word
        while len(text) < least:
            text += " " + self.word()
        most = schema.get("maxLength")
        return text[:most] if isinstance(most, int) and most >= 0 else text

    def word(self) -> str:
        return WORDS[(self.seed * 7 + self.tick() * 13) % len(WORDS)]

    def tick(self) -> int:
        self.count += 1
        return self.seed + self.count


def _kind(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        return kinds[0] if kinds else "null"
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return "string"


def _merge(a: dict[str, Any], b: Any) -> dict[str, Any]:
    """Two schemas that must both hold, as one (properties and required lists joined)."""
    if not isinstance(b, dict):
        return a
    out = {**a, **b}
    if isinstance(a.get("properties"), dict) and isinstance(b.get("properties"), dict):
        out["properties"] = {**a["properties"], **b["properties"]}
    if isinstance(a.get("required"), list) and isinstance(b.get("required"), list):
        out["required"] = list(dict.fromkeys(a["required"] + b["required"]))
    return out


def _first_not_null(branches: list[Any]) -> Any:
    for branch in branches:
        if not (isinstance(branch, dict) and branch.get("type") == "null"):
            return branch
    return branches[0]


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _bounds(schema: dict[str, Any], integer: bool) -> tuple[float | None, float | None]:
    """The inclusive bounds of a number (an exclusive bound moved inside by a little)."""
    nudge = 1 if integer else 1e-3
    low, high = schema.get("minimum"), schema.get("maximum")
    x_low, x_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if x_low is True and isinstance(low, (int, float)):  # draft 4 booleans
        low += nudge
    elif isinstance(x_low, (int, float)) and not isinstance(x_low, bool):
        low = x_low + nudge if low is None else max(low, x_low + nudge)
    if x_high is True and isinstance(high, (int, float)):
        high -= nudge
    elif isinstance(x_high, (int, float)) and not isinstance(x_high, bool):
        high = x_high - nudge if high is None else min(high, x_high - nudge)
    low = low if isinstance(low, (int, float)) and not isinstance(low, bool) else None
    high = high if isinstance(high, (int, float)) and not isinstance(high, bool) else None
    return low, high
