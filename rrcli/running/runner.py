"""``rrcli run`` as a library call: jobs in, one result per job and one trace record per attempt
out.

``run`` prepares the outputs (outputs.py: refusing to clobber, repairing a torn line on
``--resume``), gets its engine from the one assembly (engine/assembly.py: the router over the
gates, one provider per backend), and starts ``concurrency`` workers (``Engine.worker``) over one
streaming job iterator: no task per job, no queue, so memory stays flat however long the file.
Results and traces are flushed every FLUSH_INTERVAL (engine/assembly.py).

Interruption: ``RunControl.stop()`` (first Ctrl-C) stops dispatching and lets calls in
flight finish for up to DRAIN_TIMEOUT; ``RunControl.cancel()`` (second Ctrl-C) cancels them.
Either way the outputs are flushed and stay consistent: a job has a result line only when it
ended, so ``--resume`` runs the rest.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sized
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rrcli.config.profile import Profile
from rrcli.engine.assembly import Preflight, flush_periodically, open_engine, preflight
from rrcli.engine.engine import Engine
from rrcli.engine.quiet import quiet_unless_configured
from rrcli.engine.summary import RunSummary
from rrcli.logs import get_logger
from rrcli.records.formatfit import refuse_unfit, unfit_invalid
from rrcli.records.jobs import InvalidJob, Job, iter_jobs
from rrcli.records.results import ResultSink, ResumeState
from rrcli.records.trace import TraceWriter, new_run_id
from rrcli.routing.control import RunControl
from rrcli.routing.status import EngineStatus
from rrcli.running.hits import read_ahead
from rrcli.running.lookahead import Lookahead
from rrcli.running.options import RunOptions
from rrcli.running.outputs import open_outputs, output_closed, prepare_results, refuse_clobbering
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

if TYPE_CHECKING:
    from rrcli.otel.live import SpanProcess

__all__ = ["RunControl", "RunOptions", "RunSummary", "SharedQueue", "run", "run_sync"]

log = get_logger("rrcli")

DRAIN_TIMEOUT = 30.0  # seconds the first Ctrl-C lets calls in flight finish


async def run(
    profile: Profile,
    options: RunOptions,
    *,
    environ: Mapping[str, str] | None = None,
    control: RunControl | None = None,
    on_start: Callable[[RunSummary, Engine], None] | None = None,
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
    checked = preflight(profile, options.engine_options, environ)  # UsageError: a key unset...
    start = _Start(checked, otlp_url(options.otlp, environ), control or RunControl(), on_start)
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
    """What ``run`` checked before opening anything: the keys and a budget's prices, the
    --otlp URL, the run's switch and the caller's on_start."""

    checked: Preflight
    otlp: str | None
    control: RunControl
    on_start: Callable[[RunSummary, Engine], None] | None


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
    shared = None if isinstance(jobs_in, Iterator) else jobs_in
    summary = RunSummary(new_run_id(), total=total)
    if shared is not None:
        summary.queue, summary.queue_finished = shared.label["name"], shared.finished
    outputs = _Outputs(options, stack, start.otlp, shared, control)
    engine = await open_engine(
        profile,
        options.engine_options,
        outputs=outputs,
        stack=stack,
        summary=summary,
        control=control,
        checked=start.checked,
        on_text=options.on_text,
        label=None if shared is None else shared.label,
    )
    if shared is not None:
        shared.attach(engine)
    jobs = jobs_in if shared is not None else _selected(jobs_in, options, outputs.resume, summary)
    warmth = engine.warmth
    if shared is None and reader is None and warmth is not None and profile.lookahead:
        jobs = Lookahead(jobs, warmth, profile.lookahead, profile.binding == "session")  # type: ignore[arg-type]
    if start.on_start is not None:
        start.on_start(summary, engine)
    log.info("rrcli.run_started", run_id=summary.run_id, profile=profile.label)
    try:
        await _drive(engine, control, jobs, run_concurrency(options, profile), reader)
    finally:
        engine.ended(None if reader or shared else jobs)  # type: ignore[arg-type]
        await engine.close()
        await close_sender(outputs.sender)
    return summary


class _Outputs:
    """The run's outputs as the engine's assembly asks for them: the results file made ready
    (``resume``: what it already holds), then the result sink and the trace writer, fed to the
    span process of --otlp (``sender``) and to a shared queue when there is one."""

    def __init__(
        self,
        options: RunOptions,
        stack: ExitStack,
        otlp: str | None,
        shared: SharedQueue | None,
        control: RunControl,
    ) -> None:
        self._options, self._stack, self._otlp = options, stack, otlp
        self._shared, self._control = shared, control
        self.resume: ResumeState | None = None
        self.sender: SpanProcess | None = None

    def claim(self) -> ResumeState | None:
        self.resume = prepare_results(self._options, self._stack)
        return self.resume

    def open(self, summary: RunSummary) -> tuple[ResultSink, TraceWriter]:
        self.sender = open_sender(self._otlp, summary.run_id, self._stack)
        closed = output_closed(self._control, summary)
        return open_outputs(
            self._options, summary.run_id, self._stack, self.sender, self._shared, closed
        )


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


def run_concurrency(options: RunOptions, profile: Profile) -> int:
    """Workers of the run: --concurrency, else the profile's; one while text streams to the
    terminal, so answers never interleave."""
    if options.on_text is not None:
        return 1
    return options.concurrency or profile.effective_concurrency


async def _drive(
    engine: Engine,
    control: RunControl,
    jobs: Iterator[Job | InvalidJob] | SharedQueue,
    concurrency: int,
    reader: StoppableReader | None = None,
) -> None:
    """Run up to ``concurrency`` workers (stopped by ``control``) over one job iterator (read by
    a thread from ``reader`` when there is one: workers.py) or a shared queue; flush outputs as
    they go.

    Returns normally however the run is stopped: a call cancelled in flight leaves no result
    line, so ``--resume`` runs its job again. A worker's own failure (a bug) is raised.
    """
    feed = JobFeed(engine.worker, concurrency, control)
    if not isinstance(jobs, Iterator):  # a shared queue
        filling: Awaitable[None] = feed.fill(jobs.fetch)
    else:
        filling = (
            feed.pull(read_ahead(engine, control, jobs))
            if reader is None
            else feed.read(jobs, reader)
        )
    everything = asyncio.ensure_future(filling)
    control.on_cancel(everything.cancel)
    flusher = asyncio.create_task(flush_periodically(engine))
    try:
        await _until_done(everything, engine.status)
    finally:
        flusher.cancel()
        control.on_cancel(None)
    try:
        everything.result()
    except asyncio.CancelledError:  # the workers', cancelled by a stop: not this task's
        if not control.stopping:
            raise


async def _until_done(everything: asyncio.Future[Any], status: Callable[[], EngineStatus]) -> None:
    """Wait for the workers, looking at the engine's ``status`` every quarter second. Once
    stopped (first Ctrl-C) they take no new job and the calls in flight get DRAIN_TIMEOUT to
    finish before they are cancelled; ``cancel`` (second Ctrl-C) cancels them at once
    (``control.on_cancel``)."""
    deadline: float | None = None
    while not everything.done():
        await asyncio.wait([everything], timeout=0.25)
        if deadline is None and (now := status()).stopping:
            deadline = time.monotonic() + DRAIN_TIMEOUT
            in_flight = now.in_flight
            log.info("rrcli.stopping", calls_in_flight=in_flight, drain_s=DRAIN_TIMEOUT)
        elif deadline is not None and time.monotonic() >= deadline:
            everything.cancel()


def run_sync(
    profile: Profile,
    options: RunOptions,
    *,
    environ: Mapping[str, str] | None = None,
    on_start: Callable[[RunSummary, Engine], None] | None = None,
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
