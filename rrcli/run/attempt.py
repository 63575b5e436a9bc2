"""The records of a run: one ``Attempt`` per HTTP attempt, one ``CallOutcome`` per job.

The call loop produces these and nothing else; every observer (the trace writer, the log, the
router's counters, cooldowns and AIMD, the rpm/tpm settlement) reads the same frozen record, the
way stamina hands one ``RetryDetails`` to every hook. Times: ``*_s`` and unsuffixed are seconds
(``ts_*`` epoch, the rest monotonic), ``*_ms`` milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rrcli.config.profile import Backend
    from rrcli.errors import ProviderError
    from rrcli.providers.base import Reply

__all__ = ["Attempt", "CallOutcome", "Decision"]

#: what the loop decided after an attempt: ``ok``; ``retry`` on the same backend after
#: ``backoff_s``; ``failover`` to another backend; ``error``, final.
Decision = Literal["ok", "retry", "failover", "error"]


@dataclass(frozen=True, slots=True)
class Attempt:
    """One HTTP attempt and what was decided after it."""

    job_id: str | int
    session: str | None
    turn: int  # from 0; 0 for a job that is not a session
    number: int  # attempt within the turn, from 1, counting on across failover
    backend: Backend
    binding: str | None  # new | kept | rebound | None (binding = request)
    stream: bool
    ts_start: float  # epoch seconds when the request was sent
    started: float  # monotonic seconds when the request was sent
    ended: float  # monotonic seconds when the reply or the error was in
    queue_s: float  # waiting for routing, the slot and the rate budget before it
    estimate: int  # tokens reserved against tpm before it
    reply: Reply | None
    error: ProviderError | None
    decision: Decision
    backoff_s: float | None = None  # the sleep before the next attempt (decision "retry")

    @property
    def latency_ms(self) -> float:
        return round((self.ended - self.started) * 1000.0, 3)

    @property
    def ts_end(self) -> float:
        return self.ts_start + (self.ended - self.started)

    @property
    def outcome(self) -> str:
        """The trace's ``outcome``: ok | retry (another attempt follows, here or elsewhere) |
        error."""
        return "retry" if self.decision == "failover" else self.decision


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """How one job ended: the only input of its result line (``records.results``)."""

    job_id: str | int
    status: Literal["ok", "error", "invalid"]
    attempts: int = 0
    deployment: str | None = None
    model: str | None = None
    reply: Reply | None = None  # ok: the last call's reply (a paused turn's parts joined)
    latency_ms: float | None = None
    error: dict[str, Any] | None = None  # error/invalid: the result's ``error`` object
    metadata: dict[str, Any] | None = None
    session: str | None = None  # written when bindings must survive --resume
    turns: tuple[dict[str, Any], ...] | None = None  # sessions: one entry per finished turn
    usage: dict[str, int] | None = None  # sessions: the turns' usage summed
    duplicate_of: str | int | None = None  # invalid: the id this line repeats
