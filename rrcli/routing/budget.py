"""The run's budget (SPEC §13): the most a run may spend, and the check before every attempt.

Before an attempt is sent the router asks ``Budget.reserve``: the attempt's worst case (its
input at one token a character, the most it can be, times the input price, plus its output cap
— the request's ``max_tokens``, ``max_completion_tokens`` or ``max_output_tokens``, else
``tokens.UNCAPPED_OUTPUT`` — times the output price) is set aside, unless the spend so far, the
reservations of the attempts in flight and this one would pass the limit: then the attempt is
not sent, the run halts (exit 3: calls in flight finish, jobs not started get no result) and
``Halted`` ends the job without a result line. ``Budget.settle`` replaces the reservation by
what the reply's usage cost (an error costs nothing; an answer without usage costs its
reservation). So the spend never passes the limit while replies stay within their caps.

Where spend is kept is a ``Ledger``: this process's (``LocalLedger``), or one shared in Redis
by every process on the gate (``fleet.ledger.RedisLedger``). The spend of earlier runs of the
same results file (``--resume``) is read from the traces first (``records.spend``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from rrcli.config.profile import Price
from rrcli.routing.control import Halt, Halted, RunControl
from rrcli.tokens import UNCAPPED_OUTPUT, input_token_bound, output_cap

if TYPE_CHECKING:
    from rrcli.providers.base import Call, Reply
    from rrcli.records.attempt import Attempt
    from rrcli.routing.lease import Lease

__all__ = ["Budget", "Ledger", "LocalLedger", "attempt_ceiling", "reply_cost"]

NO_OUTPUT = frozenset({"embeddings", "moderations"})  # endpoints whose answers have no tokens
_EPSILON = 1e-12  # USD: float sums that equal the limit do not pass it


def attempt_ceiling(price: Price, tokens: int, params: Mapping[str, Any], endpoint: str) -> float:
    """USD: the most one attempt estimated at ``tokens`` (``tokens.estimate_call_tokens``: its
    input and its output cap) may cost at ``price``."""
    cap = output_cap(params)
    given = input_token_bound(tokens - (cap or 0))
    if endpoint in NO_OUTPUT:
        out = 0
    else:
        choices = params.get("n")
        out = (cap or UNCAPPED_OUTPUT) * (choices if type(choices) is int and choices > 1 else 1)
    return (given * price.input + out * price.output) / 1e6


def reply_cost(price: Price, reply: Reply) -> float | None:
    """USD a reply's usage cost at ``price``; None when it reports no usage."""
    if reply.input_tokens is None and reply.output_tokens is None:
        return None
    used_in, used_out = reply.input_tokens or 0, reply.output_tokens or 0
    return (used_in * price.input + used_out * price.output) / 1e6


class Ledger(Protocol):
    """Where spend is kept, shared by several processes. ``spent``: settled USD, as last seen
    (by everyone)."""

    spent: float

    async def reserve(self, cost: float) -> str | None:
        """Set ``cost`` aside; its token, or None when it would pass the limit."""

    async def settle(self, token: str, reserved: float, actual: float) -> None:
        """Replace the reservation ``token`` of ``reserved`` by ``actual``."""

    async def close(self) -> None: ...


class LocalLedger:
    """This process's spend: ``spent`` settled, ``reserved`` set aside for calls in flight.
    Its steps do not wait, so they are plain calls: no coroutine on the hot path."""

    def __init__(self, limit: float, spent: float = 0.0) -> None:
        self.limit, self.spent, self.reserved = limit, spent, 0.0

    def reserve(self, cost: float) -> str | None:
        if self.spent + self.reserved + cost > self.limit + _EPSILON:
            return None
        self.reserved += cost
        return ""

    def settle(self, token: str, reserved: float, actual: float) -> None:
        self.reserved = max(0.0, self.reserved - reserved)
        self.spent += actual

    async def close(self) -> None:
        pass


class Budget:
    """The limit, the prices and the ledger; what the router asks before and after each
    attempt. ``refused`` counts the jobs an attempt refused ended (they have no result)."""

    def __init__(
        self,
        limit: float,
        prices: Mapping[str, Price],
        ledger: LocalLedger | Ledger,
        control: RunControl,
    ) -> None:
        self.limit = limit
        self.ledger = ledger
        self.refused = 0
        self._prices = prices
        self._control = control
        self._local = ledger if isinstance(ledger, LocalLedger) else None

    @property
    def spent(self) -> float:
        return self.ledger.spent

    def reserve(self, lease: Lease, tokens: int, call: Call) -> Awaitable[None] | None:
        """Set the attempt's worst case aside on ``lease``, or halt the run and raise Halted.
        A local ledger does it now (None); a shared one returns the step to await."""
        price = self._prices[lease.state.backend.id]
        cost = attempt_ceiling(price, tokens, call.params, call.endpoint)
        if self._local is None:
            return self._reserve_shared(lease, cost)
        self._took(lease, self._local.reserve(cost), cost)
        return None

    async def _reserve_shared(self, lease: Lease, cost: float) -> None:
        assert not isinstance(self.ledger, LocalLedger)
        self._took(lease, await self.ledger.reserve(cost), cost)

    def _took(self, lease: Lease, token: str | None, cost: float) -> None:
        if token is None:
            self.refused += 1
            self._control.halt(self.halt(None))
            raise Halted
        lease.reservation = (token, cost)

    def settle(self, attempt: Attempt, lease: Lease) -> Awaitable[None] | None:
        """Replace the lease's reservation by what the attempt cost: now with a local ledger
        (None), else the step to await."""
        if lease.reservation is None:
            return None
        (token, reserved), lease.reservation = lease.reservation, None
        reply = attempt.reply
        actual = 0.0 if reply is None else reply_cost(self._prices[attempt.backend.id], reply)
        if actual is None:
            actual = reserved
        if self._local is not None:
            self._local.settle(token, reserved, actual)
            return None
        return self.ledger.settle(token, reserved, actual)  # type: ignore[return-value]

    def halt(self, not_run: int | None) -> Halt:
        """The halt of a run that reached its budget; ``not_run``: jobs left without a result
        (None while the run still drains: the jobs refused so far)."""
        count = self.refused if not_run is None else not_run
        return Halt(
            3,
            "budget",
            f"budget reached: ${self.spent:.2f} of ${self.limit:.2f} spent; {count} jobs not "
            "run — raise --max-cost and --resume",
        )

    def progress(self) -> str:
        """What the live display says of the budget."""
        return f"spent ${self.spent:,.2f} of ${self.limit:,.2f}"

    def record(self) -> dict[str, float]:
        """The run_end record's ``budget``."""
        return {"limit": self.limit, "spent": round(self.spent, 6)}
