"""The profile schema: one table of fields per section, each field's type and rule.

Pure data and pure functions: what each key of a profile may hold, the rules a single value must
pass, and how a value is named in a message. The walk that applies them to a document is
``walk.py``; the rules that span fields are ``document.py`` and ``backends.py``. No message
ever shows a secret field's value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rrcli.config.profile import (
    BINDINGS,
    BUDGET_PERIODS,
    CACHE_MODES,
    GATE_KINDS,
    MAX_CONTINUATIONS,
    MAX_IN_FLIGHT,
    MAX_LOOKAHEAD,
    MAX_RECOVER_AFTER,
    MAX_SERVER_PAUSE,
    STRATEGIES,
)
from rrcli.registry import ENDPOINTS, NAMES, REGISTRY

__all__ = [
    "BACKEND",
    "BUDGET",
    "CACHE",
    "COOLDOWN",
    "CREDENTIALS",
    "EXPECTED",
    "FRAMING_HEADERS",
    "GATE",
    "HEADER_NAME",
    "KEY_HEADERS",
    "PRICE",
    "QUEUE",
    "RETRY",
    "SERVE",
    "SIM",
    "TOP",
    "Field",
    "as_floats",
    "join",
    "kind_of",
    "show",
    "type_ok",
    "unquote",
]

Rule = Callable[[Any], tuple[str, str] | None]  # value -> (message, fix) when it is bad


@dataclass(frozen=True, slots=True)
class Field:
    """One key of the schema: its type (str, int, number, bool, table, tables, ints, strs), its
    rule and its choices (for a list, each item's)."""

    kind: str
    rule: Rule | None = None
    choices: tuple[str, ...] = ()
    secret: bool = False  # never echo the value


def at_least(low: float) -> Rule:
    return lambda v: (
        None if v >= low else (f"must be at least {low}, got {v}", f"use {low} or more")
    )


def above(low: float) -> Rule:
    return lambda v: (
        None if v > low else (f"must be greater than {low}, got {v}", "use a larger value")
    )


def within(low: float, high: float) -> Rule:
    return lambda v: (
        None
        if low <= v <= high
        else (f"must be between {low} and {high}, got {v}", f"use a value from {low} to {high}")
    )


def _pattern(regex: str, what: str, example: str, secret: bool = False) -> Rule:
    compiled = re.compile(regex)

    def rule(value: str) -> tuple[str, str] | None:
        if compiled.fullmatch(value):
            return None
        shown = "" if secret else f'"{value}" '
        return f"{shown}is not {what}", f"use {example}"

    return rule


ID_RULE = _pattern(r"[A-Za-z0-9._-]+", "a valid id (letters, digits, . _ -)", 'e.g. "openai-a"')
ENV_RULE = _pattern(
    r"[A-Za-z_][A-Za-z0-9_]*",
    "an environment variable name",
    'a name like "OPENAI_API_KEY"',
    secret=True,
)
NOT_EMPTY = _pattern(r".+", "allowed to be empty", "a non-empty string")
AUTH = ("key", "none")
POSITIVE_INT = Field("int", at_least(1))


def _in_flight(value: int) -> tuple[str, str] | None:
    if value > MAX_IN_FLIGHT:
        return (
            f"must be at most {MAX_IN_FLIGHT} (calls in flight at once), got {value}",
            f"use {MAX_IN_FLIGHT} or less",
        )
    return at_least(1)(value)


IN_FLIGHT = Field("int", _in_flight)  # more is a typo that would cost memory

TOP = {
    "name": Field("str"),
    "strategy": Field("str", choices=STRATEGIES),
    "rotate_every": POSITIVE_INT,
    "cache_threshold": Field("number", within(0, 1)),
    "balance_abs": Field("int", at_least(0)),
    "balance_rel": Field("number", at_least(1)),
    "lookahead": Field("int", within(0, MAX_LOOKAHEAD)),
    "binding": Field("str", choices=BINDINGS),
    "same_model": Field("bool"),
    "concurrency": IN_FLIGHT,
    "seed": Field("int"),
    "defaults": Field("table"),
    "retry": Field("table"),
    "gate": Field("table"),
    "cooldown": Field("table"),
    "health": Field("table"),
    "cache": Field("table"),
    "budget": Field("table"),
    "queue": Field("table"),
    "serve": Field("table"),
    "backends": Field("tables"),
}
BACKEND = {
    "id": Field("str", ID_RULE),
    "provider": Field("str", choices=NAMES),
    "base_url": Field("str", NOT_EMPTY),
    "model": Field("str", NOT_EMPTY),
    "credentials": Field("table"),
    "auth": Field("str", choices=AUTH),
    "max_concurrency": IN_FLIGHT,
    "rpm": POSITIVE_INT,
    "tpm": POSITIVE_INT,
    "weight": Field("number", at_least(0)),
    "timeout": Field("number", above(0)),
    "stream_idle_timeout": Field("number", above(0)),
    "max_response_bytes": POSITIVE_INT,
    "headers": Field("table"),
    "params": Field("table"),
    "allow_private": Field("bool"),
    "gate_scope": Field("str", NOT_EMPTY),
    "reasoning_feedback": Field("bool"),
    "price": Field("table"),
    "sim": Field("table"),
    "endpoints": Field("strs", choices=ENDPOINTS),
    "prefix_cache_tokens": Field("int", at_least(0)),
    "prompt_cache_key": Field("bool"),
    "max_tokens_per_image": Field("int", at_least(1)),
    "region": Field("str", NOT_EMPTY),
    "project": Field("str", NOT_EMPTY),
    "deployment": Field("str", NOT_EMPTY),
    "api_version": Field("str", NOT_EMPTY),
    "drop_params": Field("strs"),
}
CREDENTIALS = {
    "api_key_env": Field("str", ENV_RULE, secret=True),
    "api_key": Field("str", NOT_EMPTY, secret=True),
    "auth": Field("str", choices=AUTH),
    "profile": Field("str", NOT_EMPTY),
    "token_env": Field("str", ENV_RULE, secret=True),
    "token_command": Field("str", NOT_EMPTY),
    "file": Field("str", NOT_EMPTY),
}
RETRY = {
    "max_retries": Field("int", at_least(0)),
    "max_retry_time": Field("number", above(0)),
    "backoff_initial": Field("number", at_least(0)),
    "backoff_max": Field("number", at_least(0)),
    "retry_on_status": Field("ints", within(100, 599)),
    "respect_retry_after": Field("bool"),
    "failover": Field("bool"),
    "max_server_pause": Field("number", within(0, MAX_SERVER_PAUSE)),
    "max_continuations": Field("int", within(0, MAX_CONTINUATIONS)),
}
GATE = {
    "kind": Field("str", choices=GATE_KINDS),
    "url": Field("str"),
    "lease": Field("number", above(0)),
    "adaptive": Field("bool"),
}
QUEUE = {
    "url": Field("str"),
    "lease": Field("number", above(0)),
    "max_deliveries": POSITIVE_INT,
}
SERVE = {
    "host": Field("str", NOT_EMPTY),
    "port": Field("int", within(0, 65535)),
    "keys_env": Field("str", ENV_RULE),
    "session_idle": Field("number", above(0)),
    "max_body_bytes": POSITIVE_INT,
    "drain_timeout": Field("number", at_least(0)),
    "open_metrics": Field("bool"),
    "head_timeout": Field("number", above(0)),
    "idle_timeout": Field("number", above(0)),
    "max_connections": POSITIVE_INT,
    "max_connections_per_address": Field("int", at_least(0)),
}
COOLDOWN = {
    "consecutive_failures": Field("int", at_least(0)),
    "duration": Field("number", above(0)),
    "round_robin": Field("bool"),
}
HEALTH = {"recover_after": Field("number", within(0, MAX_RECOVER_AFTER))}
CACHE = {"path": Field("str", NOT_EMPTY), "mode": Field("str", choices=CACHE_MODES)}
BUDGET = {
    "max_cost_usd": Field("number", at_least(0)),
    "key": Field("str", ID_RULE),
    "period": Field("str", choices=BUDGET_PERIODS),
}
MAX_PRICE = 10_000.0  # USD per million tokens: ten times the dearest model's; more is a typo
_PRICE = Field("number", within(0, MAX_PRICE))
PRICE = {"input": _PRICE, "output": _PRICE, "cached_input": _PRICE, "cache_write": _PRICE}
SIM = {
    "latency_ms": Field("number", at_least(0)),
    "jitter_ms": Field("number", at_least(0)),
    "error_rate": Field("number", within(0, 1)),
    "rate_limit_rate": Field("number", within(0, 1)),
    "retry_after_ms": Field("number", at_least(0)),
    "output_tokens": Field("int", at_least(0)),
    "ttft_ms": Field("number", at_least(0)),
    "tokens_per_s": Field("number", above(0)),
    "prefix_cache_tokens": Field("int", at_least(0)),
    "prefill_ms_per_token": Field("number", at_least(0)),
}
EXPECTED = {
    "str": ("a string", 'put the value in double quotes, e.g. "text"'),
    "int": ("an integer", "write a whole number without quotes, e.g. 4"),
    "number": ("a number", "write a number without quotes, e.g. 1.5"),
    "bool": ("true or false", "write true or false, lower case, without quotes"),
    "table": ("a table", "write a table: key = { ... } or a [section]"),
    "tables": ("an array of tables", "write each item as a [[backends]] table"),
    "ints": ("a list of integers", "write a list such as [429, 503]"),
    "strs": ("a list of strings", 'write a list such as ["chat", "embeddings"]'),
}
# headers that carry a key: each provider's own auth header, and a proxy's. Azure's api-key is
# left to ``headers`` too: an openai backend at an Azure-style gateway sends its key that way
# (masked like every credential header); an azure backend sends its own over it.
KEY_HEADERS = frozenset(
    {
        "proxy-authorization",
        *(p.auth_header for p in REGISTRY.values() if p.auth_header and p.auth_header != "api-key"),
    }
)
# headers that frame the request on the wire: the HTTP client writes them from the body it sends;
# a stale Content-Length or a second Transfer-Encoding would desync a keep-alive connection
FRAMING_HEADERS = frozenset(
    {
        "content-length",
        "transfer-encoding",
        "host",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-connection",
        "expect",
    }
)
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def kind_of(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        dict: "a table",
        list: "an array",
    }
    return names.get(type(value), "a date or time")


def type_ok(kind: str, value: Any) -> bool:
    if isinstance(value, bool):
        return kind == "bool"
    return {
        "str": isinstance(value, str),
        "int": isinstance(value, int),
        "number": isinstance(value, int | float) and math.isfinite(value),
        "bool": False,
        "table": isinstance(value, dict),
        "tables": isinstance(value, list) and all(isinstance(v, dict) for v in value),
        "ints": isinstance(value, list)
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value),
        "strs": isinstance(value, list) and all(isinstance(v, str) for v in value),
    }[kind]


def join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def show(value: Any) -> str:
    text = (
        f'"{value}"'
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else repr(value)
    )
    return text if len(text) <= 40 else text[:37] + "..."


def unquote(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def as_floats(values: dict[str, Any], spec: dict[str, Field]) -> dict[str, Any]:
    """The values with every ``number`` field as a float (TOML writes 1 for 1.0)."""
    return {k: float(v) if spec[k].kind == "number" else v for k, v in values.items()}
