"""first_available's queue: the requests waiting for a slot anywhere in the pool, served in
order as slots free up (``Router`` routes; this is where a first_available request waits).

A release in this process serves the queue at once, in order. One poller covers what this
process cannot see (slots freed elsewhere, a cap growing back, a pause ending): it wakes when a
gate says a slot may be free, or after a jittered backoff (POLL_INITIAL doubling to POLL_MAX),
so any number of waiting requests cost one bounded stream of gate checks.
"""

from __future__ import annotations

import asyncio
import random
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rrcli.routing.gate import Gate, Sleep
from rrcli.routing.lease import BackendState

__all__ = ["POLL_INITIAL", "POLL_MAX", "Waiting"]

POLL_INITIAL = 0.03  # first_available: the first wait before polling the gates again
POLL_MAX = 1.0  # ... doubling up to this

#: tries the eligible gates (not excluded, none of the ``refused`` gate ids) for a free slot
Sweep = Callable[[frozenset[str], set[int]], Awaitable[BackendState | None]]


@dataclass(slots=True, eq=False)
class _Waiter:
    """A first_available request waiting for a slot anywhere in the pool."""

    exclude: frozenset[str]
    granted: asyncio.Future[BackendState]


class Waiting:
    """The queue of first_available requests and its poller. ``sweep`` is the router's try of
    the gates; ``n_gates`` how many distinct gates the pool has (a pass ends when all said no).
    """

    def __init__(self, sweep: Sweep, n_gates: int, rng: random.Random, sleep: Sleep) -> None:
        self.queue: deque[_Waiter] = deque()
        self._sweep, self.n_gates, self._rng, self._sleep = sweep, n_gates, rng, sleep
        self._poller: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()  # replaced per poller: an Event binds to one loop
        self._quiet = False

    async def take(self, exclude: frozenset[str]) -> BackendState:
        """A free slot now, or one served in turn behind the requests already waiting."""
        if not self.queue:
            state = await self._sweep(exclude, set())
            if state is not None:
                return state
        loop = asyncio.get_running_loop()
        waiter = _Waiter(exclude, loop.create_future())
        self.queue.append(waiter)
        if self._poller is None:
            self._kick = asyncio.Event()
            self._poller = loop.create_task(self._poll())
        elif len(self.queue) == 1:
            self._kick.set()  # a new head: restart the backoff from POLL_INITIAL
        try:
            return await waiter.granted
        except asyncio.CancelledError:
            granted = waiter.granted
            if granted.done() and not granted.cancelled():  # handed a slot as it was cancelled
                await self.free(granted.result().gate)
            raise
        finally:
            self.queue.remove(waiter)

    async def _poll(self) -> None:
        """Serve the queue whenever a slot may be free, backing off while none is."""
        head: _Waiter | None = None
        delay = POLL_INITIAL
        try:
            while self.queue:
                if self.queue[0] is not head:
                    head, delay = self.queue[0], POLL_INITIAL
                if await self._wait_kick(self._rng.uniform(delay / 2, delay)):
                    delay = min(POLL_MAX, delay * 2)
                await self._serve()
        finally:
            self._poller = None

    async def _wait_kick(self, timeout: float) -> bool:
        """Wait for a kick or ``timeout`` seconds; True when the time ran out."""
        kicked = asyncio.ensure_future(self._kick.wait())
        timer = asyncio.ensure_future(self._sleep(timeout))
        try:
            await asyncio.wait((kicked, timer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            kicked.cancel()
            timer.cancel()
        self._kick.clear()
        return timer.done() and not timer.cancelled()

    async def _serve(self) -> None:
        """One pass over the first_available queue, in order: each waiter gets a slot from a
        gate that admits. A gate that said no is not asked again in this pass, and the pass ends
        once every gate has said no."""
        refused: set[int] = set()
        for waiter in tuple(self.queue):
            if len(refused) >= self.n_gates:
                return
            if waiter.granted.done():
                continue
            state = await self._sweep(waiter.exclude, refused)
            if state is None:
                continue
            if waiter.granted.done():  # cancelled while a shared gate was asked
                await self.free(state.gate)
            else:
                waiter.granted.set_result(state)

    async def free(self, gate: Gate) -> None:
        """Release a slot, then let the first_available queue have it before anyone new."""
        self._quiet = True  # the pass below serves this release; no need to wake the poller
        try:
            await gate.release()
        finally:
            self._quiet = False
        if self.queue:
            await self._serve()

    def on_capacity(self) -> None:
        """A gate says a slot may be free: wake the poller."""
        if self.queue and not self._quiet and self._poller is not None:
            self._kick.set()
