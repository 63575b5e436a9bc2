"""The parts of an engine built from its profile, once at its assembly (engine/assembly.py)
and again for the backends a reload adds (``Reassembly``): the checks made before anything
opens (each backend's key, a budget's prices), one provider per backend, the probe of a
backend down, the gates. A reload applies the backends only; every other setting of the
profile needs a restart."""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from rrcli.config.prices import pool_prices
from rrcli.config.profile import Backend, Price, Profile
from rrcli.engine.money import budget_prices
from rrcli.engine.options import EngineOptions
from rrcli.errors import ProviderError, UsageError
from rrcli.logs import get_logger
from rrcli.providers import make_provider
from rrcli.providers.base import Provider
from rrcli.providers.probe import PROBE_TIMEOUT, probe_call
from rrcli.routing.gate import make_gates
from rrcli.routing.health import Probe
from rrcli.routing.scopes import scope_limits

__all__ = [
    "Preflight",
    "Reassembly",
    "make_prober",
    "make_providers",
    "open_gates",
    "preflight",
]

log = get_logger("rrcli")


@dataclass(frozen=True, slots=True)
class Preflight:
    """What an engine needs that is checked before anything is opened: each backend's key,
    and a budget's prices (None: no budget)."""

    keys: Mapping[str, str | None]
    prices: Mapping[str, Price] | None


def preflight(
    profile: Profile, options: EngineOptions, environ: Mapping[str, str] | None = None
) -> Preflight:
    """The keys (UsageError if one is unset) and a budget's prices (UsageError: a budget over
    an unpriced backend); nothing is opened or sent."""
    keys = _keys(profile, os.environ if environ is None else environ)
    return Preflight(keys, budget_prices(profile, options))


def _keys(profile: Profile, environ: Mapping[str, str]) -> dict[str, str | None]:
    """Each backend's key (UsageError if one is unset), with a warning naming each key's
    variable (never its value) that has whitespace around it."""
    keys = {b.id: b.credentials.resolve(environ) for b in profile.backends}
    for backend in profile.backends:
        if backend.credentials.padded(environ):
            log.warning(
                "rrcli.key_whitespace",
                backend=backend.id,
                variable=backend.credentials.api_key_env or "credentials.api_key",
                fix="the key is sent without the whitespace; remove it from the variable",
            )
    return keys


def make_providers(
    profile: Profile, keys: Mapping[str, str | None], seed: int | None
) -> dict[str, Any]:
    """One provider (one HTTP client) per backend, each with its own key."""
    return {
        b.id: make_provider(b, keys[b.id], retry=profile.retry, seed=seed) for b in profile.backends
    }


@dataclass(slots=True, eq=False)
class Reassembly:
    """What the engine's parts were built from, for a reload (``Engine.reload``) to build the
    parts of the backends it adds: the options, the environment the keys are read from, the
    seed; and the maps the engine's observers read by backend id, which a reload
    updates in place: each backend's definition (the probes'), its provider's address (the
    trace's), its price (the cashier's)."""

    options: EngineOptions
    environ: Mapping[str, str] | None
    seed: int | None
    backends: dict[str, Backend]
    addresses: dict[str, str | None]
    prices: dict[str, Price | None]

    def check(self, old: Profile, new: Profile) -> Preflight:
        """``new``'s keys and a budget's prices (UsageError naming what to fix); UsageError too
        when ``new`` differs from ``old`` in more than its backends: the rest needs a restart."""
        changed = [
            f.name
            for f in fields(Profile)
            if f.name not in _RELOADED and getattr(old, f.name) != getattr(new, f.name)
        ]
        if changed:
            names = ", ".join(changed)
            raise UsageError(
                f"{names} changed: a reload applies the backends only — restore it, or restart "
                "to apply it"
            )
        return preflight(new, self.options, self.environ)

    def providers(
        self, profile: Profile, backends: Sequence[Backend], keys: Mapping[str, str | None]
    ) -> dict[str, Provider]:
        """One provider for each of ``backends`` (new, or changed, of ``profile``), their parts
        recorded."""
        made = {}
        for backend in backends:
            made[backend.id] = provider = make_provider(
                backend, keys[backend.id], retry=profile.retry, seed=self.seed
            )
            self.backends[backend.id] = backend
            self.addresses[backend.id] = provider.server_address
        self.prices.update(pool_prices(backends))
        return made

    def gates(self, old: Profile, new: Profile, gates: Mapping[str, Any]) -> Mapping[str, Any]:
        """The gates of ``new``'s scopes: those of ``gates`` whose limits are unchanged, new
        ones for the others (on the same Redis, for shared gates)."""
        rescoped = getattr(gates, "rescoped", None)
        if rescoped is not None:
            return rescoped(new)
        before = {limits.scope: limits for limits in scope_limits(old.backends)}
        made = make_gates(new, clock=time.monotonic)
        for limits in scope_limits(new.backends):
            if before.get(limits.scope) == limits:  # its calls in flight counted where they are
                made[limits.scope] = gates[limits.scope]
        return made


#: the settings a reload applies; a change to any other field of the profile needs a restart
_RELOADED = frozenset({"backends"})


def make_prober(backends: Mapping[str, Backend], providers: Mapping[str, Provider]) -> Probe:
    """A backend's probe: the smallest call it serves (providers/probe.py), through its own
    provider (its key, its client), waited for at most PROBE_TIMEOUT; neither gated nor
    charged: one call of a few tokens a backend down, at most every ``recover_after``.
    ``backends`` and ``providers`` by id, as they are when the probe runs (a reload changes
    them)."""
    by_id = backends

    async def probe(deployment: str) -> ProviderError | None:
        try:
            call = probe_call(by_id[deployment])
            await asyncio.wait_for(providers[deployment].send(call), PROBE_TIMEOUT)
        except ProviderError as exc:
            return exc
        except TimeoutError:
            message = f"timeout: the probe had no answer within {PROBE_TIMEOUT:g} s"
            return ProviderError(message, type="timeout", transient=True)
        return None

    return probe


def open_gates(profile: Profile, rng: random.Random, *, local: bool = False) -> Mapping[str, Any]:
    """The gates of the pool: shared in Redis on a Redis gate (GateUnavailableError: exit 2,
    nothing sent), else in process; ``local`` forces in-process gates (--dry-run)."""
    if profile.gate.kind == "redis" and not local:
        from rrcli.fleet.redis_gate import make_redis_gates

        return make_redis_gates(profile, rng=rng)
    return make_gates(profile, clock=time.monotonic)
