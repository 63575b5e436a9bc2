"""The run's budget: the most a run may spend, and the check before every attempt.

Before an attempt is sent the router asks ``Budget.reserve``: the attempt's worst case
(``costs.attempt_ceiling``) is set aside when the spend so far, the reservations of the
attempts in flight and it stay within the limit. When they do not, the attempt WAITS for
attempts in flight to settle (first come, first served); only an attempt whose worst case does
not fit even once nothing is in flight (the spend alone leaves too little) is refused:
``Halted`` ends its job without a result line, and once what is left cannot cover the smallest
worst case seen, the run halts (exit 3: calls in flight finish, jobs not started get no
result). ``Budget.settle`` replaces the reservation by what the attempt was charged
(``costs.attempt_cost``: its usage, nothing for a request no provider billed, its
reservation when its usage is unknown); an attempt that ends unsent (cancelled while it waits
in line, or after its room was set aside) gives that room back (``Router.refund``). So the
spend never passes the limit, and no room is held for an attempt that is gone.

What bounds a call's bill is its reservation, so the reservation bounds what the backend can
bill for the body it is sent: its input at the most a provider may count it, and its output
at the LARGEST cap any spelling of the request asks for (``tokens.output_cap``:
``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``; a backend may read any),
times every answer of every prompt (``costs.answers``: ``n``, ``best_of``, each prompt of a
completions prompt list). The body sent carries that ONE cap, in one spelling of its API
(``tokens.one_cap``, the budget's own cap when the request sets none; translated toward
Anthropic as ``max_tokens``), so no backend reads a larger one; a request whose cap is no
whole number is refused before anything is sent (``tokens.cap_fault``).

Where spend is kept is a ``Ledger``: this process's (``LocalLedger``), or one shared in Redis
by every process (``fleet.ledger.RedisLedger``), which a waiting attempt polls. The spend of
earlier runs of the same results file (``--resume``) is read from the traces first
(``records.spend``).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Protocol

from rrcli.config.models import MEDIA
from rrcli.config.profile import Price
from rrcli.errors import Halted, Unaffordable
from rrcli.records.dollars import usd
from rrcli.routing.control import Halt, RunControl
from rrcli.routing.costs import NO_OUTPUT, attempt_ceiling, input_ceiling, over_limit
from rrcli.tokens import MediaTokens, output_cap

if TYPE_CHECKING:
    from rrcli.providers.base import Call
    from rrcli.routing.lease import Lease

__all__ = ["Budget", "Ledger", "LocalLedger"]

_EPSILON = 1e-12  # USD: float sums that equal the limit do not pass it
POLL_S = 0.05  # seconds between a waiting attempt's looks at a shared ledger


class Ledger(Protocol):
    """Where spend is kept, shared by several processes. ``spent``: settled USD, ``reserved``:
    set aside for attempts in flight, both as last seen (by everyone)."""

    spent: float
    reserved: float

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
    """The limit, the prices and the ledger; what the router asks before each attempt (the
    cashier settles after it). ``refused`` counts the jobs a refused attempt ended (no result);
    ``reserved_peak`` the most set aside at once. ``uncapped``: the backends whose model's
    most output nothing tells (a call there without its own cap is refused: exit 2);
    ``media``: by backend id, the tokens an image, file or audio part is reserved at;
    ``queue``: the queue whose budget it is, in queue mode (its halt then says how a worker
    runs the jobs left); ``halts``: a refusal may halt the run (``rrcli run``); without it
    (serve, Pool, which outlive a spent budget, renewed by its period) each refused call is
    refused on its own: ``Halted`` when what is left cannot cover even its input, else
    ``Unaffordable`` naming the cap to lower, and a call with no cap rrcli can know is
    ``Unaffordable`` naming ``max_tokens``."""

    def __init__(
        self,
        limit: float,
        prices: Mapping[str, Price],
        ledger: LocalLedger | Ledger,
        control: RunControl,
        uncapped: frozenset[str] = frozenset(),
        media: Mapping[str, MediaTokens] | None = None,
        queue: str | None = None,
        halts: bool = True,
    ) -> None:
        self.limit = limit
        self.halts = halts
        self.queue = queue
        self.ledger = ledger
        self.refused = 0
        self.reserved_peak = 0.0
        self.uncapped = uncapped
        self.media = dict(media or {})
        self._prices = prices
        self._control = control
        self._local = ledger if isinstance(ledger, LocalLedger) else None
        self._smallest = math.inf  # USD: the smallest worst case seen
        self._waiting: deque[tuple[float, asyncio.Future[bool]]] = deque()
        self._sleepers: list[asyncio.Future[None]] = []

    def reprice(
        self,
        prices: Mapping[str, Price],
        uncapped: frozenset[str],
        media: Mapping[str, MediaTokens],
    ) -> None:
        """A reloaded pool's backends priced (``prices``, ``uncapped``, ``media`` by backend
        id, as at ``__init__``); a backend it no longer has keeps its own, for its calls in
        flight."""
        self._prices = {**self._prices, **prices}
        self.uncapped = (self.uncapped - set(prices)) | uncapped
        self.media.update(media)

    @property
    def spent(self) -> float:
        return self.ledger.spent

    def ceiling(self, backend: str, call: Call) -> float:
        """USD: the worst case of an attempt of ``call`` on ``backend``; halts the run (exit
        2) and raises Halted for a call whose output nothing caps; raises Unaffordable for one
        whose worst case is more than the whole limit."""
        uncapped = backend in self.uncapped and call.endpoint not in NO_OUTPUT
        if uncapped and output_cap(call.params) is None:
            if not self.halts:
                raise Unaffordable(uncapped_call(backend))
            self._control.halt(uncapped_halt(backend))
            raise self._halted()
        media = self.media.get(backend, MEDIA)
        cost = attempt_ceiling(self._prices[backend], call, None, media)
        if cost > self.limit + _EPSILON:
            price = self._prices[backend]
            raise Unaffordable(over_limit(price, call, self.limit, media, backend))
        return cost

    def reserve(self, lease: Lease, tokens: int, call: Call) -> Awaitable[None] | None:
        """Set the attempt's worst case aside on ``lease``; raises Halted when it can never fit.
        Done now when a local ledger has room (None), else the step to await (waiting for
        attempts in flight to settle, or a shared ledger's round trip)."""
        cost = self.ceiling(lease.state.backend.id, call)
        if cost < self._smallest:
            self._smallest = cost
        local = self._local
        if local is None:
            return self._reserve_shared(lease, cost, call)
        if not self._waiting and local.reserve(cost) is not None:
            self._took(lease, "", cost)
            return None
        if local.spent + cost > self.limit + _EPSILON:
            self._refuse(lease, call)
        return self._wait_local(lease, cost, call)

    async def _wait_local(self, lease: Lease, cost: float, call: Call) -> None:
        """Wait in line until attempts in flight settled enough for ``cost`` (``_wake``)."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.append((cost, future))
        try:
            granted = await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.result():
                self._give_back(cost)
            raise
        if not granted:
            self._refuse(lease, call)
        self._took(lease, "", cost)

    def _wake(self) -> None:
        """Hand the room settled attempts left to the attempts waiting, in order; refuse those
        that can never fit, and all of them once the run is told to stop."""
        local, waiting, control = self._local, self._waiting, self._control
        assert local is not None
        while waiting:
            cost, future = waiting[0]
            if future.done():
                waiting.popleft()
                continue
            if (control.stopping and control.halted is None) or (
                local.spent + cost > self.limit + _EPSILON
            ):
                future.set_result(False)
            elif local.reserve(cost) is not None:
                future.set_result(True)
            else:
                return
            waiting.popleft()

    def _give_back(self, cost: float) -> None:
        assert self._local is not None
        self._local.settle("", cost, 0.0)
        self._wake()

    async def _reserve_shared(self, lease: Lease, cost: float, call: Call) -> None:
        """A shared ledger: ask it again after each local settle, or every POLL_S, until the
        attempt fits or can never fit."""
        ledger = self.ledger
        assert not isinstance(ledger, LocalLedger)
        control = self._control
        while True:
            token = await ledger.reserve(cost)
            if token is not None:
                self._took(lease, token, cost)
                return
            if ledger.spent + cost > self.limit + _EPSILON or (
                control.stopping and control.halted is None
            ):
                self._refuse(lease, call)
            await self._pause()

    async def _pause(self) -> None:
        """Until this process settles an attempt, or POLL_S passed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._sleepers.append(future)
        timer = loop.call_later(POLL_S, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()

    def _took(self, lease: Lease, token: str, cost: float) -> None:
        lease.reservation = (token, cost)
        if self.ledger.reserved > self.reserved_peak:
            self.reserved_peak = self.ledger.reserved

    def _refuse(self, lease: Lease, call: Call) -> None:
        """The attempt at hand can never fit: its job ends without a result; the run halts
        once what is left cannot cover the smallest worst case seen. A budget that does not
        halt refuses the call alone (``_unfit``)."""
        self.refused += 1
        if not self.halts:
            raise self._unfit(lease.state.backend.id, call)
        if self.spent + self._smallest > self.limit + _EPSILON:
            self._control.halt(self.halt(None))
        raise self._halted()

    def _halted(self) -> Halted:
        """The signal of an attempt refused: the run's halt, if it halted, in any front-end's
        words."""
        halt = self._control.halted
        if halt is not None:
            return Halted(halt.reason, halt.said())
        left = max(0.0, self.limit - self.spent - self.ledger.reserved)
        return Halted(
            "budget",
            f"the budget of ${usd(self.limit)} has ${usd(left)} left, less than this call's "
            "worst case: it is not sent",
        )

    def _unfit(self, backend: str, call: Call) -> Halted | Unaffordable:
        """Why a call that does not fit what is left is refused by a budget that does not
        halt: ``Unaffordable`` naming the cap to lower when its input with one token of output
        fits, else ``Halted`` (the budget spent, ``retry_after`` the seconds until its period
        renews it, None when none will)."""
        left = max(0.0, self.limit - self.spent)
        price, media = self._prices[backend], self.media.get(backend, MEDIA)
        if input_ceiling(price, call, media) + price.output / 1e6 <= left + _EPSILON:
            return Unaffordable(over_limit(price, call, left, media, backend, left=True))
        renews = getattr(self.ledger, "renews_in", None)
        return Halted(
            "budget",
            f"the budget of ${usd(self.limit)} is spent (${usd(self.spent)} of it; each call "
            "holds its worst case until it ends): no more calls are sent"
            + (" until its period starts again" if renews is not None and renews() else ""),
            retry_after=None if renews is None else renews(),
        )

    def settle(self, lease: Lease, charged: float | None) -> Awaitable[None] | None:
        """Replace the lease's reservation by ``charged`` (the cashier's charge; None: the
        reservation): now with a local ledger (None), else the step to await."""
        if lease.reservation is None:
            return None
        (token, reserved), lease.reservation = lease.reservation, None
        actual = reserved if charged is None else charged
        if self._local is not None:
            self._local.settle(token, reserved, actual)
            if self._waiting:
                self._wake()
            return None
        sleepers, self._sleepers = self._sleepers, []
        for future in sleepers:
            _resolve(future)
        return self.ledger.settle(token, reserved, actual)  # type: ignore[return-value]

    def halt(self, not_run: int | None) -> Halt:
        """The halt of a run that reached its budget; ``not_run``: jobs left without a result
        (None while the run still drains: the jobs refused so far)."""
        count = self.refused if not_run is None else not_run
        least = self._smallest
        smallest = "" if math.isinf(least) else f" (the smallest ${usd(least, 4)})"
        if self.queue is None:
            left, more = f"{count} jobs not run", "raise --max-cost and --resume"
        else:
            left = f"{count} jobs taken here not run (they stay in queue {self.queue})"
            more = (
                f"start a worker on queue {self.queue} with a higher --max-cost (the queue's "
                "budget counts what every worker spent) to run the jobs left"
            )
        return Halt(
            3,
            "budget",
            f"budget reached: ${usd(self.spent)} of ${usd(self.limit)} spent; {left} — each call "
            f"reserves its worst case{smallest} before it is sent, and a smaller max_tokens "
            f"lowers it; {more}",
            plain=f"the budget of ${usd(self.limit)} is spent (${usd(self.spent)} of it; each "
            "call holds its worst case until it ends): no more calls are sent",
        )

    def record(self) -> dict[str, float]:
        """The run_end record's ``budget``."""
        return {
            "limit": self.limit,
            "spent": round(self.spent, 6),
            "reserved_peak": round(self.reserved_peak, 6),
        }


def uncapped_halt(backend: str) -> Halt:
    """The halt of a budgeted run at a call rrcli cannot bound: no cap, and no known maximum."""
    return Halt(
        2,
        "no_output_cap",
        f"backend {backend}: a budget reserves each call's most output, and neither the call "
        "nor the backend caps it, nor is its model's most output known — set params.max_tokens "
        "on the backend (or max_tokens on each job)",
    )


def uncapped_call(backend: str) -> str:
    """Why a budget that does not halt refuses a call rrcli cannot bound, naming the field."""
    return (
        f"max_tokens is required: a budget reserves each call's most output, and the model "
        f"of deployment {backend} has no most output rrcli knows — set max_tokens"
    )


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
