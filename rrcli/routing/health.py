"""Backends that leave the pool: what the run does when an answer says a backend can
serve no call at all, and what it tells the user.

Which answers mean that is decided where errors are made (``providers.base.is_backend_fault``:
a key refused, an account out of quota, a model or path not found); the error carries it as
``backend_down``. Here ``Health.down`` acts on it once per backend: the router takes the
backend out of every later decision and wakes the calls waiting for it (router.py), the trace
gets a ``backend`` record, the log an error-level line (shown even with ``-q``) naming the
backend and what to check, and when no healthy backend is left the run halts (exit 1, each
backend's reason, fix and ``--resume``). All of it is on the error path: a successful attempt
never comes here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from rrcli.errors import ProviderError
from rrcli.logs import get_logger
from rrcli.routing.control import Halt, RunControl
from rrcli.routing.down import check_hint, down_reasons

if TYPE_CHECKING:
    from rrcli.records.attempt import Attempt
    from rrcli.records.trace import TraceWriter
    from rrcli.routing.lease import BackendState, Lease
    from rrcli.routing.router import Router

__all__ = ["Health", "pool_down_message"]

log = get_logger("rrcli")


def pool_down_message(states: Iterable[BackendState]) -> str:
    """The halt's message: each backend's reason and what to check, and the way to finish."""
    return (
        f"no healthy backend left — {down_reasons((s.backend, s.down) for s in states)}. Fix "
        "that, then run again with "
        "--resume to run the jobs that did not finish (they have no result line)"
    )


class Health:
    """Takes backends out of the pool as their answers say (``down``), once each."""

    __slots__ = ("control", "router", "traces")

    def __init__(self, router: Router, traces: TraceWriter, control: RunControl) -> None:
        self.router = router
        self.traces = traces
        self.control = control

    def observe(self, attempt: Attempt, lease: Lease) -> None:
        """An attempt's error that says its backend serves no call takes it down."""
        error = attempt.error
        if error is not None and error.backend_down:
            self.down(attempt.backend.id, error)

    def down(self, deployment: str, error: ProviderError) -> None:
        """``error`` says backend ``deployment`` serves no call: out of the pool for the rest
        of the run (a second such answer from it changes nothing)."""
        reason = error.type
        state = self.router.take_down(deployment, reason)
        if state is None:
            return
        backend = state.backend
        message = f"{error.message} — {check_hint(backend, reason)}"
        self.traces.backend(backend.id, "down", reason, message)
        log.error(
            "rrcli.backend_down",
            backend=backend.id,
            reason=reason,
            message=f"{backend.id} leaves the pool for the rest of the run: {message}",
        )
        if not self.router.healthy:
            states = self.router.states
            plain = f"no healthy backend left — {down_reasons((s.backend, s.down) for s in states)}"
            self.control.halt(Halt(1, "no_backend", pool_down_message(states), plain))
