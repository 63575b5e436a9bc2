"""Backends that leave the pool, and come back: what the engine does when an answer says a
backend can serve no call at all, and what it tells the user.

Which answers mean that is decided where errors are made (``providers.base.is_backend_fault``:
a key refused, an account out of quota, a model or path not found); the error carries it as
``backend_down``. When backends heal (``recover_after`` above 0), a backend whose connections
are still refused once a call's retries are spent is down too. Here ``Health.down`` acts on it
once per backend: the router takes the backend out of every later decision and wakes the calls
waiting for it (router.py), the trace gets a ``backend`` record, the log an error-level line
(shown even with ``-q``) naming the backend and what to check.

Then one of two things. Backends that heal are probed (``probe``: the smallest call it serves,
providers/probe.py) ``recover_after`` seconds later, the wait doubling after each failed probe
up to MAX_RECOVER_AFTER; the first probe that succeeds brings the backend back (``up`` in the
trace and the log), and in a ``lasting`` engine (serve, Pool) a decision while every backend is
down fails at once (the front-end's "no healthy backend") rather than stopping the engine.
Backends that do not heal (``rrcli run``'s default) stay down for the run; when no healthy
backend is left a run halts (exit 1, each backend's reason, fix and ``--resume``), and so does
an engine that is not ``lasting``. All of it is on the error path: a successful attempt
never comes here. The probes are tasks of their own, cancelled by ``close``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol

from rrcli.config.profile import MAX_RECOVER_AFTER
from rrcli.errors import ProviderError
from rrcli.logs import get_logger
from rrcli.routing.control import Halt, RunControl
from rrcli.routing.down import check_hint, down_reasons
from rrcli.routing.gate import Sleep

if TYPE_CHECKING:
    from rrcli.records.attempt import Attempt
    from rrcli.records.trace import TraceWriter
    from rrcli.routing.lease import BackendState, Lease
    from rrcli.routing.router import Router

__all__ = ["Health", "Probe", "SharedHealth", "pool_down_message", "probe_waits"]

log = get_logger("rrcli")

#: a probe of one backend (by id): None when it answered, else the error it met
Probe = Callable[[str], Awaitable[ProviderError | None]]


class SharedHealth(Protocol):
    """Health shared with the other processes serving the pool (fleet/shared_pool.py): the
    backends down, told and heard; a probe claimed by one process at a time."""

    async def downs(self, deployments: Iterable[str]) -> dict[str, tuple[str, str]]: ...
    async def went_down(self, deployment: str, reason: str, message: str, wait: float) -> None: ...
    async def claim_probe(self, deployment: str, wait: float) -> float | None: ...
    async def came_up(self, deployment: str) -> None: ...
    def listen(
        self, on_down: Callable[[str, str, str], None], on_up: Callable[[str], None]
    ) -> None: ...
    async def close(self) -> None: ...


#: the error of a connection refused: past a call's retries, its backend is down (when healing)
REFUSED = "connect_error"


def pool_down_message(states: Iterable[BackendState]) -> str:
    """The halt's message: each backend's reason and what to check, and the way to finish."""
    return (
        f"no healthy backend left — {down_reasons((s.backend, s.down) for s in states)}. Fix "
        "that, then run again with "
        "--resume to run the jobs that did not finish (they have no result line)"
    )


def probe_waits(recover_after: float) -> Iterable[float]:
    """The seconds before each probe of a backend down: ``recover_after``, then doubling up to
    MAX_RECOVER_AFTER (never below ``recover_after``), for as long as the probes fail."""
    wait = recover_after
    while True:
        yield wait
        wait = max(recover_after, min(MAX_RECOVER_AFTER, wait * 2))


class Health:
    """Takes backends out of the pool as their answers say (``down``), once each, and with
    ``probe`` and ``recover_after`` above 0 brings them back when a probe succeeds."""

    __slots__ = (
        "_lasting",
        "_probe",
        "_probes",
        "_shared",
        "_sleep",
        "_told",
        "control",
        "recover_after",
        "router",
        "traces",
    )

    def __init__(
        self,
        router: Router,
        traces: TraceWriter,
        control: RunControl,
        *,
        recover_after: float = 0.0,
        probe: Probe | None = None,
        sleep: Sleep = asyncio.sleep,
        lasting: bool = False,
        shared: SharedHealth | None = None,
    ) -> None:
        self.router = router
        self.traces = traces
        self.control = control
        self.recover_after = recover_after if probe is not None else 0.0
        self._probe = probe
        self._sleep = sleep
        self._lasting = lasting and self.recover_after > 0.0
        self._probes: dict[str, asyncio.Task[None]] = {}  # the backends being probed, by id
        self._shared = shared if self.recover_after > 0.0 else None
        self._told: set[asyncio.Task[None]] = set()  # downs being told to the other processes

    async def join(self) -> None:
        """Take down the backends the other processes sharing the pool found down, then hear
        what they find (no-op when not shared)."""
        shared = self._shared
        if shared is None:
            return
        found = await shared.downs(s.backend.id for s in self.router.states)
        for deployment, (reason, message) in found.items():
            self.heard_down(deployment, reason, message)
        shared.listen(self.heard_down, self.heard_up)

    @property
    def heals(self) -> bool:
        """Whether a backend down is probed again (else it is down for the run)."""
        return self.recover_after > 0.0

    def observe(self, attempt: Attempt, lease: Lease) -> None:
        """An attempt's error that says its backend serves no call takes it down; so does a
        connection still refused once the call's retries are spent, when backends heal."""
        error = attempt.error
        if error is None:
            return
        refused = error.type == REFUSED and attempt.decision in ("error", "failover")
        if (error.backend_down or (refused and self.heals)) and self.router.holds(attempt.backend):
            self.down(attempt.backend.id, error)

    def down(self, deployment: str, error: ProviderError) -> None:
        """``error`` says backend ``deployment`` serves no call: out of the pool until a probe
        brings it back, or for the rest of the run (a second such answer changes nothing)."""
        reason = error.type
        state = self.router.take_down(deployment, reason)
        if state is None:
            return
        message = f"{error.message} — {check_hint(state.backend, reason)}"
        if self._shared is not None:
            told = self._shared.went_down(deployment, reason, message, self.recover_after)
            task = asyncio.ensure_future(told)
            self._told.add(task)
            task.add_done_callback(self._told.discard)
        self._out(state, reason, message)

    def heard_down(self, deployment: str, reason: str, message: str) -> None:
        """Another process sharing the pool took ``deployment`` down: out of the pool here too,
        probed as if it were found here."""
        state = self.router.take_down(deployment, reason)
        if state is not None:
            self._out(state, reason, f"{message} (found by another process)")

    def heard_up(self, deployment: str) -> None:
        """A probe of another process was answered: ``deployment`` is back here too."""
        self.forget((deployment,))
        self._up(deployment, "a probe by another process was answered")

    def _out(self, state: BackendState, reason: str, message: str) -> None:
        """``state`` out of the pool for ``reason``: traced, logged, probed when backends heal,
        and the engine halted when none is left (and it is not ``lasting``)."""
        backend = state.backend
        deployment = backend.id
        self.traces.backend(backend.id, "down", reason, message)
        if self.heals:
            after = f"probed again in {self.recover_after:g} s"
            log.error(
                "rrcli.backend_down",
                backend=backend.id,
                reason=reason,
                message=f"{backend.id} leaves the pool until it answers again ({after}): {message}",
            )
            self._probes[deployment] = asyncio.ensure_future(self._heal(deployment))
        else:
            log.error(
                "rrcli.backend_down",
                backend=backend.id,
                reason=reason,
                message=f"{backend.id} leaves the pool for the rest of the run: {message}",
            )
        if not (self.router.healthy or self._lasting):
            states = self.router.states
            plain = f"no healthy backend left — {down_reasons((s.backend, s.down) for s in states)}"
            self.control.halt(Halt(1, "no_backend", pool_down_message(states), plain))

    async def _heal(self, deployment: str) -> None:
        """Probe ``deployment`` after each of ``probe_waits`` until a probe succeeds, then bring
        it back."""
        assert self._probe is not None
        shared = self._shared
        try:
            for wait in probe_waits(self.recover_after):
                await self._sleep(wait)
                if shared is not None:  # one process probes; the others wait for its answer
                    due = await shared.claim_probe(deployment, min(MAX_RECOVER_AFTER, 2 * wait))
                    while due:  # another process's probe is due first
                        await self._sleep(due)
                        due = await shared.claim_probe(deployment, min(MAX_RECOVER_AFTER, 2 * wait))
                    if due is None:  # it was answered: the backend is up
                        break
                error = await self._probe(deployment)
                if error is None:
                    if shared is not None:
                        await shared.came_up(deployment)
                    break
                log.warning(
                    "rrcli.backend_probe_failed",
                    backend=deployment,
                    error_type=error.type,
                    message=error.message,
                )
        finally:
            if self._probes.get(deployment) is asyncio.current_task():  # not a newer probe's
                del self._probes[deployment]
        self._up(deployment, "a probe was answered")

    def _up(self, deployment: str, why: str) -> None:
        if self.router.bring_up(deployment) is not None:
            self.traces.backend(deployment, "up", "probe_ok", why)
            log.warning(
                "rrcli.backend_up",
                backend=deployment,
                message=f"{deployment} is back in the pool: {why}",
            )

    def forget(self, deployments: Iterable[str]) -> None:
        """Stop probing ``deployments``: a reload removed them (or changed them: the new one
        starts up)."""
        for deployment in deployments:
            task = self._probes.pop(deployment, None)
            if task is not None:
                task.cancel()

    async def close(self) -> None:
        """Cancel the probes under way (the engine's end)."""
        if self._shared is not None:
            await self._shared.close()
        probes = [*self._probes.values(), *self._told]
        for task in probes:
            task.cancel()
        await asyncio.gather(*probes, return_exceptions=True)
