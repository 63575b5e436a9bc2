"""The engine of ``rrcli run``: jobs in, one result per job and one trace record per attempt out.

``concurrency`` worker coroutines pull from one streaming job iterator (no task per job, no queue:
memory stays flat however long the file). For each call a worker asks the router for a slot on a
backend, attempts, and on a transient failure releases the slot, sleeps the policy's delay and
takes a slot on the SAME backend again (SPEC §6-§7). One failing job never cancels its siblings: it
becomes a result and trace records.

Interruption (SPEC §1): ``RunControl.stop()`` (first Ctrl-C) stops dispatching and lets calls in
flight finish for up to ``drain_timeout``; ``RunControl.cancel()`` (second Ctrl-C) cancels them.
Either way the outputs are flushed and stay consistent: a job has a result line only when it
ended, so ``--resume`` runs the rest.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import structlog

from rrcli.errors import NoBackendError, ProviderError, UsageError
from rrcli.jobs import InvalidJob, Job, iter_jobs, shard_of
from rrcli.profile import Profile
from rrcli.providers import make_provider
from rrcli.providers.base import Call, Provider, Reply
from rrcli.results import ResultWriter, prepare_output
from rrcli.retry import RetryPolicy
from rrcli.router import Lease, Router
from rrcli.trace import TraceWriter, new_run_id

__all__ = ["Plan", "RunControl", "RunOptions", "RunSummary", "plan", "run", "run_sync"]

log = structlog.get_logger("rrcli")

FLUSH_INTERVAL = 0.2  # seconds between flushes of results and traces
DRAIN_TIMEOUT = 30.0  # seconds the first Ctrl-C lets calls in flight finish


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What ``rrcli run`` was asked to do. Paths are resolved by the CLI."""

    jobs: Path | None  # None: standard input
    out: Path | None  # None: standard output
    traces: Path | None  # None: no trace file
    fmt: str = "rrcli"
    resume: bool = False
    overwrite: bool = False
    concurrency: int | None = None
    limit: int | None = None
    shard: tuple[int, int] | None = None
    seed: int | None = None
    stream: bool = False
    prompts: tuple[str, ...] = ()  # --prompt: jobs given on the command line
    on_text: Callable[[str], None] | None = None  # --prompt --stream: text as it arrives
    on_result: Callable[[dict[str, Any]], None] | None = None  # results to a callback, not a file


@dataclass(slots=True)
class RunSummary:
    """Counts of a run; ``jobs`` has the keys of the run_end trace record."""

    run_id: str
    ok: int = 0
    error: int = 0
    invalid: int = 0
    skipped: int = 0
    interrupted: bool = False
    total: int | None = None  # jobs expected, when the input could be counted
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        return self.ok + self.error + self.invalid

    @property
    def jobs(self) -> dict[str, int]:
        return {
            "ok": self.ok,
            "error": self.error,
            "invalid": self.invalid,
            "skipped": self.skipped,
        }

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if (self.error or self.invalid) else 0


class RunControl:
    """Stops a run from outside: ``stop()`` drains, ``cancel()`` cancels calls in flight."""

    def __init__(self) -> None:
        self.stopping = False
        self._cancel: Callable[[], None] | None = None

    def stop(self) -> None:
        self.stopping = True

    def cancel(self) -> None:
        self.stopping = True
        if self._cancel is not None:
            self._cancel()

    def interrupt(self) -> None:
        """What Ctrl-C does: the first time drain, the second time cancel."""
        if self.stopping:
            self.cancel()
        else:
            self.stop()


class _Engine:
    """One run's live state: the router, the providers, the writers and the counters."""

    def __init__(
        self,
        profile: Profile,
        options: RunOptions,
        router: Router,
        providers: Mapping[str, Provider],
        results: ResultWriter | _CallbackWriter,
        traces: TraceWriter,
        summary: RunSummary,
        control: RunControl,
        rng: random.Random,
    ) -> None:
        self.profile = profile
        self.options = options
        self.router = router
        self.providers = providers
        self.results = results
        self.traces = traces
        self.summary = summary
        self.control = control
        self.policy = RetryPolicy(profile.retry, rng)
        self.session_binding = profile.binding == "session"
        self.stream = options.stream

    async def worker(self, jobs: Iterator[Job | InvalidJob]) -> None:
        for n, job in enumerate(jobs, 1):
            if self.control.stopping:
                return
            # calls that never suspend (sim at zero latency) must not starve the loop
            if n % 64 == 0:
                await asyncio.sleep(0)
            if isinstance(job, InvalidJob):
                self._write_invalid(job)
            elif job.kind == "session":
                await self._run_session(job)
            else:
                await self._run_single(job)

    def _write_invalid(self, job: InvalidJob) -> None:
        result: dict[str, Any] = {
            "id": job.id,
            "status": "invalid",
            "error": {"type": "invalid_job", "message": job.message},
        }
        if job.duplicate_of is not None:
            result["duplicate_of"] = job.duplicate_of
        self.results.write(result)
        self.summary.invalid += 1

    async def _run_single(self, job: Job) -> None:
        outcome = await self._call(job, list(job.messages), 0)
        if isinstance(outcome, _Failure):
            self._write_error(job, outcome)
            return
        reply, lease, attempts, latency_ms = outcome
        result = {
            "id": job.id,
            "status": "ok",
            "deployment": lease.state.backend.id,
            "model": lease.state.backend.model,
            "output": reply.output,
            "finish_reason": reply.finish_reason,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
            "attempts": attempts,
            "latency_ms": latency_ms,
            "metadata": job.metadata or {},
        }
        if reply.reasoning_content:
            result["reasoning_content"] = reply.reasoning_content
        if self.session_binding:
            result["session"] = job.session
        self.results.write(result, body=reply.body)
        self.summary.ok += 1

    async def _run_session(self, job: Job) -> None:
        history = list(job.messages)
        turns: list[dict[str, Any]] = []
        attempts = 0
        latency_ms = 0.0
        usage = {"input_tokens": 0, "output_tokens": 0}
        last_deployment = last_model = finish_reason = None
        for turn, text in enumerate(job.turns):
            history.append({"role": "user", "content": text})
            outcome = await self._call(job, history, turn)
            if isinstance(outcome, _Failure):
                outcome.turns = turns
                self._write_error(job, outcome)
                return
            reply, lease, n, ms = outcome
            attempts += n
            latency_ms += ms
            last_deployment = lease.state.backend.id
            last_model = lease.state.backend.model
            finish_reason = reply.finish_reason
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.output}
            entry: dict[str, Any] = {
                "output": reply.output,
                "deployment": last_deployment,
                "usage": {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens},
            }
            if reply.reasoning_content:
                assistant["reasoning_content"] = reply.reasoning_content
                entry["reasoning_content"] = reply.reasoning_content
            history.append(assistant)
            turns.append(entry)
            usage["input_tokens"] += reply.input_tokens or 0
            usage["output_tokens"] += reply.output_tokens or 0
        final = turns[-1] if turns else {"output": ""}
        result = {
            "id": job.id,
            "status": "ok",
            "deployment": last_deployment,
            "model": last_model,
            "output": final["output"],
            "finish_reason": finish_reason,
            "usage": usage,
            "attempts": attempts,
            "latency_ms": round(latency_ms, 3),
            "metadata": job.metadata or {},
            "session": job.session,
            "turns": turns,
        }
        self.results.write(result)
        self.summary.ok += 1

    def _write_error(self, job: Job, failure: _Failure) -> None:
        result: dict[str, Any] = {
            "id": job.id,
            "status": "error",
            "deployment": failure.deployment,
            "attempts": failure.attempts,
            "error": failure.error,
            "metadata": job.metadata or {},
        }
        if self.session_binding or job.kind == "session":
            result["session"] = job.session
        if failure.turns:
            result["turns"] = failure.turns
        self.results.write(result)
        self.summary.error += 1

    async def _call(
        self, job: Job, messages: list[dict[str, Any]], turn: int
    ) -> tuple[Reply, Lease, int, float] | _Failure:
        """One call of a job, with its retries on one backend (and failover when enabled)."""
        tried: set[str] = set()
        attempts = 0
        last: _Failure | None = None
        while True:
            routed_at = time.monotonic()  # queue_ms counts the wait for a slot from here
            try:
                lease = await self.router.acquire(
                    session=job.session if self.session_binding else None,
                    exclude=frozenset(tried),
                )
            except NoBackendError as exc:
                # failover found no backend left to try: the last real error is the job's
                return last or _Failure(None, attempts, {"type": "no_backend", "message": str(exc)})
            tried.add(lease.state.backend.id)
            failover = self.profile.retry.failover and len(tried) < len(self.router.states)
            held = True
            try:
                outcome, attempts, moving = await self._attempts(
                    job, messages, turn, lease, attempts, routed_at, failover
                )
                held = False  # _attempts released the slot
            finally:
                if held:  # cancelled while holding the slot
                    await asyncio.shield(self.router.release(lease))
            if not isinstance(outcome, ProviderError):
                return outcome[0], lease, attempts, outcome[1]
            last = _Failure(lease.state.backend.id, attempts, outcome.as_dict())
            if not moving:
                return last
            # failover: route again among the backends not yet tried

    async def _attempts(
        self,
        job: Job,
        messages: list[dict[str, Any]],
        turn: int,
        lease: Lease,
        attempt: int,
        routed_at: float,
        failover: bool = False,
    ) -> tuple[tuple[Reply, float] | ProviderError, int, bool]:
        """Attempts of one call on the leased backend; returns with the slot released: the
        outcome, the number of the turn's last attempt, and whether the call moves on to another
        backend (``failover`` allowed it and the budget here was spent on a transient error).
        ``attempt``: attempts the turn made before, on backends failover left; ``routed_at``:
        when the routing decision began (queue_ms counts from there)."""
        router = self.router
        state = lease.state
        backend = state.backend
        provider = self.providers[backend.id]
        params = {**backend.params, **job.params}
        # --stream, a job's own "stream", or `stream = true` in the backend's params
        stream = self.stream or bool(job.stream) or bool(params.pop("stream", False))
        call = Call(messages, params, stream)
        estimate = _estimate_tokens(messages, params)
        printed = False

        def on_text(text: str) -> None:
            nonlocal printed
            printed = True
            self.options.on_text(text)  # type: ignore[misc]

        sink = on_text if (stream and self.options.on_text is not None) else None
        t_queue, first_try = routed_at, time.monotonic()
        first = attempt + 1
        paused: Reply | None = None
        while True:
            attempt += 1
            await state.gate.reserve(estimate)
            t0 = time.monotonic()
            queue_ms = (t0 - t_queue) * 1000.0
            ts_start = time.time()
            try:
                reply = await provider.send(call, sink)
            except ProviderError as error:
                t1 = time.monotonic()
                router.observe(state, latency_ms=None, error=error)
                retry = attempt - first + 1
                delay = None if printed else self.policy.delay(retry, error, t1 - first_try)
                moving = delay is None and failover and error.transient and not printed
                self._trace(
                    job,
                    turn,
                    attempt,
                    lease,
                    "retry" if (delay is not None or moving) else "error",
                    ts_start,
                    t0,
                    t1,
                    queue_ms,
                    stream,
                    error=error,
                    retry_after_ms=_ms(error.retry_after),
                    backoff_ms=_ms(delay),
                )
                await router.release(lease)
                if delay is None:
                    return error, attempt, moving
                log.info(
                    "rrcli.retry_scheduled",
                    job_id=job.id,
                    backend=backend.id,
                    attempt=attempt,
                    error_type=error.type,
                    delay_s=round(delay, 3),
                )
                await asyncio.sleep(delay)
                t_queue = time.monotonic()
                await router.reacquire(lease)
                continue
            t1 = time.monotonic()
            latency_ms = round((t1 - t0) * 1000.0, 3)
            router.observe(state, latency_ms=latency_ms, error=None, pause=reply.pause_s)
            if reply.input_tokens is not None or reply.output_tokens is not None:
                actual = (reply.input_tokens or 0) + (reply.output_tokens or 0)
                await state.gate.settle(estimate, actual)
            self._trace(
                job, turn, attempt, lease, "ok", ts_start, t0, t1, queue_ms, stream, reply=reply
            )
            if paused is not None:  # the end of a paused turn: join the parts
                reply = _join(paused, reply)
            if reply.continuation is None:
                await router.release(lease)
                return (reply, latency_ms), attempt, False
            # Anthropic pause_turn: continue the same turn on the same backend, same slot.
            paused = reply
            messages = [*messages, reply.continuation]
            call = Call(messages, params, stream)
            t_queue = time.monotonic()

    def _trace(
        self,
        job: Job,
        turn: int,
        attempt: int,
        lease: Lease,
        outcome: str,
        ts_start: float,
        t0: float,
        t1: float,
        queue_ms: float,
        stream: bool,
        *,
        reply: Reply | None = None,
        error: ProviderError | None = None,
        retry_after_ms: float | None = None,
        backoff_ms: float | None = None,
    ) -> None:
        backend = lease.state.backend
        provider = self.providers[backend.id]
        self.traces.call(
            job_id=job.id,
            session=job.session,
            turn=turn,
            attempt=attempt,
            deployment=backend.id,
            provider=backend.provider,
            model=backend.model,
            response_model=reply.response_model if reply else None,
            server_address=provider.server_address,
            binding=lease.binding,
            outcome=outcome,
            http_status=reply.http_status if reply else (error.status_code if error else None),
            error_type=error.type if error else None,
            retry_after_ms=retry_after_ms,
            backoff_ms=backoff_ms,
            queue_ms=round(queue_ms, 3),
            ts_start=ts_start,
            ts_end=ts_start + (t1 - t0),
            latency_ms=round((t1 - t0) * 1000.0, 3),
            ttft_ms=reply.ttft_ms if reply else None,
            input_tokens=reply.input_tokens if reply else None,
            output_tokens=reply.output_tokens if reply else None,
            stream=stream,
        )


class _CallbackWriter:
    """Hands each result to a callback (``--prompt`` prints answers instead of JSON lines)."""

    def __init__(self, callback: Callable[[dict[str, Any]], None]) -> None:
        self.write = lambda result, body=None: callback(result)

    def flush(self) -> None:
        pass


def _join(first: Reply, rest: Reply) -> Reply:
    """A turn continued after Anthropic's pause_turn: one output, the usage of both calls."""

    def add(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    rest.output = first.output + rest.output
    rest.input_tokens = add(first.input_tokens, rest.input_tokens)
    rest.output_tokens = add(first.output_tokens, rest.output_tokens)
    if first.reasoning_content:
        rest.reasoning_content = first.reasoning_content + (rest.reasoning_content or "")
    if rest.ttft_ms is None:
        rest.ttft_ms = first.ttft_ms
    if first.body is not None and rest.body is not None:  # batch formats write the body
        rest.body = _join_bodies(first.body, rest.body)
    return rest


def _join_bodies(first: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
    """One Anthropic message of a paused turn's two: both parts' content blocks, usage summed."""
    joined = dict(rest)
    if isinstance(first.get("content"), list) and isinstance(rest.get("content"), list):
        joined["content"] = first["content"] + rest["content"]
    a, b = first.get("usage"), rest.get("usage")
    if isinstance(a, dict) and isinstance(b, dict):
        joined["usage"] = {
            k: a.get(k, 0) + v if isinstance(v, int) and isinstance(a.get(k, 0), int) else v
            for k, v in b.items()
        }
    return joined


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


@dataclass(slots=True)
class _Failure:
    deployment: str | None
    attempts: int
    error: dict[str, Any]
    turns: list[dict[str, Any]] | None = None


def _estimate_tokens(messages: list[dict[str, Any]], params: Mapping[str, Any]) -> int:
    """Tokens a call may cost, for rpm/tpm budgets: ~4 characters a token, plus max output."""
    chars = 0
    for message in messages:
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else len(str(content))
    out = params.get("max_tokens") or params.get("max_completion_tokens") or 0
    return chars // 4 + 4 * len(messages) + (out if isinstance(out, int) else 0)


def _select(
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


def _count_lines(path: Path | None) -> int | None:
    """Lines in the jobs file (an upper bound of jobs, for the progress display's ETA)."""
    if path is None:
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
    """Run every selected job of ``options.jobs`` across ``profile``'s pool.

    Raises UsageError (nothing sent) when the outputs cannot be prepared or a key is missing.
    ``on_start`` is called once the router exists (the CLI starts its live display there).
    """
    environ = os.environ if environ is None else environ
    control = control or RunControl()
    seed = options.seed if options.seed is not None else profile.seed
    rng = random.Random(seed)
    keys = {b.id: b.credentials.resolve(environ) for b in profile.backends}  # UsageError if unset
    resume = None
    if options.on_result is None:
        resume = prepare_output(options.out, resume=options.resume, overwrite=options.overwrite)
    summary = RunSummary(new_run_id())
    router, gates = _make_router(profile, rng)
    if resume is not None and resume.sessions:
        router.restore_bindings(resume.sessions)
    providers = {
        b.id: make_provider(b, keys[b.id], retry=profile.retry, seed=seed) for b in profile.backends
    }
    with ExitStack() as stack:
        source, stream = _open_jobs(options, stack)
        summary.total = len(options.prompts) if options.prompts else _count_lines(options.jobs)
        append = options.resume and options.out is not None and options.out.exists()
        results: ResultWriter | _CallbackWriter
        if options.on_result is not None:
            results = _CallbackWriter(options.on_result)
        else:
            results = ResultWriter(options.out, fmt=options.fmt, append=append)
            stack.callback(results.close)
        traces = TraceWriter(options.traces, summary.run_id)
        stack.callback(traces.close)
        traces.run(profile)
        engine = _Engine(
            profile, options, router, providers, results, traces, summary, control, rng
        )
        jobs = _select(
            iter_jobs(stream, source),
            done=resume.ok if (resume is not None and options.resume) else None,
            summary=summary,
            shard=options.shard,
            limit=options.limit,
        )
        if on_start is not None:
            on_start(summary, router)
        log.info("rrcli.run_started", run_id=summary.run_id, profile=profile.name or None)
        try:
            concurrency = options.concurrency or profile.effective_concurrency
            if options.on_text is not None:  # text printed as it arrives: one answer at a time
                concurrency = 1
            await _drive(engine, jobs, concurrency)
        finally:
            summary.interrupted = control.stopping
            traces.run_end(summary.jobs, summary.interrupted)
            results.flush()
            traces.flush()
            for provider in providers.values():
                await provider.aclose()
            await _close_gates(gates)
    log.info(
        "rrcli.run_finished", run_id=summary.run_id, interrupted=summary.interrupted, **summary.jobs
    )
    return summary


def _make_router(
    profile: Profile, rng: random.Random, *, local: bool = False
) -> tuple[Router, Mapping[str, Any]]:
    """The router and the gates under it; ``local`` forces in-process gates (--dry-run)."""
    if profile.gate.kind == "redis" and not local:
        from rrcli.redis_gate import make_redis_gates

        gates = make_redis_gates(profile, rng=rng)  # GateUnavailableError: exit 2, nothing sent
    else:
        from rrcli.gate import make_gates

        gates = make_gates(profile, clock=time.monotonic, rng=rng)
    return Router(profile, gates, rng=rng, clock=time.monotonic, sleep=asyncio.sleep), gates


async def _close_gates(gates: Mapping[str, Any]) -> None:
    """Shared gates hold connections and leases: give them back (local gates hold nothing)."""
    close = getattr(gates, "close", None)
    if close is not None:
        await close()


def _open_jobs(options: RunOptions, stack: ExitStack) -> tuple[str, BinaryIO]:
    if options.prompts:
        import io

        import orjson

        lines = b"".join(
            orjson.dumps({"id": f"prompt-{i + 1}", "prompt": p}) + b"\n"
            for i, p in enumerate(options.prompts)
        )
        return "--prompt", io.BytesIO(lines)
    if options.jobs is None:
        return "<stdin>", sys.stdin.buffer
    try:
        return str(options.jobs), stack.enter_context(open(options.jobs, "rb"))
    except OSError as exc:
        raise UsageError(f"{options.jobs}: cannot read the jobs file: {exc.strerror}") from exc


async def _drive(engine: _Engine, jobs: Iterator[Job | InvalidJob], concurrency: int) -> None:
    """Run ``concurrency`` workers over one job iterator; flush outputs as they go."""
    control = engine.control
    workers = [asyncio.create_task(engine.worker(jobs)) for _ in range(concurrency)]
    everything = asyncio.gather(*workers)

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


async def _flush_periodically(engine: _Engine) -> None:
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


@dataclass(slots=True)
class Plan:
    """What ``--dry-run`` prints: routing on paper, nothing sent."""

    jobs: int = 0
    invalid: int = 0
    skipped: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    input_tokens: dict[str, int] = field(default_factory=dict)
    input_cost: dict[str, float] | None = None


async def plan(profile: Profile, options: RunOptions) -> Plan:
    """Parse, validate and route every selected job on paper, with an idle pool; send nothing."""
    seed = options.seed if options.seed is not None else profile.seed
    router, _ = _make_router(profile, random.Random(seed), local=True)
    result = Plan(calls={b.id: 0 for b in profile.backends})
    result.input_tokens = dict.fromkeys(result.calls, 0)
    summary = RunSummary("dry-run")
    session_binding = profile.binding == "session"
    with ExitStack() as stack:
        source, stream = _open_jobs(options, stack)
        jobs = _select(iter_jobs(stream, source), done=None, summary=summary,
                       shard=options.shard, limit=options.limit)  # fmt: skip
        for job in jobs:
            if isinstance(job, InvalidJob):
                result.invalid += 1
                continue
            result.jobs += 1
            history = list(job.messages)
            for text in job.turns or (None,):
                if text is not None:
                    history.append({"role": "user", "content": text})
                lease = await router.acquire(session=job.session if session_binding else None)
                await router.release(lease)
                backend_id = lease.state.backend.id
                result.calls[backend_id] += 1
                result.input_tokens[backend_id] += _estimate_tokens(history, {})
    prices = {b.id: b.price for b in profile.backends if b.price is not None}
    if prices:
        result.input_cost = {
            bid: result.input_tokens[bid] * price.input / 1e6 for bid, price in prices.items()
        }
    return result
