"""A whole profile document checked: TOML data in, a Profile and EVERY diagnostic out.

The sections are walked against the schema (``walk.py``), each backend is built over
``[defaults]`` (``backends.py``), then come the rules that look at the pool at once: duplicate
ids, ``same_model``, weights, shared gate scopes, and the base_url address policy
(``addresses.py``). Nothing here raises for bad content.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from rrcli.config.addresses import Resolver, UrlCheck, check_base_urls
from rrcli.config.backends import build_backend
from rrcli.config.prices import price_of, unpriced_budget
from rrcli.config.profile import (
    Backend,
    BudgetSettings,
    CacheSettings,
    CooldownSettings,
    GateSettings,
    HealthSettings,
    Profile,
    QueueSettings,
    RetrySettings,
    ServeSettings,
)
from rrcli.config.redaction import looks_like_key, redacted_url
from rrcli.config.schema import (
    BUDGET,
    CACHE,
    COOLDOWN,
    GATE,
    HEALTH,
    QUEUE,
    RETRY,
    SERVE,
    TOP,
    as_floats,
)
from rrcli.config.urls import endpoint_url
from rrcli.config.walk import Checker
from rrcli.diagnostic import Diagnostic
from rrcli.registry import info

__all__ = ["check_document"]


def check_document(
    data: Mapping[str, Any],
    text: str,
    source: str,
    *,
    environ: Mapping[str, str],
    resolve: Resolver | None = None,
) -> tuple[Profile, list[Diagnostic]]:
    """Every profile rule over a parsed TOML document. The Profile is built from the good
    values (a bad value falls back to its default), so it is meaningful only without errors."""
    check = Checker(source, text)
    raw_backends = data.get("backends")
    if isinstance(raw_backends, list):
        for i, raw in enumerate(raw_backends):
            if isinstance(raw, dict) and isinstance(raw.get("id"), str):
                check.ids[i] = raw["id"]
    top = check.table(data, TOP, "")
    settings = _settings(check, top)
    backends = _backends(check, top, environ)
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
        cache_threshold=float(top.get("cache_threshold", 0.3)),
        balance_abs=top.get("balance_abs"),
        balance_rel=float(top.get("balance_rel", 1.5)),
        lookahead=top.get("lookahead", 1000),
        binding=top.get("binding", "request"),
        same_model=top.get("same_model", False),
        concurrency=top.get("concurrency"),
        seed=top.get("seed"),
        **settings,
        backends=backends,
        source=source,
    )
    _pool(check, profile)
    _endpoint_paths(check, backends)
    _addresses(check, backends, profile.gate, resolve)
    return profile, check.diagnostics


def _settings(check: Checker, top: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[retry]``, ``[gate]``, ``[cooldown]``, ``[health]``, ``[budget]``, ``[cache]``,
    ``[queue]`` and ``[serve]`` sections."""
    cooldown = as_floats(check.table(top.get("cooldown", {}), COOLDOWN, "cooldown"), COOLDOWN)
    health = as_floats(check.table(top.get("health", {}), HEALTH, "health"), HEALTH)
    budget = as_floats(check.table(top.get("budget", {}), BUDGET, "budget"), BUDGET)
    return {
        "budget": BudgetSettings(**budget),
        "retry": _retry(check, check.table(top.get("retry", {}), RETRY, "retry")),
        "gate": _gate(check, check.table(top.get("gate", {}), GATE, "gate")),
        "cooldown": CooldownSettings(**cooldown),
        "health": HealthSettings(**health),
        "cache": _cache(check, check.table(top.get("cache", {}), CACHE, "cache")),
        "queue": _queue(check, check.table(top.get("queue", {}), QUEUE, "queue")),
        "serve": ServeSettings(
            **as_floats(check.table(top.get("serve", {}), SERVE, "serve"), SERVE)
        ),
    }


def _backends(
    check: Checker, top: Mapping[str, Any], environ: Mapping[str, str]
) -> tuple[Backend, ...]:
    defaults = check.backend_fields(top.get("defaults", {}), "defaults")
    if "id" in defaults:
        check.add(
            "error",
            "defaults.id",
            "an id belongs to one backend, not to [defaults]",
            "set id in each [[backends]] table",
            "bad_value",
        )
    return tuple(
        build_backend(check, i, raw, defaults, environ)
        for i, raw in enumerate(top.get("backends", []))
    )


def _retry(check: Checker, values: dict[str, Any]) -> RetrySettings:
    values = as_floats(values, RETRY)
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


def _gate(check: Checker, values: dict[str, Any]) -> GateSettings:
    settings = GateSettings(**as_floats(values, GATE))
    if settings.kind == "redis":
        _redis_url(check, "gate.url", settings.url)
    return settings


def _queue(check: Checker, values: dict[str, Any]) -> QueueSettings:
    settings = QueueSettings(**as_floats(values, QUEUE))
    if settings.url:
        _redis_url(check, "queue.url", settings.url)
    return settings


def _redis_url(check: Checker, where: str, url: str) -> None:
    if not url.startswith(("redis://", "rediss://")):
        check.add(
            "error",
            where,
            f'"{redacted_url(url)}" is not a redis:// or rediss:// URL',
            'write e.g. url = "redis://127.0.0.1:6379/0"',
            "bad_value",
        )


def _cache(check: Checker, values: dict[str, Any]) -> CacheSettings:
    settings = CacheSettings(**values)
    if settings.path and Path(settings.path).is_dir():
        check.add(
            "error",
            "cache.path",
            f'"{settings.path}" is a folder; the cache is one SQLite file',
            'name a file, e.g. path = "answers.sqlite"',
            "bad_value",
        )
    return settings


def _addresses(
    check: Checker, backends: tuple[Backend, ...], gate: GateSettings, resolve: Resolver | None
) -> None:
    """The base_url address policy over every backend that sends requests over the network, and
    the metadata rule over the Redis gate's URL (Redis is often private, never metadata)."""
    urls = [
        UrlCheck(
            f"backends[{i}].base_url", b.base_url, b.allow_private, b.credentials.auth != "none"
        )
        for i, b in enumerate(backends)
        if info(b.provider).needs_network
    ]
    if gate.kind == "redis":
        urls.append(UrlCheck("gate.url", gate.url, allow_private=True, sends_key=False, http=False))
    for finding in check_base_urls(urls, resolve):
        check.add(finding.severity, finding.path, finding.message, finding.fix, finding.code)


#: the path each HTTP provider appends to its base_url for a chat call
_APPENDS = {
    "openai": "/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/MODEL:generateContent",
}


def _endpoint_paths(check: Checker, backends: tuple[Backend, ...]) -> None:
    """A base_url that already names an endpoint (``.../chat/completions``, ``.../v1/messages``,
    ``.../v1`` for anthropic, which appends ``/v1/messages``, or ``.../v1beta`` for gemini, which
    appends ``/v1beta/models/...``) would get the path twice: an
    error whose fix is the base_url to write (and the provider, when the endpoint is the other
    API's)."""
    for i, backend in enumerate(backends):
        try:
            parts = urlsplit(backend.base_url)
        except ValueError:  # the address policy reports it
            continue
        path, provider = parts.path.rstrip("/"), backend.provider
        found = _endpoint_ending(provider, path)
        if found is None:
            continue
        ending, owner = found
        base = urlunsplit(parts._replace(path=path[: -len(ending)], query="", fragment=""))
        if owner == provider:
            problem = (
                f"ends with {ending}, which rrcli adds itself: calls would go to "
                f"{endpoint_url(redacted_url(backend.base_url), _APPENDS[provider])}"
            )
            fix = f'write base_url = "{base}"'
        else:
            problem = f'ends with {ending}, an endpoint of the {owner} API, not of "{provider}"'
            fix = f'set provider = "{owner}" and base_url = "{base}"'
        check.add("error", f"backends[{i}].base_url", problem, fix, "endpoint_in_base_url")


def _endpoint_ending(provider: str, path: str) -> tuple[str, str] | None:
    """(the ending, the provider whose endpoint it is) when ``path`` ends with an endpoint."""
    for owner, ending in _APPENDS.items():
        if path.endswith(ending) and provider in _APPENDS:
            return ending, owner
    if provider == "anthropic" and path.endswith("/v1"):
        return "/v1", "anthropic"
    if provider == "gemini":
        for ending in ("/v1beta/models", "/v1beta", "/v1/models"):
            if path.endswith(ending):
                return ending, "gemini"
    return None


def _pool(check: Checker, profile: Profile) -> None:
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
    _same_model(check, profile)
    if profile.budget.max_cost_usd is not None:
        unpriced = [b.id for b in backends if price_of(b) is None]
        if unpriced:
            check.add("error", "budget.max_cost_usd", *unpriced_budget(unpriced), "unpriced")
    if profile.strategy == "weighted" and backends and all(b.weight == 0 for b in backends):
        check.add(
            "error",
            "strategy",
            "every backend has weight 0: weighted has nothing to pick",
            "give at least one backend a weight above 0",
            "bad_value",
        )
    _scope_caps(check, backends)
    _shared_keys(check, backends)


def _shared_keys(check: Checker, backends: tuple[Backend, ...]) -> None:
    """Backends sending one key (one variable, or one literal key) for one model in different
    gate scopes: one account's caps and rate limits (which providers set per key and model)
    counted as if they were several. No key is shown."""
    by_key: dict[tuple[str, str, str], list[Backend]] = {}
    for backend in backends:
        creds = backend.credentials
        if creds.auth == "none":
            continue
        if creds.api_key_env is not None:
            by_key.setdefault(("env", creds.api_key_env, backend.model), []).append(backend)
        elif creds.api_key is not None:
            by_key.setdefault(("key", creds.api_key.strip(), backend.model), []).append(backend)
    for (kind, name, model), sharing in by_key.items():
        if len({b.scope for b in sharing}) < 2:
            continue
        ids = ", ".join(f'"{b.id}"' for b in sharing)
        shown = f"the key in {name}" if kind == "env" and not looks_like_key(name) else "one key"
        check.add(
            "warning",
            "backends",
            f"backends {ids} share {shown} for model {model}: their caps and rate limits "
            "are one account's, counted here as if each had its own",
            f'give them one gate_scope (gate_scope = "{sharing[0].scope}" in each) so '
            "max_concurrency, rpm and tpm are enforced together, or give each its own key",
            "shared_key",
        )


def _same_model(check: Checker, profile: Profile) -> None:
    models: dict[str, list[str]] = {}
    for backend in profile.backends:
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


def _scope_caps(check: Checker, backends: tuple[Backend, ...]) -> None:
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
