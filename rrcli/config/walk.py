"""The walk of a profile document against the schema, collecting every diagnostic.

``Checker`` holds what one check of a document has found. Its walk over a table reports unknown
keys (with a "did you mean"), wrong types (naming the expected type; a bool is not an int),
values outside their choices and values that break their field's rule, and keeps the good
values, so the rules that span fields see only values that passed. Each diagnostic carries the
line of its key and the id of the backend its path points at.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Mapping
from typing import Any

from rrcli.config._toml_lines import key_lines, line_for
from rrcli.config.schema import (
    BACKEND,
    CREDENTIALS,
    EXPECTED,
    FRAMING_HEADERS,
    HEADER_NAME,
    KEY_HEADERS,
    PRICE,
    SIM,
    Field,
    join,
    kind_of,
    show,
    type_ok,
    unquote,
)
from rrcli.diagnostic import Diagnostic, closest

__all__ = ["Checker"]

_BACKEND_PATH = re.compile(r"backends\[(\d+)\]")


class Checker:
    """Collects diagnostics, each with its line and the backend id its path points at."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.lines = key_lines(text)
        self.ids: dict[int, str] = {}
        self.bad: set[str] = set()  # paths whose value was reported (so no cascade)
        self.diagnostics: list[Diagnostic] = []

    def add(self, severity: str, path: str, message: str, fix: str = "", code: str = "") -> None:
        match = _BACKEND_PATH.match(path)
        backend_id = self.ids.get(int(match[1])) if match else None
        line = line_for(self.lines, path)
        self.bad.add(path)
        self.diagnostics.append(
            Diagnostic(
                severity=severity,
                path=path,
                message=message,
                fix=fix,
                source=self.source,
                line=line,
                code=code,
                backend_id=backend_id,
            )
        )

    def reported(self, path: str) -> bool:
        """Whether ``path`` or a key under it was reported already."""
        return any(p == path or p.startswith(path + ".") for p in self.bad)

    def table(self, raw: Mapping[str, Any], spec: Mapping[str, Field], path: str) -> dict:
        """The good values of ``raw``; every unknown key, wrong type and bad value reported."""
        good = {}
        for key, value in raw.items():
            field = spec.get(key)
            if field is None:
                self.unknown(join(path, key), key, spec, path)
            elif self.value(join(path, key), key, value, field):
                good[key] = value
        return good

    def unknown(self, path: str, key: str, spec: Mapping[str, Field], parent: str) -> None:
        close = closest(key, spec)
        if not parent and key in BACKEND:
            fix = "backend fields go in [defaults] or in a [[backends]] table"
        elif close:
            fix = f'did you mean "{close}"?'
        else:
            fix = "remove it; the keys here are " + ", ".join(spec)
        self.add("error", path, f'unknown key "{key}"', fix, "unknown_key")

    def value(self, path: str, key: str, value: Any, field: Field) -> bool:
        """Whether ``value`` has the field's type, is one of its choices and passes its rule."""
        if not type_ok(field.kind, value):
            expected, fix = EXPECTED[field.kind]
            shown = kind_of(value) if field.secret else f"{show(value)} ({kind_of(value)})"
            if isinstance(value, str) and type_ok(field.kind, unquote(value)):
                fix = f"remove the quotes: {key} = {value}"
            self.add("error", path, f"expected {expected}, got {shown}", fix, "wrong_type")
            return False
        listed = field.kind in ("ints", "strs")
        items = value if listed else [value]
        ok = True
        for n, item in enumerate(items):
            where = f"{path}[{n}]" if listed else path
            if field.choices and item not in field.choices:
                self.not_a_choice(where, item, field.choices)
                ok = False
                continue
            problem = field.rule(item) if field.rule else None
            if problem:
                self.add("error", where, problem[0], problem[1], "bad_value")
                ok = False
        return ok

    def not_a_choice(self, path: str, value: str, choices: tuple[str, ...]) -> None:
        close = closest(value, choices)
        fix = f'did you mean "{close}"?' if close else "use one of: " + ", ".join(choices)
        accepted = ", ".join(choices)
        message = f'"{value}" is not accepted here (accepted: {accepted})'
        self.add("error", path, message, fix, "bad_value")

    def backend_fields(self, raw: Mapping[str, Any], path: str) -> dict:
        """The good fields of a backend (or of ``[defaults]``), its sub-tables walked too."""
        good = self.table(raw, BACKEND, path)
        for key, spec in (("credentials", CREDENTIALS), ("price", PRICE), ("sim", SIM)):
            if key in good:
                good[key] = self.table(good[key], spec, f"{path}.{key}")
        if "headers" in good:
            good["headers"] = self.headers(good["headers"], f"{path}.headers")
        for name in ("model", "messages"):
            if name in good.get("params", {}):
                self.add(
                    "warning",
                    f"{path}.params.{name}",
                    "is set by rrcli and ignored here",
                    f"remove params.{name}",
                    "ignored_param",
                )
        return good

    def headers(self, raw: Mapping[str, Any], path: str) -> dict[str, str]:
        """The good extra headers; a header that would carry a key is refused."""
        good = {}
        for name, value in raw.items():
            problem = _header_problem(name, value)
            if problem is None:
                good[name] = value
            else:
                self.add("error", join(path, name), *problem)
        return good


def _header_problem(name: str, value: Any) -> tuple[str, str, str] | None:
    """(message, fix, code) for a header that may not be sent as written, else None."""
    if name.lower() in KEY_HEADERS:
        return (
            f'header "{name}" would send a key outside credentials',
            "remove it; put the key in credentials (api_key_env) and rrcli sends "
            "it with the provider's own header",
            "key_header",
        )
    if name.lower() in FRAMING_HEADERS:
        return (
            f'header "{name}" frames the request and is written by rrcli\'s HTTP client',
            "remove it: a value given here would not match the body sent",
            "framing_header",
        )
    if not HEADER_NAME.fullmatch(name):
        return f'"{name}" is not a valid HTTP header name', "use letters, digits and -", "bad_value"
    if not isinstance(value, str):
        return f"expected a string, got {kind_of(value)}", EXPECTED["str"][1], "wrong_type"
    if "\r" in value or "\n" in value:
        return "a header value cannot contain a line break", "remove the line break", "bad_value"
    if (bad := unsendable(value)) is not None:
        return f"a header value is sent as ASCII; this one has {bad}", "remove it", "bad_value"
    return None


def unsendable(value: str, *, spaces: bool = True) -> str | None:
    """What makes ``value`` impossible to send in an HTTP header (a character outside printable
    ASCII, or with ``spaces=False`` a space), described without repeating the value; None when
    it can be sent."""
    for i, char in enumerate(value):
        if not (" " < char <= "~" or (spaces and char in " \t")):
            return f"U+{ord(char):04X} at character {i + 1}"
    return None


def refuse_keys(
    check: Checker,
    values: Mapping[str, Any],
    path: str,
    keys: Iterable[str],
    message: str,
    fix: str,
) -> None:
    """An error for each of ``keys`` that backend ``path`` sets, in its credentials table or
    beside it: a credential its provider does not take."""
    table = values.get("credentials", {})
    for key in keys:
        if key in table or key in values:
            check.add(
                "error",
                f"{path}.credentials.{key}" if key in table else f"{path}.{key}",
                message,
                fix,
                "credentials_conflict",
            )


def need_module(check: Checker, path: str, module: str, message: str, fix: str) -> None:
    """An error on backend ``path``'s provider when ``module`` (an extra's) is not installed."""
    if importlib.util.find_spec(module) is None:
        check.add("error", f"{path}.provider", message, fix, "extra_missing")
