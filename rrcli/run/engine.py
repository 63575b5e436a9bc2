"""What happens to one job: route, take the gate, attempt, retry on the same backend, trace
each attempt, write the result once (SPEC §6-§7).

``Engine.worker`` is one of the run's ``concurrency`` coroutines; every worker pulls from one
shared job iterator. On a transient failure the slot is released, the policy's delay slept, and a
slot on the SAME backend taken again; with ``failover`` a spent budget routes the call among the
backends not yet tried. One failing job never cancels its siblings: it becomes a result and trace
records. ``runner.py`` sets the run up around the workers (outputs, signals, flushing).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from rrcli.config.profile import Profile
from rrcli.errors import NoBackendError, ProviderError
from rrcli.providers.base import Call, Provider, Reply
from rrcli.providers.translate import dialect_of
from rrcli.records.jobs import InvalidJob, Job
from rrcli.records.trace import TraceWriter
from rrcli.run.eligibility import Eligibility
from rrcli.run.retry import RetryPolicy
from rrcli.run.router import Lease, Router

__all__ = ["Engine", "ResultSink", "RunControl", "RunSummary", "estimate_tokens"]

log = structlog.get_logger("rrcli")


class ResultSink(Protocol):
    """Where results go: a ResultWriter, or a callback for ``--prompt``."""

    def write(self, result: dict[str, Any], *, body: dict[str, Any] | None = None) -> None: ...

    def flush(self) -> None: ...


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


class Engine:
    """One run's live state: the router, the providers, the writers and the counters."""

    def __init__(
        self,
        profile: Profile,
        stream: bool,
        on_text: Callable[[str], None] | None,
        router: Router,
        providers: Mapping[str, Provider],
        results: ResultSink,
        traces: TraceWriter,
        summary: RunSummary,
        control: RunControl,
        rng: random.Random,
    ) -> None:
        self.profile = profile
        self.on_text = on_text
        self.router = router
        self.providers = providers
        self.results = results
        self.traces = traces
        self.summary = summary
        self.control = control
        self.policy = RetryPolicy(profile.retry, rng)
        self.session_binding = profile.binding == "session"
        self.stream = stream
        self.eligibility = Eligibility(profile.backends)

    async def worker(self, jobs: Iterator[Job | InvalidJob]) -> None:
        for n, job in enumerate(jobs, 1):
            if self.control.stopping:
                return
            # calls that never suspend (sim at zero latency) must not starve the loop
            if n % 64 == 0:
                await asyncio.sleep(0)
            if isinstance(job, InvalidJob):
                self._write_invalid(job)
                continue
            _, refusal = self.eligibility.check(job.params, dialect_of(job.kind))
            if refusal is not None:  # no backend's API can express the job's params
                message = f"line {job.line}: {refusal}"
                self._write_invalid(InvalidJob(job.id, job.line, message))  # type: ignore[arg-type]
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
        excluded, _ = self.eligibility.check(job.params, dialect_of(job.kind))
        attempts = 0
        last: _Failure | None = None
        while True:
            routed_at = time.monotonic()  # queue_ms counts the wait for a slot from here
            try:
                lease = await self.router.acquire(
                    session=job.session if self.session_binding else None,
                    exclude=excluded.union(tried),
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
        dialect = dialect_of(job.kind)
        call = Call(messages, params, stream, dialect)
        estimate = estimate_tokens(messages, params)
        printed = False

        def on_text(text: str) -> None:
            nonlocal printed
            printed = True
            self.on_text(text)  # type: ignore[misc]

        sink = on_text if (stream and self.on_text is not None) else None
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
            call = Call(messages, params, stream, dialect)
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


def estimate_tokens(messages: list[dict[str, Any]], params: Mapping[str, Any]) -> int:
    """Tokens a call may cost, for rpm/tpm budgets: ~4 characters a token, plus max output."""
    chars = 0
    for message in messages:
        content = message.get("content")
        chars += len(content) if isinstance(content, str) else len(str(content))
    out = params.get("max_tokens") or params.get("max_completion_tokens") or 0
    return chars // 4 + 4 * len(messages) + (out if isinstance(out, int) else 0)
