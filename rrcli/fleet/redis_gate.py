"""Caps and rate limits shared by every process and host that names one Redis (``[gate] kind =
"redis"``).

The local gate (``gate.py``) holds a backend's cap inside one process; large batches run several
processes on several hosts with the same keys, so the cap must hold across all of them. This
module is the same ``Gate`` interface backed by Redis, a real coordination engine:

- a slot is a lease (``slots`` sorted set, token -> expiry), renewed by the process's hub; a
  killed holder's slot comes back after ``lease`` s;
- waiters are visible to every process: a ticket in the ``queue`` sorted set, scored by arrival,
  with its own short lease; a ticket is admitted only when no ticket before it still waits for
  a free slot, so no waiter is overtaken (FIFO across processes) and ``try_acquire`` never
  overtakes one;
- a release publishes on the scope's channel so waiters everywhere wake at once; a poll of a
  bounded rate covers lost messages;
- ``rpm``/``tpm`` are one GCRA script over both budgets; a Retry-After pauses the scope for every
  process; with ``adaptive`` the AIMD cap lives in Redis too, under a key naming the cap it was
  computed for, and only runs with ``adaptive`` read it (a later run without it, or with another
  ``max_concurrency``, starts from its full cap).

Every step is one Lua script (``_scripts``), timed by the server's clock, run through the
process's ``_hub.Hub`` (the connection, renewal, wake-ups and outages).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable

from rrcli.config.profile import Profile
from rrcli.errors import RedisDown, WaitEnded
from rrcli.fleet import _scripts as lua
from rrcli.fleet._hub import BACKOFF_INITIAL, Hub, check_reachable, import_redis, redacted_url
from rrcli.logs import get_logger
from rrcli.routing.gate import PROBE_INITIAL, PROBE_MAX, Gcra
from rrcli.routing.scopes import ScopeLimits, scope_limits

__all__ = ["RedisGate", "RedisGates", "make_redis_gates", "redacted_url"]

log = get_logger("rrcli.fleet.redis_gate")

AIMD_TTL = 3600.0  # seconds an idle scope keeps its adapted cap


class RedisGate:
    """One scope's gate, shared through Redis; the same interface as ``gate.Gate``.

    ``in_flight`` and ``waiting`` count this process's calls; ``cap`` is the shared effective cap
    and ``paused_until`` (this process's clock) the scope's pause, as last learnt from Redis. The
    gate alone sets them; the router reads them. All times are seconds.
    """

    def __init__(self, hub: Hub, limits: ScopeLimits, max_pause: float) -> None:
        self.hub = hub
        self.limits = limits
        self.max_pause = max_pause  # seconds: the longest pause this process waits out
        self.scope = limits.scope
        self.keys = lua.scope_keys(limits.scope, limits.max_cap)
        self.held: list[str] = []
        self.max_cap = limits.max_cap
        self.cap = limits.max_cap
        self.waiting = 0
        self._wakes = 0
        self._sendoffs = 0  # wake_waiters calls: a wait that began before one ends with it
        self._woken = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self.paused_until = 0.0
        self._requests = _pacing(limits.rpm)  # (seconds a unit costs, burst in units)
        self._tokens = _pacing(limits.tpm)

    @property
    def in_flight(self) -> int:
        return len(self.held)

    # -- slots -------------------------------------------------------------------------------

    async def _admit(self, token: str, ticket: str) -> tuple[bool, int, int, float]:
        """One admission step; returns (admitted, tickets ahead, free slots, pause seconds)."""
        hub = self.hub
        reply = await hub.run(
            lua.ACQUIRE,
            self.keys,
            token,
            ticket,
            self.max_cap,
            hub.lease,
            hub.ticket_lease,
            self.max_pause,
            int(hub.adaptive),
        )
        admitted, cap, pause, ahead, free = reply
        self.cap = int(cap)
        pause = float(pause)
        if pause > 0:
            self.paused_until = max(self.paused_until, hub.clock() + pause)
        if admitted:
            self.held.append(token)
        return bool(admitted), int(ahead), int(free), pause

    async def acquire(self) -> None:
        """Wait for a slot, FIFO with every waiter of every process; sent away (WaitEnded,
        ``wake_waiters``), it holds nothing."""
        hub = self.hub
        token = hub.token()
        self.waiting += 1
        delay = BACKOFF_INITIAL
        sendoffs = self._sendoffs
        try:
            while True:
                if self._sendoffs != sendoffs:
                    raise WaitEnded(self.scope)
                seen = self._wakes
                try:
                    if hub.outage:
                        await hub.ping()
                    await hub.wait_admissible()
                    admitted, ahead, free, pause = await self._admit(token, token)
                except RedisDown:
                    delay = await hub.back_off(delay)
                    continue
                delay = BACKOFF_INITIAL
                if admitted:
                    return
                if pause > 0:  # a server asked every process to hold off
                    await hub.sleep(min(pause, hub.poll))
                    continue
                await self._await_releases(seen, max(1, ahead - free + 1), sendoffs)
        except BaseException:
            if token not in self.held:
                hub.background(
                    hub.best_effort("abandon", lua.ABANDON, self.keys, token, hub.process)
                )
            raise
        finally:
            self.waiting -= 1

    async def _await_releases(self, seen: int, needed: int, sendoffs: int) -> None:
        """Sleep until ``needed`` releases were announced since ``seen``, a jittered poll, or
        ``wake_waiters`` (``sendoffs`` is its count when the wait began)."""
        hub = self.hub
        deadline = hub.clock() + hub.rng.uniform(0.5, 1.0) * hub.poll
        while self._wakes - seen < needed and self._sendoffs == sendoffs:
            left = deadline - hub.clock()
            if left <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), left)

    async def try_acquire(self) -> bool:
        """Take a slot only if one is free and nobody (in any process) waits; never blocks long."""
        hub = self.hub
        try:
            if hub.outage:
                await hub.ping()
            if max(hub.admit_after, self.paused_until) > hub.clock():
                return False
            admitted, *_ = await self._admit(hub.token(), "")
        except RedisDown:
            return False
        return admitted

    async def release(self) -> None:
        """Give a slot back and wake waiters everywhere; a failure is tolerated (lease expires)."""
        if not self.held:
            raise RuntimeError(f"gate {self.limits.scope!r}: release() without a held slot")
        token = self.held.pop()
        self.wake()
        hub = self.hub
        await hub.best_effort("release", lua.RELEASE, self.keys, token, hub.process)

    def wake(self) -> None:
        """A slot of this scope was freed, here or by another process: wake waiters, listeners."""
        self._wakes += 1
        self._woken.set()
        self._woken = asyncio.Event()
        for callback in list(self._listeners):
            callback()

    def wake_waiters(self) -> None:
        """End every wait for a slot in this process with WaitEnded (they hold nothing)."""
        self._sendoffs += 1
        self.wake()

    def add_release_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def remove_release_listener(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    # -- rate limits -------------------------------------------------------------------------

    async def reserve(self, tokens: int) -> None:
        """Wait until the shared rpm/tpm budgets let a call of ``tokens`` start; charge them."""
        hub = self.hub
        if not (self._requests[0] or self._tokens[0]):
            return
        while True:
            wait = float(
                await hub.run_until_up(
                    lua.RESERVE,
                    self.keys,
                    *self._requests,
                    *self._tokens,
                    max(0, int(tokens)),
                )
            )
            if wait <= 0:
                return
            await hub.sleep(wait)

    async def settle(self, estimated: int, actual: int) -> None:
        """Charge or refund the tpm budget by the difference the response's usage revealed."""
        if self._tokens[0] and actual != estimated:
            await self.hub.best_effort(
                "settle", lua.SETTLE, self.keys, self._tokens[0], int(actual) - int(estimated)
            )

    def record(self, rate_limited: bool) -> None:
        """Per attempt: with ``adaptive``, feed the shared adaptive cap (in the background); the
        rule is ``gate.aimd_step``'s, run atomically in Redis (``_scripts.AIMD``)."""
        if self.hub.adaptive:
            self.hub.background(self._record(rate_limited))

    async def _record(self, rate_limited: bool) -> None:
        cap = await self.hub.best_effort(
            "aimd",
            lua.AIMD,
            self.keys,
            self.max_cap,
            int(rate_limited),
            AIMD_TTL,
            PROBE_INITIAL,
            PROBE_MAX,
        )
        if cap is not None:
            self.cap = int(cap)

    def pause_until(self, deadline: float) -> None:
        """Grant no slot, in any process, before ``deadline`` (this process's clock); a later
        deadline extends the pause, an earlier one never shortens it. Held slots stay held."""
        hub = self.hub
        seconds = deadline - hub.clock()
        if seconds <= 0 or deadline <= self.paused_until:
            return
        self.paused_until = deadline
        log.info("rrcli.gate_paused", scope=self.scope, seconds=round(seconds, 3))
        hub.background(hub.best_effort("pause", lua.PAUSE, self.keys, seconds))


def _pacing(per_minute: int | None) -> tuple[float, float]:
    """(seconds one unit costs, burst in units) of a per-minute budget, as the local gate paces
    it (``gate.Gcra``); (0, 1) when there is none."""
    if not per_minute:
        return 0.0, 1.0
    gcra = Gcra.per_minute(per_minute)
    return gcra.interval, gcra.burst


class RedisGates(dict[str, RedisGate]):
    """The gates of one process, by scope; ``await gates.close()`` stops renewal and releases."""

    def __init__(self, hub: Hub, gates: dict[str, RedisGate]) -> None:
        super().__init__(gates)
        self.hub = hub

    async def close(self) -> None:
        await self.hub.close()

    def rescoped(self, profile: Profile) -> RedisGates:
        """The gates of ``profile``'s scopes on the same hub (a reloaded profile): a scope
        whose limits are unchanged keeps its gate; a new or changed one gets a new gate, the
        gate it replaces still renewing the leases of its calls in flight until the hub
        closes."""
        hub, gates = self.hub, {}
        for limits in scope_limits(profile.backends):
            gate = self.get(limits.scope)
            if gate is None or gate.limits != limits:
                if gate is not None:  # its calls in flight keep their leases renewed
                    hub.gates[f"{limits.scope}\0{id(gate)}"] = hub.gates.pop(limits.scope)
                gate = RedisGate(hub, limits, profile.retry.max_server_pause)
                hub.gates[limits.scope] = gate
            gates[limits.scope] = gate
        return RedisGates(hub, gates)


def make_redis_gates(
    profile: Profile,
    *,
    rng: random.Random,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> RedisGates:
    """One shared gate per gate scope, for ``[gate] kind = "redis"``.

    Checks that Redis answers (raises GateUnavailableError naming the url otherwise); the
    connection, renewal and wake listener start with the first use, inside the event loop.
    """
    settings = profile.gate
    import_redis()
    check_reachable(settings.url)
    hub = Hub(settings, rng=rng, clock=clock, sleep=sleep)
    for limits in scope_limits(profile.backends):
        hub.gates[limits.scope] = RedisGate(hub, limits, profile.retry.max_server_pause)
    return RedisGates(hub, hub.gates)
