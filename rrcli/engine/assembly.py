"""The one assembly of the engine every front-end runs on (the batch runner, ``rrcli.Pool``):
``open_engine`` checks the keys and a budget's prices, opens the response cache, has the
front-end claim its outputs, builds the gates, the budget over them, the router over both, one
provider per backend, has the front-end open its outputs, lists the observers of every attempt
(the cashier, the trace, health with its probes of a backend down, the -v log, the router, the
tally), and hands back the ``Engine``, every part built whole; ``Engine.close`` takes it down.
``flush_periodically`` flushes its outputs as calls end.

The order is the one that keeps a refusal cheap: what can be checked without touching a file
(a key unset, a budget over an unpriced backend) is checked first, then what can be refused
before anything is sent (the cache file, the outputs, the shared gate), all before a provider
opens a connection."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any, Protocol

from rrcli.config.prices import pool_prices
from rrcli.config.profile import Profile
from rrcli.engine.cached import ResponseCache, open_cache
from rrcli.engine.engine import Engine
from rrcli.engine.money import make_budget, output_caps
from rrcli.engine.observers import Observer, Traced, logged
from rrcli.engine.options import EngineOptions
from rrcli.engine.parts import (
    Preflight,
    Reassembly,
    make_prober,
    make_providers,
    open_gates,
    preflight,
)
from rrcli.engine.quiet import debug_logged
from rrcli.engine.summary import RunSummary
from rrcli.logs import get_logger
from rrcli.records.origins import ResponseOrigins
from rrcli.records.results import ResultSink, ResumeState
from rrcli.records.trace import TraceWriter
from rrcli.routing.cashier import Cashier
from rrcli.routing.control import RunControl
from rrcli.routing.health import Health
from rrcli.routing.router import Router
from rrcli.routing.tally import Tally

__all__ = [
    "FLUSH_INTERVAL",
    "EngineOutputs",
    "Preflight",
    "flush_periodically",
    "make_router",
    "open_engine",
    "open_gates",
    "preflight",
]

log = get_logger("rrcli")

FLUSH_INTERVAL = 0.2  # seconds between flushes of results and traces


class EngineOutputs(Protocol):
    """A front-end's outputs, as the assembly asks for them: ``claim`` before the gates are
    built (the files locked, refused if they cannot be written; what a resumed results file
    already holds, or None), ``open`` once the rest is built (the result sink, None for no
    result lines, and the trace writer, for the run ``summary.run_id``)."""

    def claim(self) -> ResumeState | None: ...

    def open(self, summary: RunSummary) -> tuple[ResultSink | None, TraceWriter]: ...


async def open_engine(
    profile: Profile,
    options: EngineOptions,
    *,
    outputs: EngineOutputs,
    stack: ExitStack,
    summary: RunSummary,
    control: RunControl,
    checked: Preflight | None = None,
    environ: Mapping[str, str] | None = None,
    on_text: Callable[[str], None] | None = None,
    label: Mapping[str, Any] | None = None,
    closable: bool = False,
) -> Engine:
    """The engine of ``profile`` as ``options`` ask, writing to ``outputs``; ``stack`` closes
    the cache and whatever ``outputs`` registered on it, after ``Engine.close``. ``checked``:
    the front-end's own ``preflight`` (else it is made here, from ``environ``); ``on_text``:
    every streamed call's text (--prompt --stream); ``label``: the trace's ``run`` record's
    queue; ``closable``: the engine keeps the tasks whose call is in flight (``sending``), for
    a front-end that closes with calls in flight. Raises UsageError (CacheError,
    OutputExistsError, GateUnavailableError...) with nothing sent."""
    checked = checked or preflight(profile, options, environ)
    seed = options.seed if options.seed is not None else profile.seed
    rng = random.Random(seed)
    cache = _open_cache(profile, options, summary, stack)
    resume = outputs.claim()
    gates = open_gates(profile, rng)
    budget = await make_budget(profile, options, checked.prices, control, gates)
    bindings = resume.sessions if resume is not None else None
    shared = _shared_pool(profile, options, gates)
    router = Router(
        profile,
        gates,
        rng=rng,
        clock=time.monotonic,
        sleep=asyncio.sleep,
        budget=budget,
        bindings=bindings,
        shared=shared,
    )
    providers = make_providers(profile, checked.keys, seed)
    results, traces = outputs.open(summary)
    traces.run(profile, label, options.results)
    origins = ResponseOrigins()
    if resume is not None:
        origins.update(resume.responses.items())
    prices = pool_prices(profile.backends)
    cashier = Cashier(prices, budget)
    addresses = {bid: provider.server_address for bid, provider in providers.items()}
    observers: list[Observer] = [cashier.observe, Traced(traces, addresses).observe]
    recover_after = profile.health.recover_after
    if recover_after is None:
        recover_after = options.recover_after
    defined = {b.id: b for b in profile.backends}
    probe = make_prober(defined, providers)
    parts = Reassembly(options, environ, seed, defined, addresses, prices)
    health = Health(
        router,
        traces,
        control,
        recover_after=recover_after,
        probe=probe,
        lasting=options.lasting,
        shared=shared,
    )
    await health.join()
    observers.append(health.observe)
    if debug_logged():
        observers.append(logged)
    observers.append(router.observe)
    tally = Tally()
    observers.append(tally.observe)
    return Engine(
        profile=profile,
        router=router,
        providers=providers,
        results=results,
        traces=traces,
        summary=summary,
        control=control,
        rng=rng,
        cashier=cashier,
        observers=tuple(observers),
        health=health,
        tally=tally,
        budget=budget,
        gates=gates,
        stream=options.stream,
        on_text=on_text,
        keep_response=options.keep_response,
        cache=cache,
        caps=output_caps(profile)[0] if budget is not None else {},
        origins=origins,
        sending=set() if closable else None,
        reassembly=parts,
    )


def _open_cache(
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


def _shared_pool(profile: Profile, options: EngineOptions, gates: Mapping[str, Any]) -> Any:
    """A lasting engine's (serve, Pool) health and session bindings shared with every process
    serving the pool on its Redis gate (fleet/shared_pool.py); None on a local gate, and for
    a batch run."""
    hub = getattr(gates, "hub", None)
    if hub is None or not options.lasting:
        return None
    from rrcli.fleet.shared_pool import SharedPool

    return SharedPool(hub, profile.label, profile.serve.session_idle)


def make_router(
    profile: Profile, rng: random.Random, *, local: bool = False
) -> tuple[Router, Mapping[str, Any]]:
    """A router without a budget and the gates under it (--dry-run's plan, a display's test)."""
    gates = open_gates(profile, rng, local=local)
    return Router(profile, gates, rng=rng, clock=time.monotonic, sleep=asyncio.sleep), gates


async def flush_periodically(engine: Engine) -> None:
    """Results and traces flushed every FLUSH_INTERVAL until cancelled."""
    while True:
        await asyncio.sleep(FLUSH_INTERVAL)
        engine.traces.flush()  # first: a result on disk has its calls' records on disk
        if engine.results is not None:
            engine.results.flush()
