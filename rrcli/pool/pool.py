"""The pool a program calls: ``rrcli.Pool``, the engine of ``rrcli run`` in-process.

Each call is a job handed to the one engine (``Engine.submit``): routed, gated, retried, failed
over, health-checked, budgeted, cached and traced exactly as a line of a jobs file, and answered
with the record its result line would hold. ``rrcli serve`` puts the HTTP APIs in front of the
same pools (``Pool.submit`` with the request's job, ``records.jobs.request_job``)::

    async with rrcli.Pool.from_profile("pool.toml") as pool:
        record = await pool.chat([{"role": "user", "content": "Hi"}])
        async for piece in pool.stream([{"role": "user", "content": "Hi"}]):
            ...  # text as it arrives, then the record (a dict)

A call that ends without an answer raises ``CallError`` (its ``result`` the record).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from rrcli.config.load import load_profile
from rrcli.config.profile import SERVE_RECOVER_AFTER, Profile
from rrcli.engine.assembly import flush_periodically, open_engine
from rrcli.engine.echo import OnText
from rrcli.engine.engine import Engine, Reloaded
from rrcli.engine.options import EngineOptions
from rrcli.engine.quiet import quiet_unless_configured
from rrcli.engine.summary import RunSummary
from rrcli.errors import CallError, EngineClosed, Halted, NoHealthyBackend
from rrcli.records.attempt import CallOutcome
from rrcli.records.claim import OutputClaim
from rrcli.records.jobs import InvalidJob, Job, job_from_dict
from rrcli.records.result_line import result_line
from rrcli.records.results import CallbackWriter
from rrcli.records.trace import TraceWriter, new_run_id
from rrcli.routing.control import RunControl

__all__ = ["CLIENT_LEFT", "CLOSED", "CLOSE_TIMEOUT", "Pool", "Texts", "answer", "settled"]

#: the reason a call is cancelled with when its reader went away: the trace's ``error_type`` of
#: its ``cancelled`` call record
CLIENT_LEFT = "client_disconnected"

#: the reason the calls a closing pool ends are cancelled with: their ``CallError``'s type, and
#: the trace's ``error_type`` of a ``cancelled`` call record
CLOSED = "closed"
#: the seconds ``Pool.close`` lets calls in flight finish before it cancels them
CLOSE_TIMEOUT = 30.0

#: what ``Pool.stream`` yields: pieces of text, then the record (a dict)
Texts = AsyncIterator[str | dict[str, Any]]


class Pool:
    """A profile's pool, open for calls (``async with``, or ``open`` then ``close``).

    ``traces``: the trace file (appended; None writes none); ``on_result``: each call's record
    as its result line (``--out``'s lines) when it ends; ``max_cost``: USD the pool may spend
    (else the profile's budget); ``keep_response``: records carry the backend's body."""

    def __init__(
        self,
        profile: Profile,
        *,
        environ: Mapping[str, str] | None = None,
        traces: Path | None = None,
        on_result: Callable[[dict[str, Any]], None] | None = None,
        max_cost: float | None = None,
        keep_response: bool = False,
    ) -> None:
        self.profile = profile
        self._environ = os.environ if environ is None else environ
        self._options = EngineOptions(
            traces=traces,
            max_cost=max_cost,
            keep_response=keep_response,
            recover_after=SERVE_RECOVER_AFTER,
            lasting=True,
        )
        self._on_result = on_result
        self._stack = ExitStack()
        self._engine: Engine | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._calls = 0
        self._open: set[asyncio.Task[CallOutcome]] = set()  # the calls not yet ended
        self._closing = False
        self._shutdown: asyncio.Future[None] | None = None  # the close under way, once begun

    @classmethod
    def from_profile(
        cls, path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None, **kw: Any
    ) -> Pool:
        """The pool of the profile at ``path`` (ProfileError naming every fault)."""
        return cls(load_profile(Path(path), environ=environ), environ=environ, **kw)

    async def __aenter__(self) -> Pool:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError("the pool is not open: use `async with pool:` or `pool.open()`")
        return self._engine

    async def open(self) -> None:
        """Check the keys and the budget's prices (UsageError, nothing sent), then build the
        engine: the router over the gates, one client per backend and the trace file."""
        quiet_unless_configured()
        self._closing, self._shutdown = False, None
        self._engine = await open_engine(
            self.profile,
            self._options,
            outputs=_Outputs(self._options.traces, self._on_result, self._stack),
            stack=self._stack,
            summary=RunSummary(new_run_id()),
            control=RunControl(),
            environ=self._environ,
            closable=True,
        )
        self._flusher = asyncio.create_task(flush_periodically(self._engine))

    async def close(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Stop taking calls, then the run_end record, the outputs flushed, every connection
        closed. A call not yet sent is never sent: it raises CallError of type ``closed``, as
        does a call made while the pool closes. A call in flight finishes, for up to
        ``timeout`` seconds, then is cancelled (CallError ``closed`` too); either way its
        attempt is traced and charged before the run_end record says the spend."""
        if self._engine is None:
            return
        if self._shutdown is None:  # a second close waits for the first
            self._closing = True
            self._shutdown = asyncio.ensure_future(self._close(self._engine, timeout))
        await asyncio.shield(self._shutdown)

    async def _close(self, engine: Engine, timeout: float) -> None:
        sending = engine.stop_sending()
        for task in self._open - sending:
            task.cancel(CLOSED)
        await _ended(self._open, timeout)
        if self._flusher is not None:
            self._flusher.cancel()
        self._engine = None
        try:
            await engine.close()
        finally:
            self._stack.close()

    def reload(self, profile: Profile) -> Reloaded:
        """The pool of ``profile`` from now on, no call dropped (``Engine.reload``: new backends
        join, removed ones drain); UsageError, the pool unchanged, when ``profile`` cannot be
        applied."""
        reloaded = self.engine.reload(profile)
        self.profile = profile
        return reloaded

    def reopen(self) -> None:
        """The trace file opened again at its path (after a log rotation moved it); a new
        file starts with the pool's ``run`` record, so it reads on its own."""
        traces = self.engine.traces
        if traces.reopen():
            traces.run(self.profile)

    # -- calls ------------------------------------------------------------------------------

    async def chat(
        self, messages: Sequence[Mapping[str, Any]], session: str | None = None, **params: Any
    ) -> dict[str, Any]:
        """One chat call (OpenAI-shaped messages and params): its record."""
        return answer(await self.call(_job("messages", list(messages), params, session)))

    async def stream(
        self, messages: Sequence[Mapping[str, Any]], session: str | None = None, **params: Any
    ) -> Texts:
        """One streamed chat call: its text as it arrives, then its record."""
        line = _job("messages", list(messages), {**params, "stream": True}, session)
        async for piece in self.relay(line):
            yield piece if isinstance(piece, str) else answer(piece)

    async def embed(self, input: str | Sequence[str], **params: Any) -> dict[str, Any]:
        """Embeddings of ``input`` (a text or several): the record, ``embeddings`` in order."""
        line = {"endpoint": "embeddings", "input": input, "params": params}
        return answer(await self.call(line))

    async def respond(
        self, input: str | Sequence[Mapping[str, Any]], session: str | None = None, **params: Any
    ) -> dict[str, Any]:
        """One Responses API call; ``previous_response_id`` goes back to its backend."""
        line = {"endpoint": "responses", "input": input, "params": params}
        if session is not None:
            line["session"] = session
        return answer(await self.call(line))

    async def relay(
        self, line: dict[str, Any], exclude: frozenset[str] = frozenset()
    ) -> AsyncIterator[str | CallOutcome]:
        """A streamed job's text as it arrives, then how it ended; the call is cancelled (its
        slot freed) when the reader stops early."""
        texts: asyncio.Queue[str | None] = asyncio.Queue()
        task = asyncio.ensure_future(self.call(line, exclude, lambda _, t: texts.put_nowait(t)))
        task.add_done_callback(lambda _: texts.put_nowait(None))
        try:
            while (text := await texts.get()) is not None:
                yield text
            yield task.result()
        finally:
            if not task.done():
                task.cancel(CLIENT_LEFT)

    async def call(
        self,
        line: dict[str, Any],
        exclude: frozenset[str] = frozenset(),
        on_text: OnText | None = None,
    ) -> CallOutcome:
        """One job given as a dict, as a line of a jobs file holds it (the dict may be
        changed): ``submit`` of its Job (an ``invalid`` outcome when the dict is not one)."""
        self._calls += 1
        if "id" not in line and "custom_id" not in line:
            line["id"] = self._calls
        return await self.submit(job_from_dict(line, self._calls), exclude, on_text)

    async def submit(
        self,
        job: Job | InvalidJob,
        exclude: frozenset[str] = frozenset(),
        on_text: OnText | None = None,
    ) -> CallOutcome:
        """One job, never on a backend of ``exclude``: how it ended; a stream's text goes to
        ``on_text(deployment, text)`` as it arrives. Raises CallError when the pool no longer
        takes calls (its budget spent, no backend healthy)."""
        engine = self.engine
        if type(job) is InvalidJob:
            outcome = CallOutcome(job, "invalid")
            engine.finish(outcome)
            return outcome
        assert type(job) is Job
        if self._closing:
            raise _closed(job, 0)
        # its own task, so that closing the pool can cancel it without cancelling the caller
        task = asyncio.ensure_future(engine.submit(job, exclude, on_text))
        self._open.add(task)
        try:
            return await task
        except (Halted, NoHealthyBackend) as exc:
            raise _refused(job, exc) from None
        except EngineClosed as exc:
            raise _closed(job, exc.attempts) from None
        except asyncio.CancelledError:
            if not task.cancelled() or not self._closing or _cancelling():
                raise  # the caller's own cancellation
            raise _closed(job, None) from None  # its attempts are in the trace
        finally:  # a call answered or cancelled is on disk, even if the process is killed next
            self._open.discard(task)
            engine.traces.flush()


class _Outputs:
    """A pool's outputs: its trace file (claimed for the pool, appended), and each call's
    record handed to ``on_result`` when there is one."""

    def __init__(
        self,
        traces: Path | None,
        on_result: Callable[[dict[str, Any]], None] | None,
        stack: ExitStack,
    ) -> None:
        self._traces, self._on_result, self._stack = traces, on_result, stack

    def claim(self) -> None:
        self._stack.enter_context(closing(OutputClaim())).take(self._traces, "traces")

    def open(self, summary: RunSummary) -> tuple[CallbackWriter | None, TraceWriter]:
        traces = TraceWriter(self._traces, summary.run_id)
        self._stack.callback(traces.close)
        on_result = self._on_result
        return (None if on_result is None else CallbackWriter(on_result)), traces


def answer(outcome: CallOutcome) -> dict[str, Any]:
    """The record of an ok call; CallError for any other."""
    return result_line(settled(outcome))


def settled(outcome: CallOutcome) -> CallOutcome:
    """An ok call as it ended; CallError (its ``result`` the record) for any other."""
    if outcome.status == "ok":
        return outcome
    record = result_line(outcome)
    error = record.get("error") or {}
    attempt = outcome.attempt
    last = None if attempt is None else attempt.error
    raise CallError(
        str(error.get("message", "the call failed")),
        type=str(error.get("type", outcome.status)),
        result=record,
        status_code=None if last is None else last.status_code,
        retry_after=None if last is None else last.retry_after,
    )


def _refused(job: Job, exc: Halted | NoHealthyBackend) -> CallError:
    """The error of a call the pool refused: its budget spent (``retry_after`` the seconds
    until its period renews it, None when none will), or no backend left, said as the engine's
    signal says it (never in a run's words)."""
    if isinstance(exc, NoHealthyBackend):
        kind, message = "no_healthy_backend", str(exc)
    elif exc.reason == "budget":
        kind, message = "budget", exc.said
    else:  # a halt of the pool's own (a call it cannot bound): its words say the fix
        kind, message = "no_healthy_backend", exc.said
    error = {"type": kind, "message": message}
    record = {"id": job.id, "status": "error", "deployment": None, "attempts": 0, "error": error}
    retry_after = exc.retry_after if isinstance(exc, Halted) else None
    return CallError(message, type=kind, result=record, retry_after=retry_after)


def _closed(job: Job, attempts: int | None) -> CallError:
    """The error of a call the pool ended as it closed: not sent (``attempts`` the ones sent
    before, from a retry), or cancelled in flight (``attempts`` None: the trace has them)."""
    message = "the pool was closed before the call was answered"
    error = {"type": CLOSED, "message": message}
    record = {
        "id": job.id,
        "status": "error",
        "deployment": None,
        "attempts": attempts,
        "error": error,
    }
    return CallError(message, type=CLOSED, result=record)


def _cancelling() -> bool:
    """Whether the running task itself is being cancelled (not only what it awaits)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def _ended(tasks: set[asyncio.Task[Any]], timeout: float) -> None:
    """Wait for ``tasks`` to end, for up to ``timeout`` seconds; then cancel those left (with
    CLOSED) and wait for them to be done."""
    if tasks:
        await asyncio.wait(set(tasks), timeout=timeout)
    left = {task for task in tasks if not task.done()}
    for task in left:
        task.cancel(CLOSED)
    if left:
        await asyncio.wait(left)


def _job(
    kind: str, messages: list[Any], params: dict[str, Any], session: str | None
) -> dict[str, Any]:
    line: dict[str, Any] = {kind: messages, "params": params}
    if session is not None:
        line["session"] = session
    return line
