"""What an engine is doing, as one frozen picture: ``EngineStatus``, built when asked (never per
attempt) from the router's backend states, the cashier's spend, the budget and the run's switch.

It is the one thing the front-ends read of a running engine: the live display and the progress
log, ``/metrics``, ``/ready`` and the gateway's cooling check, the shared queue's worker. Every
record is a frozen ``msgspec.Struct``: a picture taken earlier never changes as the engine goes
on, and building one costs a few microseconds (a frozen dataclass sets each field through
``object.__setattr__``). Times are seconds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from rrcli.records.dollars import usd
from rrcli.routing.control import Halt, RunControl

if TYPE_CHECKING:
    from rrcli.routing.budget import Budget
    from rrcli.routing.lease import BackendState
    from rrcli.routing.tally import Counts, Tally

__all__ = ["BudgetStatus", "Control", "DeploymentStatus", "EngineStatus", "status_of"]

#: a deployment's state: ``up`` takes calls, ``cooling`` takes none until its cooldown ends,
#: ``down`` has left the pool (until a probe brings it back, when backends heal)
State = Literal["up", "cooling", "down"]
#: the run's switch: ``running``; ``draining`` (stopped: calls in flight finish, no new one
#: starts); ``cancelled`` (calls in flight cancelled too); ``halted`` (the run stopped by itself)
Control = Literal["running", "draining", "cancelled", "halted"]


class DeploymentStatus(msgspec.Struct, frozen=True):
    """One deployment: ``state`` and ``why`` (the reason it is down or cooling, None when up);
    ``in_flight`` its own calls now, ``cap`` its gate's cap now (``max_cap``: the most an
    adaptive cap grows to); ``cooldown_s`` left of its cooldown (0.0 when not cooling);
    ``spent`` USD charged for its attempts by this engine; ``sessions`` bound to it now; its
    attempts ``ok``, ``retried`` (another attempt followed) and ``errors`` (final); of the
    tally (routing/tally.py): its failed attempts by error type (``failures``, a closed set of
    types), those ``cancelled``, its answers' tokens, the attempts that waited to be admitted
    (``waits``) and the seconds all its attempts waited (``waited_s``); with cache_aware, the
    decisions that chose it for the prefix it held warm (``cache_hits``)."""

    id: str
    state: State
    why: str | None
    in_flight: int
    cap: int
    max_cap: int
    cooldown_s: float
    spent: float
    sessions: int
    ok: int
    retried: int
    errors: int
    failures: tuple[tuple[str, int], ...] = ()
    cancelled: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    waits: int = 0
    waited_s: float = 0.0
    cache_hits: int = 0


class BudgetStatus(msgspec.Struct, frozen=True):
    """The budget in USD: its ``limit``; ``spent`` so far (earlier runs of a resumed file, and
    every process of a shared ledger, included); ``reserved`` for attempts in flight; ``left``
    of the limit after both."""

    limit: float
    spent: float
    reserved: float
    left: float

    def line(self) -> str:
        """What the live display says of it."""
        spent, reserved, left, limit = self.spent, self.reserved, self.left, self.limit
        return f"spent ${usd(spent)}  reserved ${usd(reserved)}  left ${usd(left)} of ${usd(limit)}"


class EngineStatus(msgspec.Struct, frozen=True):
    """The engine at one moment: each deployment in profile order, the budget (None: the engine
    has none), the run's switch and, once halted, why."""

    deployments: tuple[DeploymentStatus, ...]
    budget: BudgetStatus | None
    control: Control
    halt: Halt | None = None

    @property
    def in_flight(self) -> int:
        """The calls in flight on every deployment."""
        return sum(d.in_flight for d in self.deployments)

    @property
    def retried(self) -> int:
        return sum(d.retried for d in self.deployments)

    @property
    def spent(self) -> float:
        """USD this engine charged (its deployments' spend)."""
        return sum(d.spent for d in self.deployments)

    @property
    def ready(self) -> bool:
        """Whether a call could start now: the engine running, its budget not spent, and a
        deployment up (neither down nor cooling)."""
        if self.stopping or (self.budget is not None and self.budget.spent >= self.budget.limit):
            return False
        return any(d.state == "up" for d in self.deployments)

    @property
    def stopping(self) -> bool:
        """Whether calls may no longer start."""
        return self.control != "running"

    def cooling(self, exclude: Iterable[str] = ()) -> float | None:
        """Seconds until the first deployment not in ``exclude`` (nor down) stops cooling, when
        every such deployment is cooling; None when one of them may take a call now (or none
        is left)."""
        left = None
        for deployment in self.deployments:
            if deployment.state == "down" or deployment.id in exclude:
                continue
            if deployment.state == "up":
                return None
            left = deployment.cooldown_s if left is None else min(left, deployment.cooldown_s)
        return left


def status_of(
    states: Iterable[BackendState],
    spent: Mapping[str, float],
    budget: Budget | None,
    control: RunControl,
    tally: Tally | None = None,
    hits: Sequence[int] = (),
) -> EngineStatus:
    """The picture of an engine whose backends are ``states``, ``spent`` its USD by deployment
    (the cashier's), under ``budget`` and ``control``, its attempts counted by ``tally``,
    ``hits`` cache_aware's warm decisions by backend position (none: another strategy)."""
    counts = {} if tally is None else tally.counts
    deployments = tuple(
        _deployment(state, spent.get(state.backend.id, 0.0), counts.get(state.backend.id), hits)
        for state in states
    )
    return EngineStatus(deployments, _budget(budget), _control(control), control.halted)


def _deployment(
    state: BackendState, spent: float, counts: Counts | None, hits: Sequence[int]
) -> DeploymentStatus:
    gate = state.gate
    cooldown = max(0.0, state.cooldown_until - state.clock())
    if state.down is not None:
        mode: State = "down"
        why: str | None = state.down
    elif cooldown > 0.0:
        mode, why = "cooling", state.cooled_for
    else:
        mode, why, cooldown = "up", None, 0.0
    return DeploymentStatus(
        state.backend.id,
        mode,
        why,
        state.in_flight,
        gate.cap,
        gate.max_cap,
        cooldown,
        spent,
        state.sessions,
        state.done,
        state.retries,
        state.errors,
        *(_NO_COUNTS if counts is None else _counted(counts)),
        hits[state.position] if hits else 0,
    )


#: the tally's fields of a deployment with no attempt yet, in their order
_NO_COUNTS = ((), 0, 0, 0, 0, 0, 0.0)


def _counted(c: Counts) -> tuple[Any, ...]:
    """The tally's fields of a deployment's status, in their order (``_NO_COUNTS``'s)."""
    failures = tuple(sorted(c.failures.items())) if c.failures else ()
    return (failures, c.cancelled, c.input_tokens, c.output_tokens, c.cached_input_tokens,
            c.waits, c.waited_s)  # fmt: skip


def _budget(budget: Budget | None) -> BudgetStatus | None:
    if budget is None:
        return None
    spent, reserved = budget.spent, budget.ledger.reserved
    return BudgetStatus(budget.limit, spent, reserved, max(0.0, budget.limit - spent - reserved))


def _control(control: RunControl) -> Control:
    if control.cancelled:
        return "cancelled"
    if control.halted is not None:
        return "halted"
    return "draining" if control.stopping else "running"
