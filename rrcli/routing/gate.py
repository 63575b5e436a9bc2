"""Per-backend gates: the one place that decides whether a call may start.

A gate guards one gate scope (backends sharing a ``gate_scope`` share one). It holds three limits:

- **concurrency**: never more calls in flight than the effective cap. Waiters are served FIFO and a
  freed slot is handed straight to the longest waiter, so a busy worker that takes a slot back at
  once cannot starve them; ``try_acquire`` never overtakes a waiter.
- **rate** (``rpm``/``tpm``): GCRA, paced evenly — one start every 60/rpm s, a burst of at most
  max(1, rpm/60). ``reserve`` books the budget at the moment it computes the start time (no
  check-then-act race between concurrent callers) and then sleeps until then; a request larger
  than the whole burst is admitted once the bucket is idle, so it never deadlocks.
- **adaptive cap** (AIMD): halve on a 429/529 and remember the load that drew it; regain the
  level below it at once, probe it ever more rarely (``aimd_step``).

``Gate`` is the interface (a Redis gate implements the same one); ``LocalGate`` is the in-process
implementation. All times are seconds; clock and sleep are passed in.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from rrcli.errors import WaitEnded
from rrcli.logs import get_logger
from rrcli.routing.scopes import scope_limits

if TYPE_CHECKING:
    from rrcli.config.profile import Profile

__all__ = [
    "Aimd",
    "Clock",
    "Gate",
    "Gcra",
    "LocalGate",
    "Sleep",
    "aimd_step",
    "make_gates",
]

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

log = get_logger()


class Gate(Protocol):
    """What the router and the runner need of a gate, local or shared."""

    scope: str

    @property
    def cap(self) -> int: ...  # the effective cap (lowered by adaptive)
    @property
    def max_cap(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def waiting(self) -> int: ...

    async def acquire(self) -> None: ...
    async def try_acquire(self) -> bool: ...
    async def release(self) -> None: ...
    async def reserve(self, tokens: int) -> None: ...
    async def settle(self, estimated: int, actual: int) -> None: ...
    def record(self, rate_limited: bool) -> None: ...
    def pause_until(self, deadline: float) -> None: ...
    def wake_waiters(self) -> None: ...
    def add_release_listener(self, callback: Callable[[], None]) -> None: ...
    def remove_release_listener(self, callback: Callable[[], None]) -> None: ...


@dataclass(slots=True)
class Gcra:
    """One GCRA budget. ``interval``: seconds of budget one unit costs; ``tolerance``: the burst,
    in seconds (max(interval, 1 s): at most one second's worth at once). ``tat``: the theoretical
    arrival time, when the budget booked so far has drained."""

    interval: float
    tolerance: float
    tat: float = float("-inf")

    @classmethod
    def per_minute(cls, limit: int) -> Gcra:
        interval = 60.0 / limit
        return cls(interval, max(interval, 1.0))

    @property
    def burst(self) -> float:
        """The burst in units: one second's worth, at least one."""
        return self.tolerance / self.interval

    def earliest(self, units: int, now: float) -> float:
        """The first time a request of ``units`` fits; a request larger than the whole burst fits
        once everything booked before it has drained."""
        return max(now, self.tat - max(0.0, self.tolerance - units * self.interval))

    def book(self, units: int, at: float) -> None:
        self.tat = max(self.tat, at) + units * self.interval


PROBE_INITIAL = 4  # runs of `cap` successes before the cap grows back to the level of a 429
PROBE_MAX = 64  # ... doubling after each probe that drew a 429 again, up to this


@dataclass(frozen=True, slots=True)
class Aimd:
    """An adaptive cap's state. ``streak``: successes in a row since the cap last changed;
    ``ceiling``: the cap at which the last 429 came (0: none known); ``probe``: runs of ``cap``
    successes needed before growing back to the ceiling."""

    cap: int
    streak: int = 0
    ceiling: int = 0
    probe: int = PROBE_INITIAL


def aimd_step(
    state: Aimd, max_cap: int, rate_limited: bool, held: bool = False, load: int = 0
) -> Aimd:
    """The adaptive cap after one attempt (pure).

    A 429/529 halves the cap (never below 1; not while ``held``: calls in flight when it was
    last lowered answer from the old load) and remembers the load that drew it as the ceiling
    (``load``: the calls in flight, this one included, when fewer than the cap; else the cap).
    Below the ceiling each success grows the cap by one (the level that held is regained within
    one round of calls, as TCP's slow start does); growing back TO the ceiling takes ``probe``
    runs of ``cap`` successes, and a 429 there again sets the cap just below it
    (the level that held all along, not half of it) and doubles ``probe`` (up to PROBE_MAX).
    ``probe`` runs at the ceiling without a 429 forget it (one run could count calls that
    started below it); the cap then grows by one a run of ``cap`` successes. So against a
    server whose hidden capacity is C the cap spends its time
    at C and probes C + 1 ever more rarely, each probe costing one retried call, instead of
    drawing a 429 every ~C²/2 calls and halving each time as plain AIMD does."""
    cap, streak, ceiling, probe = state.cap, state.streak, state.ceiling, state.probe
    if rate_limited:
        if held or cap == 1:
            return Aimd(cap, 0, ceiling, probe)
        drew = load if 0 < load < cap else cap
        if ceiling and cap >= ceiling:  # the probe of the ceiling failed: just below it again
            ceiling = min(ceiling, drew)
            return Aimd(max(1, ceiling - 1), 0, ceiling, min(PROBE_MAX, probe * 2))
        return Aimd(max(1, min(cap // 2, drew - 1)), 0, drew, PROBE_INITIAL)
    streak += 1
    if ceiling and cap >= ceiling and streak >= cap * probe:
        return Aimd(cap, 0, 0, PROBE_INITIAL)  # the level that failed holds now
    need = cap
    if ceiling:  # the level below the ceiling held: regained at once, the ceiling probed
        need = cap * probe if cap + 1 >= ceiling else 1
    if streak >= need and cap < max_cap:
        return Aimd(cap + 1, 0, ceiling, probe)
    return Aimd(cap, streak, ceiling, probe)


class LocalGate:
    """The in-process gate of one scope. Not thread-safe: one event loop owns it."""

    def __init__(
        self,
        scope: str,
        max_concurrency: int,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        adaptive: bool = False,
        clock: Clock,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError(f"gate {scope!r}: max_concurrency must be at least 1")
        self.scope = scope
        self._max_cap = max_concurrency
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._listeners: list[Callable[[], None]] = []
        self._clock = clock
        self._sleep = sleep
        self._rpm = Gcra.per_minute(rpm) if rpm else None
        self._tpm = Gcra.per_minute(tpm) if tpm else None
        self._adaptive = adaptive
        self._aimd = Aimd(max_concurrency)
        self._hold = 0  # attempts still to report before another decrease counts
        self._paused_until = float("-inf")
        self._waker: asyncio.Task[None] | None = None

    # -- read-only state ---------------------------------------------------------------------

    @property
    def cap(self) -> int:
        return self._aimd.cap

    @property
    def max_cap(self) -> int:
        return self._max_cap

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    @property
    def paused_until(self) -> float:
        return self._paused_until

    def __repr__(self) -> str:
        return f"LocalGate({self.scope!r}, {self._in_flight}/{self.cap}, waiting={self.waiting})"

    # -- concurrency -------------------------------------------------------------------------

    def _admits(self) -> bool:
        return self._in_flight < self._aimd.cap and self._clock() >= self._paused_until

    async def acquire(self) -> None:
        """Wait for a slot; FIFO among waiters. Cancelled while waiting, or sent away
        (WaitEnded), it holds nothing."""
        if not self._waiters and self._admits():
            self._in_flight += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        self._ensure_waker()
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled() and future.exception() is None:
                self._free_slot()  # handed a slot just as we were cancelled: pass it on
            elif future in self._waiters:  # a release since may have dropped it already
                self._waiters.remove(future)
            raise

    async def try_acquire(self) -> bool:
        """Take a slot only if one is free and nobody is waiting for one."""
        if self._waiters or not self._admits():
            return False
        self._in_flight += 1
        return True

    async def release(self) -> None:
        """Give a slot back; the longest waiter gets it directly."""
        self._free_slot()

    def _free_slot(self) -> None:
        if self._in_flight <= 0:
            raise RuntimeError(f"gate {self.scope!r}: release without a slot held")
        self._in_flight -= 1
        self._dispatch()

    def _dispatch(self) -> None:
        """Hand free slots to waiters in order, then tell the listeners what is left."""
        while self._waiters and self._admits():
            future = self._waiters.popleft()
            if not future.done():
                self._in_flight += 1
                future.set_result(None)
        if self._listeners and self._admits():
            for callback in tuple(self._listeners):
                callback()

    def wake_waiters(self) -> None:
        """End every wait for a slot with WaitEnded: the waiters hold nothing and go elsewhere."""
        while self._waiters:
            future = self._waiters.popleft()
            if not future.done():
                future.set_exception(WaitEnded(self.scope))

    def add_release_listener(self, callback: Callable[[], None]) -> None:
        """``callback()`` runs whenever a slot may have become free (release, regrowth, a pause
        ending)."""
        self._listeners.append(callback)

    def remove_release_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.remove(callback)

    # -- server-given pauses -----------------------------------------------------------------

    def pause_until(self, deadline: float) -> None:
        """Admit nothing new before ``deadline`` (a later deadline extends, an earlier never
        shortens). Slots already held are not revoked."""
        if deadline <= self._paused_until:
            return
        self._paused_until = deadline
        log.info("rrcli.gate_paused", scope=self.scope, seconds=round(deadline - self._clock(), 3))
        self._ensure_waker()

    def _ensure_waker(self) -> None:
        if self._waker is not None or self._clock() >= self._paused_until:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop yet: the first acquire starts the waker
            return
        self._waker = loop.create_task(self._wake())

    async def _wake(self) -> None:
        try:
            while (left := self._paused_until - self._clock()) > 0:
                await self._sleep(left)
        finally:
            self._waker = None
        self._dispatch()

    # -- rate budgets ------------------------------------------------------------------------

    async def reserve(self, tokens: int) -> None:
        """Wait until the rpm and tpm budgets let a call of ``tokens`` start, charging both.

        The start time is computed and booked in one step, with no await in between, so
        concurrent callers queue behind each other's bookings instead of all reading the same
        unspent budget. Cancelled while waiting, the booking stays (the budget errs on the safe
        side)."""
        if self._rpm is None and self._tpm is None:
            return
        now = self._clock()
        start = now
        tokens = max(0, tokens)
        if self._rpm is not None:
            start = max(start, self._rpm.earliest(1, now))
        if self._tpm is not None and tokens:
            start = max(start, self._tpm.earliest(tokens, now))
        if self._rpm is not None:
            self._rpm.book(1, start)
        if self._tpm is not None and tokens:
            self._tpm.book(tokens, start)
        if start > now:
            await self._sleep(start - now)

    async def settle(self, estimated: int, actual: int) -> None:
        """Correct the tpm booking of one call by its real usage (either way)."""
        if self._tpm is not None and actual != estimated:
            self._tpm.tat += (actual - estimated) * self._tpm.interval

    # -- adaptive cap (AIMD) -----------------------------------------------------------------

    def record(self, rate_limited: bool) -> None:
        """One attempt's outcome, for ``adaptive`` gates: halve the cap on a 429/529 and
        remember the load that drew it (the ceiling), regrow to just below it, probe it ever
        more rarely. See ``aimd_step``.

        Calls that were already in flight when the cap was halved answer from the old load; their
        429s say nothing new. So after a decrease, the next ``in_flight`` reports (as many as
        there were other calls in flight then) cannot decrease the cap again. Call it while the
        attempt still holds its slot, before releasing it."""
        if not self._adaptive:
            return
        held = self._hold > 0
        if held:
            self._hold -= 1
        before = self._aimd.cap
        self._aimd = aimd_step(self._aimd, self._max_cap, rate_limited, held, self._in_flight)
        if self._aimd.cap < before:
            self._hold = max(0, self._in_flight - 1)  # the others in flight
            log.info("rrcli.cap_decreased", scope=self.scope, cap=self._aimd.cap)
        elif self._aimd.cap > before:
            log.info("rrcli.cap_increased", scope=self.scope, cap=self._aimd.cap)
            self._dispatch()


def make_gates(profile: Profile, *, clock: Clock, sleep: Sleep = asyncio.sleep) -> dict[str, Gate]:
    """One in-process gate per gate scope of the profile, with ``scope_limits``' limits."""
    adaptive = profile.gate.adaptive
    return {
        limits.scope: LocalGate(
            limits.scope,
            limits.max_cap,
            rpm=limits.rpm,
            tpm=limits.tpm,
            adaptive=adaptive,
            clock=clock,
            sleep=sleep,
        )
        for limits in scope_limits(profile.backends)
    }
