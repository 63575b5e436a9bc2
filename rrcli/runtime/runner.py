"""``rrcli run`` as a library call: jobs in, one result per job and one trace record per attempt
out.

``run`` prepares the outputs (refusing to clobber, repairing a torn line on ``--resume``), builds
the router over the gates and one provider per backend, and starts ``concurrency`` workers
(engine.py) over one streaming job iterator: no task per job, no queue, so memory stays flat
however long the file. Results and traces are flushed every FLUSH_INTERVAL.

Interruption (SPEC §1): ``RunControl.stop()`` (first Ctrl-C) stops dispatching and lets calls in
flight finish for up to DRAIN_TIMEOUT; ``RunControl.cancel()`` (second Ctrl-C) cancels them.
Either way the outputs are flushed and stay consistent: a job has a result line only when it
ended, so ``--resume`` runs the rest.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any, BinaryIO

import structlog

from rrcli.config.profile import Profile
from rrcli.errors import UsageError
from rrcli.providers import make_provider
from rrcli.records.claim import STDIN, OutputClaim, refuse_same_files
from rrcli.records.jobs import InvalidJob, Job, iter_jobs, shard_of
from rrcli.records.results import ResultWriter, ResumeState, prepare_output
from rrcli.records.trace import TraceWriter, new_run_id
from rrcli.runtime.control import RunControl, RunSummary
from rrcli.runtime.engine import Engine
from rrcli.runtime.options import RunOptions
from rrcli.runtime.router import Router
from rrcli.runtime.workers import JobFeed, StoppableReader

__all__ = ["RunControl", "RunOptions", "RunSummary", "run", "run_sync"]

log = structlog.get_logger("rrcli")

FLUSH_INTERVAL = 0.2  # seconds between flushes of results and traces
DRAIN_TIMEOUT = 30.0  # seconds the first Ctrl-C lets calls in flight finish


class CallbackWriter:
    """Hands each result to a callback (``--prompt`` prints answers instead of JSON lines)."""

    def __init__(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self.write = lambda result, body=None: callback(result)

    def flush(self) -> None:
        pass


def select_jobs(
    jobs: Iterator[Job | InvalidJob],
    *,
    done: Any,
    summary: RunSummary,
    shard: tuple[int, int] | None,
    limit: int | None,
) -> Iterator[Job | InvalidJob]:
    """--limit, --shard and --resume applied to the stream of jobs, lazily."""
    taken = 0
    for job in jobs:
        if limit is not None and taken >= limit:
            return
        taken += 1
        if shard is not None and shard_of(job.key, shard[1]) != shard[0]:
            continue
        if done is not None and job.key in done:
            summary.skipped += 1
            continue
        yield job


def count_lines(path: Path | None) -> int | None:
    """Lines in the jobs file (an upper bound of jobs, for the progress display's ETA); None
    unless it is a regular file: a pipe read here would have no jobs left to run."""
    if path is None or not path.is_file():
        return None
    count = 0
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
    return count


async def run(
    profile: Profile,
    options: RunOptions,
    *,
    environ: Mapping[str, str] | None = None,
    control: RunControl | None = None,
    on_start: Callable[[RunSummary, Router], None] | None = None,
) -> RunSummary:
    """Run every selected job of ``options.jobs`` across ``profile``'s pool, writing results and
    traces where ``options`` says, SPEC §1's defaults filled in (``RunOptions.with_defaults``).

    Raises UsageError (nothing sent) when the outputs cannot be prepared or a key is missing.
    ``on_start`` is called once the router exists (the CLI starts its live display there).
    """
    options = options.with_defaults()
    environ = os.environ if environ is None else environ
    control = control or RunControl()
    seed = options.seed if options.seed is not None else profile.seed
    rng = random.Random(seed)
    keys = {b.id: b.credentials.resolve(environ) for b in profile.backends}  # UsageError if unset
    with ExitStack() as stack:
        resume = claim_outputs(options, stack)
        summary = RunSummary(new_run_id())
        router, gates = make_router(profile, rng)
        if resume is not None and resume.sessions:
            router.restore_bindings(resume.sessions)
        providers = {
            b.id: make_provider(b, keys[b.id], retry=profile.retry, seed=seed)
            for b in profile.backends
        }
        source, stream = open_jobs(options, stack)
        summary.total = len(options.prompts) if options.prompts else count_lines(options.jobs)
        results, traces = open_outputs(options, summary.run_id, stack)
        traces.run(profile)
        engine = Engine(
            profile, options.stream, options.on_text, router, providers, results, traces,
            summary, control, rng,
        )  # fmt: skip
        done = resume.ok if (resume is not None and options.resume) else None
        jobs = select_jobs(
            iter_jobs(stream, source),
            done=done,
            summary=summary,
            shard=options.shard,
            limit=options.limit,
        )
        if on_start is not None:
            on_start(summary, router)
        log.info("rrcli.run_started", run_id=summary.run_id, profile=profile.name or None)
        try:
            reader = stream if isinstance(stream, StoppableReader) else None
            await _drive(engine, jobs, run_concurrency(options, profile), reader)
        finally:
            summary.interrupted = control.stopping
            await _close(engine, gates)
    log.info(
        "rrcli.run_finished", run_id=summary.run_id, interrupted=summary.interrupted, **summary.jobs
    )
    return summary


def claim_outputs(options: RunOptions, stack: ExitStack) -> ResumeState | None:
    """The outputs made ready before anything is sent (records/claim.py): never the jobs file nor
    each other, locked until ``stack`` closes, then the results file prepared (--resume read,
    --overwrite truncated). None when results go to a callback."""
    jobs = STDIN if options.jobs is None and not options.prompts else options.jobs
    out = options.out if options.on_result is None else None
    refuse_same_files(jobs, [("--out", out), ("--traces", options.traces)])
    claim = stack.enter_context(closing(OutputClaim()))
    claim.take(out, "results")
    claim.take(options.traces, "traces")
    if options.on_result is not None:
        return None
    return prepare_output(options.out, resume=options.resume, overwrite=options.overwrite)


def open_outputs(
    options: RunOptions, run_id: str, stack: ExitStack
) -> tuple[ResultWriter | CallbackWriter, TraceWriter]:
    """The result sink (a file appended on --resume, or the --prompt callback) and the trace
    writer, both closed by ``stack``."""
    results: ResultWriter | CallbackWriter
    if options.on_result is not None:
        results = CallbackWriter(options.on_result)
    else:
        append = options.resume and options.out is not None and options.out.exists()
        results = ResultWriter(options.out, fmt=options.fmt, append=append)
        stack.callback(results.close)
    traces = TraceWriter(options.traces, run_id)
    stack.callback(traces.close)
    return results, traces


def run_concurrency(options: RunOptions, profile: Profile) -> int:
    """Workers of the run: --concurrency, else the profile's; one while text streams to the
    terminal, so answers never interleave."""
    if options.on_text is not None:
        return 1
    return options.concurrency or profile.effective_concurrency


async def _close(engine: Engine, gates: Mapping[str, Any]) -> None:
    """The run's end, however it ended: the run_end record, outputs flushed, connections and
    shared leases given back."""
    engine.traces.run_end(engine.summary.jobs, engine.summary.interrupted)
    engine.results.flush()
    engine.traces.flush()
    for provider in engine.providers.values():
        await provider.aclose()
    await _close_gates(gates)


def make_router(
    profile: Profile, rng: random.Random, *, local: bool = False
) -> tuple[Router, Mapping[str, Any]]:
    """The router and the gates under it; ``local`` forces in-process gates (--dry-run)."""
    if profile.gate.kind == "redis" and not local:
        from rrcli.runtime.redis_gate import make_redis_gates

        gates = make_redis_gates(profile, rng=rng)  # GateUnavailableError: exit 2, nothing sent
    else:
        from rrcli.runtime.gate import make_gates

        gates = make_gates(profile, clock=time.monotonic)
    return Router(profile, gates, rng=rng, clock=time.monotonic, sleep=asyncio.sleep), gates


async def _close_gates(gates: Mapping[str, Any]) -> None:
    """Shared gates hold connections and leases: give them back (local gates hold nothing)."""
    close = getattr(gates, "close", None)
    if close is not None:
        await close()


def open_jobs(options: RunOptions, stack: ExitStack) -> tuple[str, BinaryIO | StoppableReader]:
    """The jobs' name and stream. A stream that may wait for its writer (a pipe, a terminal, a
    device) comes as a StoppableReader, to be read by a thread (workers.py); ``stack`` closes a
    regular file, the reader thread anything else it opened."""
    if options.prompts:
        import io

        import orjson

        lines = b"".join(
            orjson.dumps({"id": f"prompt-{i + 1}", "prompt": p}) + b"\n"
            for i, p in enumerate(options.prompts)
        )
        return "--prompt", io.BytesIO(lines)
    if options.jobs is None:
        stream = sys.stdin.buffer
    else:
        try:
            stream = open(options.jobs, "rb")  # noqa: SIM115 (closed by stack or the reader)
        except OSError as exc:
            raise UsageError(f"{options.jobs}: cannot read the jobs file: {exc.strerror}") from exc
    source = "<stdin>" if options.jobs is None else str(options.jobs)
    if stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
        if options.jobs is not None:
            stack.enter_context(stream)
        return source, stream
    return source, StoppableReader(stream, close=options.jobs is not None)


async def _drive(
    engine: Engine,
    jobs: Iterator[Job | InvalidJob],
    concurrency: int,
    reader: StoppableReader | None = None,
) -> None:
    """Run up to ``concurrency`` workers over one job iterator (read by a thread from ``reader``
    when there is one: workers.py); flush outputs as they go."""
    control = engine.control
    feed = JobFeed(engine.worker, concurrency, control)
    feeding = feed.pull(jobs) if reader is None else feed.read(jobs, reader)
    everything = asyncio.ensure_future(feeding)

    def cancel() -> None:
        everything.cancel()

    control._cancel = cancel
    flusher = asyncio.create_task(_flush_periodically(engine))
    try:
        while not everything.done():
            done, _ = await asyncio.wait([everything], timeout=0.25)
            if control.stopping and not done:
                # First Ctrl-C: dispatch stopped; give calls in flight DRAIN_TIMEOUT to finish.
                try:
                    await asyncio.wait_for(asyncio.shield(everything), DRAIN_TIMEOUT)
                except TimeoutError:
                    everything.cancel()
        try:
            await everything
        except asyncio.CancelledError:
            if not control.stopping:
                raise
    finally:
        flusher.cancel()
        control._cancel = None


async def _flush_periodically(engine: Engine) -> None:
    while True:
        await asyncio.sleep(FLUSH_INTERVAL)
        engine.results.flush()
        engine.traces.flush()


def run_sync(
    profile: Profile,
    options: RunOptions,
    *,
    environ: Mapping[str, str] | None = None,
    on_start: Callable[[RunSummary, Router], None] | None = None,
    handle_signals: bool = True,
) -> RunSummary:
    """``run`` in a fresh event loop; Ctrl-C drains, a second Ctrl-C cancels (SPEC §1)."""
    control = RunControl()

    async def main() -> RunSummary:
        if handle_signals:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(signal.SIGINT, control.interrupt)
            loop.add_signal_handler(signal.SIGTERM, control.interrupt)
        return await run(profile, options, environ=environ, control=control, on_start=on_start)

    return asyncio.run(main())
