"""The engine's parts set up and taken down: each backend's key, the response cache, the router
over its gates, one provider per backend, the periodic flush and the close at the end. The batch
runner and ``rrcli.Pool`` both build their engine from these."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping
from contextlib import ExitStack
from typing import Any

from rrcli.config.profile import Profile
from rrcli.engine.cached import ResponseCache, open_cache
from rrcli.engine.engine import Engine
from rrcli.engine.failures import log_repeated
from rrcli.engine.options import EngineOptions
from rrcli.engine.summary import RunSummary
from rrcli.logs import get_logger
from rrcli.providers import make_provider
from rrcli.routing.router import Router

__all__ = [
    "FLUSH_INTERVAL",
    "close_engine",
    "flush_periodically",
    "make_providers",
    "make_router",
    "open_response_cache",
    "resolve_keys",
]

log = get_logger("rrcli")

FLUSH_INTERVAL = 0.2  # seconds between flushes of results and traces


def resolve_keys(profile: Profile, environ: Mapping[str, str]) -> dict[str, str | None]:
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


def open_response_cache(
    profile: Profile, options: EngineOptions, summary: RunSummary, stack: ExitStack
) -> ResponseCache | None:
    """The response cache, if the run has one; at the end its writes are waited for, its hits
    counted in ``summary`` and logged."""
    cache = open_cache(profile, options)
    if cache is None:
        return None

    def close() -> None:
        cache.file.close()
        summary.cached = cache.hits
        log.info(
            "rrcli.cache_closed",
            path=str(cache.file.path),
            hits=cache.hits,
            stored=cache.file.stored,
            lost=cache.file.lost,
        )

    stack.callback(close)
    return cache


def make_providers(
    profile: Profile, keys: Mapping[str, str | None], seed: int | None
) -> dict[str, Any]:
    """One provider (one HTTP client) per backend, each with its own key."""
    return {
        b.id: make_provider(b, keys[b.id], retry=profile.retry, seed=seed) for b in profile.backends
    }


def make_router(
    profile: Profile, rng: random.Random, *, local: bool = False
) -> tuple[Router, Mapping[str, Any]]:
    """The router and the gates under it; ``local`` forces in-process gates (--dry-run)."""
    if profile.gate.kind == "redis" and not local:
        from rrcli.fleet.redis_gate import make_redis_gates

        gates = make_redis_gates(profile, rng=rng)  # GateUnavailableError: exit 2, nothing sent
    else:
        from rrcli.routing.gate import make_gates

        gates = make_gates(profile, clock=time.monotonic)
    return Router(profile, gates, rng=rng, clock=time.monotonic, sleep=asyncio.sleep), gates


async def close_engine(engine: Engine, gates: Mapping[str, Any]) -> None:
    """The run's end, however it ended: the run_end record, outputs flushed, connections and
    shared leases given back, the end logged."""
    summary, budget = engine.summary, engine.router.budget
    halted = None if summary.halted is None else summary.halted.reason
    engine.traces.run_end(summary.jobs, summary.interrupted, budget and budget.record(), halted)
    if budget is not None:
        await budget.ledger.close()
    engine.traces.flush()  # first: a result on disk has its calls' records on disk
    if engine.results is not None:
        engine.results.flush()
    for provider in engine.providers.values():
        await provider.aclose()
    await _close_gates(gates)
    log_repeated(summary.failures)
    log.info(
        "rrcli.run_finished", run_id=summary.run_id, interrupted=summary.interrupted, **summary.jobs
    )


async def _close_gates(gates: Mapping[str, Any]) -> None:
    """Shared gates hold connections and leases: give them back (local gates hold nothing)."""
    close = getattr(gates, "close", None)
    if close is not None:
        await close()


async def flush_periodically(engine: Engine) -> None:
    """Results and traces flushed every FLUSH_INTERVAL until cancelled."""
    while True:
        await asyncio.sleep(FLUSH_INTERVAL)
        engine.traces.flush()  # first: a result on disk has its calls' records on disk
        if engine.results is not None:
            engine.results.flush()
