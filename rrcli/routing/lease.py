"""A backend's live state and a routed call's hold on it: what the router hands out.

``BackendState`` is one backend's counters as the run goes (calls in flight, EWMA latency,
cooldown, the display's done/retries/errors, whether it is down); ``Lease`` is one routed call,
holding one slot of its backend's gate while ``held``. The router (router.py) is the only one
that changes a state; the budget and the cashier write a lease's money.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rrcli.config.profile import Backend
from rrcli.routing.costs import UNPRICED, Charge
from rrcli.routing.gate import Clock, Gate

__all__ = ["BackendState", "Lease"]


@dataclass(slots=True, eq=False)
class BackendState:
    """One backend's live state. ``in_flight`` counts this backend's own calls (its gate may be
    shared with others of its scope); the counters feed the live display, and only grow: an
    attempt counts once, as it ends, by its trace outcome."""

    backend: Backend
    gate: Gate
    position: int
    clock: Clock = field(repr=False)
    in_flight: int = 0
    done: int = 0  # successful attempts
    retries: int = 0  # failed attempts another attempt followed, here or on another backend
    errors: int = 0  # failed attempts no retry followed (trace outcome "error")
    ewma_latency_ms: float | None = None
    cooldown_until: float = 0.0
    failures_in_a_row: int = 0
    down: str | None = None  # why it left the pool (until a probe brings it back), or None
    cooled_for: str | None = None  # why its latest cooldown began
    sessions: int = 0  # sessions bound to it now

    @property
    def cap(self) -> int:
        return self.gate.cap

    @property
    def cooling(self) -> bool:
        return self.clock() < self.cooldown_until


@dataclass(slots=True, eq=False)
class Lease:
    """A routed call. While ``held`` it holds one slot of ``state.gate``. ``reservation``: the
    token and USD its attempt in flight set aside from the run's budget (budget.py)."""

    state: BackendState
    binding: str | None = None  # "new" | "kept" | "rebound" | None (binding = "request")
    rebound_for: str | None = None  # why its session was bound again (binding "rebound")
    held: bool = True
    reservation: tuple[str, float] | None = None
    charge: Charge = UNPRICED  # what its latest attempt was charged (the cashier's)
    cache_key: str | None = None  # the prompt_cache_key cache_aware gives the call, if any
