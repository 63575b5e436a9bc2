"""The records of a run: one ``Attempt`` per HTTP attempt, one ``CallOutcome`` per job.

The call loop produces these and nothing else; every observer (the trace writer, the log, the
router's counters, cooldowns and AIMD, the rpm/tpm settlement) reads the same frozen record, the
way stamina hands one ``RetryDetails`` to every hook, and ``records.results`` builds a job's
result line from its ``CallOutcome`` alone. Times: ``*_s`` and unsuffixed are seconds (``ts_*``
epoch, the rest monotonic), ``*_ms`` milliseconds.

Both are frozen ``msgspec.Struct`` records rather than frozen dataclasses: every attempt makes
one and every job one more, and a frozen dataclass sets each field through
``object.__setattr__`` (a 17-field Attempt took longer to build than the sim takes to answer).
A changed copy is ``msgspec.structs.replace``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    from rrcli.config.profile import Backend
    from rrcli.errors import ProviderError
    from rrcli.providers.base import Reply
    from rrcli.records.jobs import InvalidJob, Job

__all__ = ["Attempt", "CallOutcome", "Decision", "cached_attempt"]

#: what the loop decided after an attempt: ``ok``; ``retry`` on the same backend after
#: ``backoff_s``; ``failover`` to another backend; ``error``, final; ``cached``: no HTTP attempt
#: was made, the response cache answered (``run.cached``); ``cancelled``: the call was cancelled
#: while it was sent (its client left), and the cancellation goes on.
Decision = Literal["ok", "retry", "failover", "error", "cached", "cancelled"]


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One HTTP attempt and what was decided after it (or a cached answer standing for one:
    decision ``cached``, zero latency, no error)."""

    job_id: str | int
    session: str | None
    turn: int  # from 0; 0 for a job that is not a session
    number: int  # attempt within the turn, from 1, counting on across failover
    backend: Backend
    binding: str | None  # new | kept | rebound | None (binding = request)
    stream: bool
    endpoint: str  # chat, embeddings, responses, completions or moderations
    ts_start: float  # epoch seconds when the request was sent
    started: float  # monotonic seconds when the request was sent
    ended: float  # monotonic seconds when the reply or the error was in
    queue_s: float  # waiting for routing, the slot and the rate budget before it
    estimate: int  # tokens reserved against tpm before it
    reply: Reply | None
    error: ProviderError | None
    decision: Decision
    backoff_s: float | None = None  # the sleep before the next attempt (decision "retry")
    rebound_for: str | None = None  # binding "rebound": why the session was bound again

    @property
    def latency_ms(self) -> float:
        return round((self.ended - self.started) * 1000.0, 3)

    @property
    def ts_end(self) -> float:
        return self.ts_start + (self.ended - self.started)

    @property
    def outcome(self) -> str:
        """The trace's ``outcome``: ok | retry (another attempt follows, here or elsewhere) |
        error | cached | cancelled."""
        return "retry" if self.decision == "failover" else self.decision

    @property
    def http_status(self) -> int | None:
        """The answer's status; None when no response came (connection error, timeout)."""
        if self.reply is not None:
            return self.reply.http_status
        return None if self.error is None else self.error.status_code

    @property
    def error_type(self) -> str | None:
        return None if self.error is None else self.error.type


def cached_attempt(
    job_id: str | int,
    session: str | None,
    turn: int,
    backend: Backend,
    reply: Reply,
    stream: bool,
    endpoint: str,
    ts_start: float,
    now: float,
) -> Attempt:
    """The attempt a stored answer makes on ``backend`` at ``ts_start`` (epoch; ``now``
    monotonic): no HTTP call, zero latency, no queue, decision ``cached``."""
    return Attempt(
        job_id=job_id,
        session=session,
        turn=turn,
        number=1,
        backend=backend,
        binding=None,
        stream=stream,
        endpoint=endpoint,
        ts_start=ts_start,
        started=now,
        ended=now,
        queue_s=0.0,
        estimate=0,
        reply=reply,
        error=None,
        decision="cached",
    )


class CallOutcome(msgspec.Struct, frozen=True):
    """How one job, or one turn of a session, ended: the only input of its result line.

    ``attempt`` is the last attempt (the deployment, the attempt count, the latency), None for an
    invalid line or a call that found no backend; ``reply`` the answer (``ok``: a paused turn's
    parts joined; a session: its last turn's); ``error`` the result's ``error`` object. A session
    carries its finished ``turns``, each a turn's own outcome.
    """

    job: Job | InvalidJob
    status: Literal["ok", "error", "invalid"]
    attempt: Attempt | None = None
    reply: Reply | None = None
    error: dict[str, Any] | None = None
    session: str | None = None  # written when bindings must survive --resume
    turns: tuple[CallOutcome, ...] = ()

    @property
    def attempts(self) -> int:
        """The attempts of the call that ended here, across failover (0 when none was made; a
        session's line sums its turns')."""
        return 0 if self.attempt is None else self.attempt.number

    @property
    def body(self) -> dict[str, Any] | None:
        """The provider's response body, for the batch formats: a single call's only (a session's
        line is not one response)."""
        return None if self.reply is None or self.turns else self.reply.body
