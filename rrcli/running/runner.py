"""``rrcli run`` as a library call: jobs in, one result per job and one trace record per attempt
out.

``run`` prepares the outputs (outputs.py: refusing to clobber, repairing a torn line on
``--resume``), builds the router over the gates and one provider per backend, and starts
``concurrency`` workers (engine.py) over one streaming job iterator: no task per job, no queue,
so memory stays flat however long the file. Results and traces are flushed every FLUSH_INTERVAL.

Interruption: ``RunControl.stop()`` (first Ctrl-C) stops dispatching and lets calls in
flight finish for up to DRAIN_TIMEOUT; ``RunControl.cancel()`` (second Ctrl-C) cancels them.
Either way the outputs are flushed and stay consistent: a job has a result line only when it
ended, so ``--resume`` runs the rest.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sized
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

from rrcli.config.profile import Profile
from rrcli.logs import get_logger
from rrcli.providers import make_provider
from rrcli.records.formatfit import refuse_unfit, unfit_invalid
from rrcli.records.jobs import InvalidJob, Job, iter_jobs
from rrcli.records.results import ResumeState
from rrcli.records.trace import new_run_id
from rrcli.routing.control import RunControl
from rrcli.routing.router import Router
from rrcli.running.cached import ResponseCache, open_cache
from rrcli.running.engine import Engine
from rrcli.running.failures import log_repeated
from rrcli.running.hits import read_ahead
from rrcli.running.lookahead import Lookahead
from rrcli.running.money import budget_prices, final_halt, make_budget, output_caps
from rrcli.running.options import RunOptions
from rrcli.running.outputs import open_outputs, output_closed, prepare_results, refuse_clobbering
from rrcli.running.quiet import quiet_unless_configured
from rrcli.running.summary import RunSummary
from rrcli.running.telemetry import close_sender, open_sender, otlp_url
from rrcli.running.workers import (
    JobFeed,
    SharedQueue,
    StoppableReader,
    count_lines,
    open_jobs,
    planned_total,
    select_jobs,
)

__all__ = ["RunControl", "RunOptions", "RunSummary", "SharedQueue", "run", "run_sync"]

log = get_logger("rrcli")

FLUSH_INTERVAL = 0.2  # seconds between flushes of results and traces
DRAIN_TIMEOUT = 30.0  # seconds the first Ctrl-C lets calls in flight finish


async def run(
    profile: Profile,
    options: RunOptions,
    *,
    environ: Mapping[str, str] | None = None,
    control: RunControl | None = None,
    on_start: Callable[[RunSummary, Router], None] | None = None,
    queue: SharedQueue | None = None,
) -> RunSummary:
    """Run every selected job of ``options.jobs`` (or of ``queue``, or of the shared queue
    ``options.queue`` names) across ``profile``'s pool, writing results and traces where
    ``options`` says, the default outputs filled in (``RunOptions.with_defaults``).

    Raises UsageError (nothing sent) when the outputs cannot be prepared, a key or a budget's
    price is missing, or the jobs are not JSON Lines. ``on_start`` is called once the router
    exists (the CLI starts its live display there)."""
    quiet_unless_configured()
    options = options.with_defaults()
    environ = os.environ if environ is None else environ
    keys = _keys(profile, environ)  # UsageError if one is unset
    prices = budget_prices(profile, options)  # UsageError: a budget with an unpriced backend
    start = _Start(keys, prices, otlp_url(options.otlp, environ), control or RunControl(), on_start)
    if queue is None and options.queue is not None:
        from rrcli.fleet.queue import RedisQueue

        queue = RedisQueue(
            profile, options.queue, options.job_path, run_concurrency(options, profile)
        )
    with ExitStack() as stack:
        refuse_clobbering(options)
        if options.job_path is not None and options.job_path.is_file():
            refuse_unfit(options.job_path, options.fmt)  # jobs whose answers --format would drop
        if queue is not None:
            total = await queue.open()
            try:
                return await _run_open(profile, options, stack, start, queue, total)
            finally:
                await queue.close()
        source, stream = open_jobs(options, stack)
        lines = unfit_invalid(iter_jobs(stream, source), options.fmt)  # UsageError: not JSON Lines
        total = len(options.prompts) or _job_count(options)
        reader = stream if isinstance(stream, StoppableReader) else None
        return await _run_open(profile, options, stack, start, lines, total, reader)


def _job_count(options: RunOptions) -> int | None:
    """How many jobs the run has at most, for the display's ETA; None when unknown."""
    dicts = options.job_dicts
    if dicts is not None:
        return len(dicts) if isinstance(dicts, Sized) else None
    return count_lines(options.job_path)


@dataclass(frozen=True, slots=True)
class _Start:
    """What ``run`` checked before opening anything: the keys, a budget's prices, the --otlp
    URL, the run's switch and the caller's on_start."""

    keys: Mapping[str, str | None]
    prices: Any
    otlp: str | None
    control: RunControl
    on_start: Callable[[RunSummary, Router], None] | None


async def _run_open(
    profile: Profile,
    options: RunOptions,
    stack: ExitStack,
    start: _Start,
    jobs_in: Iterator[Job | InvalidJob] | SharedQueue,
    total: int | None,
    reader: StoppableReader | None = None,
) -> RunSummary:
    """The run once its jobs are open (an iterator of the file's lines, read by a thread from
    ``reader`` when there is one, or a shared queue): the results made ready, the engine built,
    the workers driven, everything closed."""
    control = start.control
    seed = options.seed if options.seed is not None else profile.seed
    rng = random.Random(seed)
    shared = None if isinstance(jobs_in, Iterator) else jobs_in
    summary = RunSummary(new_run_id(), total=total)
    if shared is not None:
        summary.queue, summary.queue_finished = shared.label["name"], shared.finished
    cache = _open_cache(profile, options, summary, stack)  # CacheError: exit 2, nothing sent
    resume = prepare_results(options, stack)
    router, gates = await _routing(profile, options, start, rng, resume)
    providers = make_providers(profile, start.keys, seed)
    sender = open_sender(start.otlp, summary.run_id, stack)
    closed = output_closed(control, summary)
    results, traces = open_outputs(options, summary.run_id, stack, sender, shared, closed)
    written = None if options.on_result is not None else options.out_file
    traces.run(profile, None if shared is None else shared.label, written)
    engine = Engine(
        profile,
        options.stream,
        options.on_text,
        router,
        providers,
        results,
        traces,
        summary,
        control,
        rng,
        options.keep_response,
        cache,
    )
    if router.budget is not None:
        engine.caps = output_caps(profile)[0]
    engine.origins.update(resume.responses.items() if resume is not None else ())
    if shared is not None:
        shared.attach(engine)
    jobs = jobs_in if shared is not None else _selected(jobs_in, options, resume, summary)
    if shared is None and reader is None and router.warm and profile.lookahead:
        jobs = Lookahead(jobs, router, profile.lookahead, profile.binding == "session")  # type: ignore[arg-type]
    if start.on_start is not None:
        start.on_start(summary, router)
    log.info("rrcli.run_started", run_id=summary.run_id, profile=profile.label)
    try:
        await _drive(engine, jobs, run_concurrency(options, profile), reader)
    finally:
        _ended(summary, control, router, None if reader or shared else jobs)  # type: ignore[arg-type]
        await _close(engine, gates)
        await close_sender(sender)
    return summary


async def _routing(
    profile: Profile,
    options: RunOptions,
    start: _Start,
    rng: random.Random,
    resume: ResumeState | None,
) -> tuple[Router, Any]:
    """The run's router and gates, its budget on them, and the sessions a resumed file bound."""
    router, gates = make_router(profile, rng)
    router.budget = await make_budget(profile, options, start.prices, start.control, gates)
    if resume is not None and resume.sessions:
        router.restore_bindings(resume.sessions)
    return router, gates


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


def _ended(
    summary: RunSummary, control: RunControl, router: Router, rest: Iterator[Any] | None
) -> None:
    """How the run ended, on its summary: interrupted, or halted (a budget's halt says the
    spend and the jobs not run once the calls in flight finished; ``rest``: the jobs never
    handed out, None when they came from a pipe)."""
    summary.halted = control.halted
    budget = router.budget
    refused = budget is not None and budget.refused and not control.stopping
    if budget and (refused or (summary.halted and summary.halted.reason == "budget")):
        summary.halted = final_halt(budget, summary, rest)
    summary.interrupted = control.stopping and control.halted is None


def _selected(
    lines: Iterator[Job | InvalidJob],
    options: RunOptions,
    resume: ResumeState | None,
    summary: RunSummary,
) -> Iterator[Job | InvalidJob]:
    """The jobs this run sends: its shard, its limit, and on --resume those without an ok line;
    the summary's total made theirs (an estimate for a shard until the file ends)."""
    total = planned_total(summary.total, options.shard, options.limit)
    summary.total, summary.total_estimated = total
    done = resume.ok if (resume is not None and options.resume) else None
    return select_jobs(lines, done=done, summary=summary, shard=options.shard, limit=options.limit)


def _open_cache(
    profile: Profile, options: RunOptions, summary: RunSummary, stack: ExitStack
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


def run_concurrency(options: RunOptions, profile: Profile) -> int:
    """Workers of the run: --concurrency, else the profile's; one while text streams to the
    terminal, so answers never interleave."""
    if options.on_text is not None:
        return 1
    return options.concurrency or profile.effective_concurrency


async def _close(engine: Engine, gates: Mapping[str, Any]) -> None:
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


async def _close_gates(gates: Mapping[str, Any]) -> None:
    """Shared gates hold connections and leases: give them back (local gates hold nothing)."""
    close = getattr(gates, "close", None)
    if close is not None:
        await close()


async def _drive(
    engine: Engine,
    jobs: Iterator[Job | InvalidJob] | SharedQueue,
    concurrency: int,
    reader: StoppableReader | None = None,
) -> None:
    """Run up to ``concurrency`` workers over one job iterator (read by a thread from ``reader``
    when there is one: workers.py) or a shared queue; flush outputs as they go.

    Returns normally however the run is stopped: a call cancelled in flight leaves no result
    line, so ``--resume`` runs its job again. A worker's own failure (a bug) is raised.
    """
    control = engine.control
    feed = JobFeed(engine.worker, concurrency, control)
    if not isinstance(jobs, Iterator):  # a shared queue
        filling: Awaitable[None] = feed.fill(jobs.fetch)
    else:
        filling = feed.pull(read_ahead(engine, jobs)) if reader is None else feed.read(jobs, reader)
    everything = asyncio.ensure_future(filling)
    control._cancel = everything.cancel
    flusher = asyncio.create_task(_flush_periodically(engine))
    try:
        await _until_done(everything, control, engine.router)
    finally:
        flusher.cancel()
        control._cancel = None
    try:
        everything.result()
    except asyncio.CancelledError:  # the workers', cancelled by a stop: not this task's
        if not control.stopping:
            raise


async def _until_done(everything: asyncio.Future[Any], control: RunControl, router: Router) -> None:
    """Wait for the workers. Once stopped (first Ctrl-C) they take no new job and the calls in
    flight get DRAIN_TIMEOUT to finish before they are cancelled; ``cancel`` (second Ctrl-C)
    cancels them at once (``control._cancel``)."""
    deadline: float | None = None
    while not everything.done():
        await asyncio.wait([everything], timeout=0.25)
        if control.stopping and deadline is None:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            in_flight = sum(state.in_flight for state in router.states)
            log.info("rrcli.stopping", calls_in_flight=in_flight, drain_s=DRAIN_TIMEOUT)
        elif deadline is not None and time.monotonic() >= deadline:
            everything.cancel()


async def _flush_periodically(engine: Engine) -> None:
    while True:
        await asyncio.sleep(FLUSH_INTERVAL)
        engine.traces.flush()  # first: a result on disk has its calls' records on disk
        if engine.results is not None:
            engine.results.flush()


def run_sync(
    profile: Profile,
    options: RunOptions,
    *,
    environ: Mapping[str, str] | None = None,
    on_start: Callable[[RunSummary, Router], None] | None = None,
    handle_signals: bool = True,
    control: RunControl | None = None,
) -> RunSummary:
    """``run`` in a fresh event loop; Ctrl-C drains, a second Ctrl-C cancels.
    ``control``: the run's switch, for a caller that shows or drives it (the live display)."""
    control = control or RunControl()

    async def main() -> RunSummary:
        if handle_signals:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, control.interrupt)
            loop.add_signal_handler(signal.SIGTERM, control.interrupt)
        return await run(profile, options, environ=environ, control=control, on_start=on_start)

    return asyncio.run(main())
