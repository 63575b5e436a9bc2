"""The profile schema and its rules (SPEC §2): TOML data in, a Profile and EVERY diagnostic out.

The schema is one table of fields per section. One generic walk reports unknown keys (with a
"did you mean"), wrong types (naming the expected type; a bool is not an int) and values out of
range, and keeps the good values; then come the rules that span fields: ``[defaults]``
inheritance, each backend's own credentials, duplicate ids, ``same_model``, weights, shared gate
scopes, and the base_url address policy (``_netcheck``). Nothing here raises for bad content, and
no message ever shows a credential's value.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rrcli.config._toml_lines import key_lines, line_for
from rrcli.config.addresses import UrlCheck, check_base_urls
from rrcli.config.profile import (
    BINDINGS,
    DEFAULT_BASE_URLS,
    DEFAULT_MODELS,
    GATE_KINDS,
    PROVIDERS,
    STRATEGIES,
    Backend,
    CooldownSettings,
    Credentials,
    Diagnostic,
    GateSettings,
    Price,
    Profile,
    Resolver,
    RetrySettings,
    SimSettings,
)

__all__ = [
    "BACKEND",
    "COOLDOWN",
    "CREDENTIALS",
    "GATE",
    "PRICE",
    "RETRY",
    "SIM",
    "TOP",
    "check_document",
]

Rule = Callable[[Any], tuple[str, str] | None]  # value -> (message, fix) when it is bad


@dataclass(frozen=True, slots=True)
class Field:
    """One key of the schema: its type (str, int, number, bool, table, tables, ints) and rule."""

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

TOP = {
    "name": Field("str"),
    "strategy": Field("str", choices=STRATEGIES),
    "rotate_every": POSITIVE_INT,
    "binding": Field("str", choices=BINDINGS),
    "same_model": Field("bool"),
    "concurrency": POSITIVE_INT,
    "seed": Field("int"),
    "defaults": Field("table"),
    "retry": Field("table"),
    "gate": Field("table"),
    "cooldown": Field("table"),
    "backends": Field("tables"),
}
BACKEND = {
    "id": Field("str", ID_RULE),
    "provider": Field("str", choices=PROVIDERS),
    "base_url": Field("str", NOT_EMPTY),
    "model": Field("str", NOT_EMPTY),
    "credentials": Field("table"),
    "auth": Field("str", choices=AUTH),
    "max_concurrency": POSITIVE_INT,
    "rpm": POSITIVE_INT,
    "tpm": POSITIVE_INT,
    "weight": Field("number", at_least(0)),
    "timeout": Field("number", above(0)),
    "headers": Field("table"),
    "params": Field("table"),
    "allow_private": Field("bool"),
    "gate_scope": Field("str", NOT_EMPTY),
    "reasoning_feedback": Field("bool"),
    "price": Field("table"),
    "sim": Field("table"),
}
CREDENTIALS = {
    "api_key_env": Field("str", ENV_RULE, secret=True),
    "api_key": Field("str", NOT_EMPTY, secret=True),
    "auth": Field("str", choices=AUTH),
}
RETRY = {
    "max_retries": Field("int", at_least(0)),
    "max_retry_time": Field("number", above(0)),
    "backoff_initial": Field("number", at_least(0)),
    "backoff_max": Field("number", at_least(0)),
    "retry_on_status": Field("ints", within(100, 599)),
    "respect_retry_after": Field("bool"),
    "failover": Field("bool"),
}
GATE = {
    "kind": Field("str", choices=GATE_KINDS),
    "url": Field("str"),
    "lease": Field("number", above(0)),
    "adaptive": Field("bool"),
}
COOLDOWN = {
    "consecutive_failures": Field("int", at_least(0)),
    "duration": Field("number", above(0)),
    "round_robin": Field("bool"),
}
PRICE = {"input": Field("number", at_least(0)), "output": Field("number", at_least(0))}
SIM = {
    "latency_ms": Field("number", at_least(0)),
    "jitter_ms": Field("number", at_least(0)),
    "error_rate": Field("number", within(0, 1)),
    "rate_limit_rate": Field("number", within(0, 1)),
    "retry_after_ms": Field("number", at_least(0)),
    "output_tokens": Field("int", at_least(0)),
    "ttft_ms": Field("number", at_least(0)),
    "tokens_per_s": Field("number", above(0)),
}
EXPECTED = {
    "str": ("a string", 'put the value in double quotes, e.g. "text"'),
    "int": ("an integer", "write a whole number without quotes, e.g. 4"),
    "number": ("a number", "write a number without quotes, e.g. 1.5"),
    "bool": ("true or false", "write true or false, lower case, without quotes"),
    "table": ("a table", "write a table: key = { ... } or a [section]"),
    "tables": ("an array of tables", "write each item as a [[backends]] table"),
    "ints": ("a list of integers", "write a list such as [429, 503]"),
}
KEY_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key"})
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _kind_of(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        dict: "a table",
        list: "an array",
    }
    return names.get(type(value), "a date or time")


def _type_ok(kind: str, value: Any) -> bool:
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
    }[kind]


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class _Checker:
    """Collects diagnostics, each with its line and the backend id its path points at."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.lines = key_lines(text)
        self.ids: dict[int, str] = {}
        self.bad: set[str] = set()  # paths whose value was reported (so no cascade)
        self.diagnostics: list[Diagnostic] = []

    def add(self, severity: str, path: str, message: str, fix: str = "", code: str = "") -> None:
        match = re.match(r"backends\[(\d+)\]", path)
        backend_id = self.ids.get(int(match[1])) if match else None
        line = line_for(self.lines, path)
        self.bad.add(path)
        self.diagnostics.append(
            Diagnostic(severity, path, message, fix, self.source, line, None, code, backend_id)
        )

    def table(self, raw: Mapping[str, Any], spec: Mapping[str, Field], path: str) -> dict:
        """The good values of ``raw``; every unknown key, wrong type and bad value reported."""
        good = {}
        for key, value in raw.items():
            field = spec.get(key)
            if field is None:
                self.unknown(_join(path, key), key, spec, path)
            elif self.value(_join(path, key), key, value, field):
                good[key] = value
        return good

    def unknown(self, path: str, key: str, spec: Mapping[str, Field], parent: str) -> None:
        close = difflib.get_close_matches(key, list(spec), n=1, cutoff=0.6)
        if not parent and key in BACKEND:
            fix = "backend fields go in [defaults] or in a [[backends]] table"
        elif close:
            fix = f'did you mean "{close[0]}"?'
        else:
            fix = "remove it; the keys here are " + ", ".join(spec)
        self.add("error", path, f'unknown key "{key}"', fix, "unknown_key")

    def value(self, path: str, key: str, value: Any, field: Field) -> bool:
        if not _type_ok(field.kind, value):
            expected, fix = EXPECTED[field.kind]
            shown = _kind_of(value) if field.secret else f"{_show(value)} ({_kind_of(value)})"
            if isinstance(value, str) and _type_ok(field.kind, _unquote(value)):
                fix = f"remove the quotes: {key} = {value}"
            self.add("error", path, f"expected {expected}, got {shown}", fix, "wrong_type")
            return False
        if field.choices and value not in field.choices:
            close = difflib.get_close_matches(value, field.choices, n=1, cutoff=0.6)
            fix = (
                f'did you mean "{close[0]}"?'
                if close
                else "use one of: " + ", ".join(field.choices)
            )
            accepted = ", ".join(field.choices)
            self.add(
                "error",
                path,
                f'"{value}" is not accepted here (accepted: {accepted})',
                fix,
                "bad_value",
            )
            return False
        items = value if field.kind == "ints" else [value]
        ok = True
        for n, item in enumerate(items):
            problem = field.rule(item) if field.rule else None
            if problem:
                where = f"{path}[{n}]" if field.kind == "ints" else path
                self.add("error", where, problem[0], problem[1], "bad_value")
                ok = False
        return ok

    def backend_fields(self, raw: Mapping[str, Any], path: str) -> dict:
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
        good = {}
        for name, value in raw.items():
            where = _join(path, name)
            if name.lower() in KEY_HEADERS:
                self.add(
                    "error",
                    where,
                    f'header "{name}" would send a key outside credentials',
                    "remove it; put the key in credentials (api_key_env) and rrcli sends "
                    "it with the provider's own header",
                    "key_header",
                )
            elif not _HEADER_NAME.fullmatch(name):
                self.add(
                    "error",
                    where,
                    f'"{name}" is not a valid HTTP header name',
                    "use letters, digits and -",
                    "bad_value",
                )
            elif not isinstance(value, str):
                self.add(
                    "error",
                    where,
                    f"expected a string, got {_kind_of(value)}",
                    EXPECTED["str"][1],
                    "wrong_type",
                )
            elif "\r" in value or "\n" in value:
                self.add(
                    "error",
                    where,
                    "a header value cannot contain a line break",
                    "remove the line break",
                    "bad_value",
                )
            else:
                good[name] = value
        return good


def _show(value: Any) -> str:
    text = (
        f'"{value}"'
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else repr(value)
    )
    return text if len(text) <= 40 else text[:37] + "..."


def _unquote(text: str) -> Any:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def check_document(
    data: Mapping[str, Any],
    text: str,
    source: str,
    *,
    environ: Mapping[str, str],
    for_run: bool = False,
    resolve: Resolver | None = None,
) -> tuple[Profile, list[Diagnostic]]:
    """Every rule of SPEC §2 over a parsed TOML document. The Profile is built from the good
    values (a bad value falls back to its default), so it is meaningful only without errors."""
    check = _Checker(source, text)
    raw_backends = data.get("backends")
    if isinstance(raw_backends, list):
        for i, raw in enumerate(raw_backends):
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                check.ids[i] = raw["id"]
    top = check.table(data, TOP, "")
    retry = _retry(check, check.table(top.get("retry", {}), RETRY, "retry"))
    gate = _gate(check, check.table(top.get("gate", {}), GATE, "gate"))
    cooldown = CooldownSettings(
        **_floats(check.table(top.get("cooldown", {}), COOLDOWN, "cooldown"), COOLDOWN)
    )
    defaults = check.backend_fields(top.get("defaults", {}), "defaults")
    if "id" in defaults:
        check.add(
            "error",
            "defaults.id",
            "an id belongs to one backend, not to [defaults]",
            "set id in each [[backends]] table",
            "bad_value",
        )
    backends = tuple(
        _backend(check, i, raw, defaults, environ, for_run)
        for i, raw in enumerate(top.get("backends", []))
    )
    if "backends" not in data or raw_backends == []:
        check.add(
            "error",
            "backends",
            "no backends",
            "add at least one [[backends]] table with an id (rrcli init writes a starter profile)",
            "no_backends",
        )
    profile = Profile(
        name=top.get("name", ""),
        strategy=top.get("strategy", "round_robin"),
        rotate_every=top.get("rotate_every", 1),
        binding=top.get("binding", "request"),
        same_model=top.get("same_model", False),
        concurrency=top.get("concurrency"),
        seed=top.get("seed"),
        retry=retry,
        gate=gate,
        cooldown=cooldown,
        backends=backends,
        source=source,
    )
    _pool(check, profile)
    urls = [
        UrlCheck(
            f"backends[{i}].base_url", b.base_url, b.allow_private, b.credentials.auth != "none"
        )
        for i, b in enumerate(backends)
        if b.provider != "sim"
    ]
    for finding in check_base_urls(urls, resolve):
        check.add(finding.severity, finding.path, finding.message, finding.fix, finding.code)
    return profile, check.diagnostics


def _floats(values: dict[str, Any], spec: Mapping[str, Field]) -> dict[str, Any]:
    return {k: float(v) if spec[k].kind == "number" else v for k, v in values.items()}


def _retry(check: _Checker, values: dict[str, Any]) -> RetrySettings:
    values = _floats(values, RETRY)
    if "retry_on_status" in values:
        values["retry_on_status"] = frozenset(values["retry_on_status"])
    settings = RetrySettings(**values)
    if settings.backoff_max < settings.backoff_initial:
        check.add(
            "error",
            "retry.backoff_max",
            f"backoff_max ({settings.backoff_max:g}) is below backoff_initial "
            f"({settings.backoff_initial:g})",
            "raise backoff_max or lower backoff_initial",
            "bad_value",
        )
    return settings


def _gate(check: _Checker, values: dict[str, Any]) -> GateSettings:
    settings = GateSettings(**_floats(values, GATE))
    if settings.kind == "redis" and not settings.url.startswith(("redis://", "rediss://")):
        check.add(
            "error",
            "gate.url",
            f'"{settings.url}" is not a redis:// or rediss:// URL',
            'write e.g. url = "redis://127.0.0.1:6379/0"',
            "bad_value",
        )
    return settings


def _backend(
    check: _Checker,
    i: int,
    raw: Mapping[str, Any],
    defaults: Mapping[str, Any],
    environ: Mapping[str, str],
    for_run: bool,
) -> Backend:
    path = f"backends[{i}]"
    own = check.backend_fields(raw, path)
    merged = {**defaults, **own}
    if "id" not in raw:
        check.add(
            "error",
            f"{path}.id",
            "missing",
            'give every backend a unique id, e.g. id = "openai-a"',
            "missing_id",
        )
    provider = merged.get("provider", "openai")
    # A backend's credentials are its own or [defaults]' — never a merge of the two.
    own_creds = "credentials" in raw or "auth" in raw
    credentials = _credentials(
        check,
        provider,
        own if own_creds else defaults,
        path,
        environ,
        for_run,
        source=path if own_creds else "defaults",
    )
    if "sim" in merged and provider != "sim":
        check.add(
            "warning",
            f"{path}.sim",
            f'ignored: provider is "{provider}", not "sim"',
            'remove it, or set provider = "sim"',
            "ignored_key",
        )
    sim = _floats(merged.get("sim", {}), SIM)
    price = merged.get("price")
    return Backend(
        id=own.get("id", f"backends[{i}]"),
        provider=provider,
        base_url=merged.get("base_url", DEFAULT_BASE_URLS[provider]),
        model=merged.get("model", DEFAULT_MODELS[provider]),
        credentials=credentials,
        max_concurrency=merged.get("max_concurrency", 8),
        rpm=merged.get("rpm"),
        tpm=merged.get("tpm"),
        weight=float(merged.get("weight", 1.0)),
        timeout=float(merged.get("timeout", 60.0)),
        headers=dict(merged.get("headers", {})),
        params=dict(merged.get("params", {})),
        allow_private=merged.get("allow_private", False),
        gate_scope=merged.get("gate_scope", ""),
        reasoning_feedback=merged.get("reasoning_feedback", False),
        price=Price(**_floats(price, PRICE)) if price is not None else None,
        sim=SimSettings(**sim) if provider == "sim" else None,
    )


def _credentials(
    check: _Checker,
    provider: str,
    values: Mapping[str, Any],
    path: str,
    environ: Mapping[str, str],
    for_run: bool,
    source: str,
) -> Credentials:
    if provider == "sim":
        return Credentials(auth="none")
    table = values.get("credentials", {})
    auth = table.get("auth", values.get("auth", "key"))
    env, key = table.get("api_key_env"), table.get("api_key")
    where = f"{path}.credentials"
    if auth == "none":
        if env is not None or key is not None:
            check.add(
                "error",
                where,
                'auth = "none" but a key is set too',
                'remove the key, or remove auth = "none"',
                "credentials_conflict",
            )
        return Credentials(auth="none")
    if env is not None and key is not None:
        check.add(
            "error",
            where,
            "both api_key_env and api_key are set",
            "keep one; api_key_env keeps the key out of the file",
            "credentials_conflict",
        )
    elif env is None and key is None and not _reported(check, f"{source}.credentials"):
        check.add(
            "error",
            where,
            "missing",
            f"an {provider} backend needs credentials.api_key_env, credentials.api_key "
            'or auth = "none"',
            "credentials_missing",
        )
    if key is not None:
        check.add(
            "warning",
            f"{where}.api_key",
            "a literal API key is stored in the profile",
            "put it in an environment variable and name it in credentials.api_key_env",
            "literal_key",
        )
    if env is not None and key is None and not environ.get(env):
        check.add(
            "error" if for_run else "warning",
            f"{where}.api_key_env",
            f"environment variable {env} is not set",
            f"export {env}=... before rrcli run",
            "env_unset",
        )
    return Credentials(api_key_env=env, api_key=key)


def _reported(check: _Checker, path: str) -> bool:
    return any(p == path or p.startswith(path + ".") for p in check.bad)


def _pool(check: _Checker, profile: Profile) -> None:
    """The rules that look at every backend at once."""
    backends = profile.backends
    first: dict[str, int] = {}
    for i, backend in enumerate(backends):
        if backend.id in first:
            check.add(
                "error",
                f"backends[{i}].id",
                f'duplicate id "{backend.id}": backends[{first[backend.id]}] and '
                f"backends[{i}] both use it",
                "give each backend its own id",
                "duplicate_id",
            )
        first.setdefault(backend.id, i)
    if len(backends) == 1:
        check.add(
            "warning",
            "backends",
            "a pool of one: nothing to balance",
            "add another [[backends]] table to spread the load",
            "pool_of_one",
        )
    models: dict[str, list[str]] = {}
    for backend in backends:
        models.setdefault(backend.model, []).append(backend.id)
    if profile.same_model and len(models) > 1:
        listed = "; ".join(f"{m} ({', '.join(ids)})" for m, ids in models.items())
        check.add(
            "error",
            "same_model",
            f"same_model = true but the backends serve different models: {listed}",
            "give every backend the same model, or set same_model = false",
            "same_model",
        )
    if profile.strategy == "weighted" and backends and all(b.weight == 0 for b in backends):
        check.add(
            "error",
            "strategy",
            "every backend has weight 0: weighted has nothing to pick",
            "give at least one backend a weight above 0",
            "bad_value",
        )
    caps: dict[str, dict[str, int]] = {}
    for backend in backends:
        caps.setdefault(backend.scope, {})[backend.id] = backend.max_concurrency
    for scope, by_id in caps.items():
        if len(set(by_id.values())) > 1:
            listed = ", ".join(f"{k}: {v}" for k, v in by_id.items())
            check.add(
                "warning",
                "backends",
                f'backends sharing gate_scope "{scope}" set different max_concurrency ({listed})',
                "give them one value: they share one cap",
                "scope_caps",
            )
