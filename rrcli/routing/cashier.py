"""Who settles an attempt's money: the ``Cashier``, one observer of every attempt.

It charges the attempt at its backend's price (``costs.attempt_cost``: its usage, nothing for a
request no provider billed, its budget reservation or its estimate when its usage is unknown),
leaves that charge on the lease for the trace, keeps the spend by deployment (what the engine's
status reports), and has the budget, when there is one, replace the attempt's reservation by it.
The router routes; it never sees a price.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING

from rrcli.routing.costs import attempt_cost

if TYPE_CHECKING:
    from rrcli.config.profile import Price
    from rrcli.records.attempt import Attempt
    from rrcli.routing.budget import Budget
    from rrcli.routing.lease import Lease

__all__ = ["Cashier"]


class Cashier:
    """Charges each attempt and settles it with ``budget``; ``prices`` by backend id (None:
    unpriced, charged nothing known). ``spent``: USD charged by deployment so far."""

    __slots__ = ("_budget", "_prices", "spent")

    def __init__(self, prices: Mapping[str, Price | None], budget: Budget | None) -> None:
        self._prices = prices
        self._budget = budget
        self.spent: dict[str, float] = {}

    def observe(self, attempt: Attempt, lease: Lease) -> Awaitable[None] | None:
        """Charge ``attempt`` (on ``lease.charge``), count it, and settle its reservation: done
        now (None) unless a shared ledger's round trip is left to await."""
        reservation = lease.reservation
        backend = attempt.backend.id
        reserved = None if reservation is None else reservation[1]
        charge = lease.charge = attempt_cost(self._prices.get(backend), attempt, reserved)
        cost = charge[0]
        if cost:
            self.spent[backend] = self.spent.get(backend, 0.0) + cost
        if self._budget is None:
            return None
        return self._budget.settle(lease, cost)
