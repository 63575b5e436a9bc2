"""The observers of an attempt: each one is handed every frozen ``Attempt`` (and the lease it
was made on) while the attempt still holds its slot, in the order the assembly lists them:

- the cashier (``routing.cashier``): charges it, settles the budget, counts the spend;
- the trace (``Traced``): its ``call`` record, with the cashier's charge;
- health (``routing.health``): a backend whose answer says it serves no call leaves the pool;
- with -v, the log (``logged``): one debug line;
- the router: counters, EWMA latency, cooldowns, AIMD, server pauses, the tpm settlement;
- the tally (``routing.tally``): failures by error type, tokens, admission waits.

An observer returns None when it is done, or a step for the engine to await (a shared ledger's
or gate's round trip); the steps are awaited in the observers' order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from rrcli.logs import get_logger

if TYPE_CHECKING:
    from rrcli.records.attempt import Attempt
    from rrcli.records.trace import TraceWriter
    from rrcli.routing.lease import Lease

__all__ = ["Observer", "Traced", "logged"]

log = get_logger("rrcli")

#: one observer of every attempt: None when done, else the step to await
Observer = Callable[["Attempt", "Lease"], "Awaitable[None] | None"]


class Traced:
    """The trace's ``call`` record of each attempt: ``addresses`` by backend id, each provider's
    host[:port] (None for the in-process sim)."""

    __slots__ = ("_addresses", "_traces")

    def __init__(self, traces: TraceWriter, addresses: Mapping[str, str | None]) -> None:
        self._traces = traces
        self._addresses = addresses

    def observe(self, attempt: Attempt, lease: Lease) -> None:
        self._traces.call(attempt, self._addresses[attempt.backend.id], lease.charge)


def logged(attempt: Attempt, lease: Lease) -> None:
    """The -v log's line of an attempt."""
    log.debug(
        "rrcli.call",
        job_id=attempt.job_id,
        deployment=attempt.backend.id,
        attempt=attempt.number,
        outcome=attempt.outcome,
        http_status=attempt.http_status,
        error_type=attempt.error_type,
        latency_ms=attempt.latency_ms,
    )
