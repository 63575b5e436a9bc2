"""Caps and rate limits shared by every process and host that names one Redis (``[gate] kind =
"redis"``, SPEC §2, §8; issue 7).

The local gate (``gate.py``) holds a backend's cap inside one process; large batches run several
processes on several hosts with the same keys, so the cap must hold across all of them. This
module is the same ``Gate`` interface backed by Redis, a real coordination engine:

- a slot is a lease (``slots`` sorted set, token -> expiry); a background task per process renews
  every held lease in one round trip each ``lease / 3`` s; a killed holder's slot comes back
  after ``lease`` s;
- waiters are visible to every process: a ticket in the ``queue`` sorted set, scored by arrival,
  with its own short lease; a ticket is admitted only when no ticket before it still waits for
  a free slot, so no waiter is overtaken (FIFO across processes) and ``try_acquire`` never
  overtakes one;
- a release publishes on the scope's channel so waiters everywhere wake at once; a poll of a
  bounded rate covers lost messages;
- ``rpm``/``tpm`` are one GCRA script over both budgets; a Retry-After pauses the scope for every
  process; with ``adaptive`` the AIMD cap lives in Redis too.

Every step is one Lua script (``_redis_scripts``), timed by the server's clock.

Redis going away mid-run: calls in flight finish; a failed release is tolerated (its lease
expires); new acquires wait and retry with backoff. Redis restarted empty: each process's renewal
adds its held leases back, and a process that saw the outage admits nothing new for a grace
period (two renewal retries) after it reconnects, so the survivors' slots are counted again
before anyone takes a new one (docs/redis.md says what remains).

``redis`` (redis.asyncio) is an optional extra, ``rrcli[redis]``; it is imported here only.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import structlog

from rrcli.config.profile import Profile
from rrcli.errors import GateUnavailableError
from rrcli.run import _redis_scripts as lua
from rrcli.run.gate import PROBE_INITIAL, PROBE_MAX
from rrcli.run.scopes import ScopeLimits, scope_limits

__all__ = ["RedisGate", "RedisGates", "make_redis_gates", "redacted_url"]

log = structlog.get_logger("rrcli.run.redis_gate")

BACKOFF_INITIAL = 0.05  # seconds: retrying the connection while Redis is away
BACKOFF_MAX = 2.0
POLL_MAX = 0.5  # seconds: the slowest a waiter re-checks without a wake message
CONNECT_TIMEOUT = 2.0
SOCKET_TIMEOUT = 5.0
AIMD_TTL = 3600.0  # seconds an idle scope keeps its adapted cap


class _Down(Exception):
    """Redis could not be reached for one step (translated once, in ``_Hub.run``)."""


def redacted_url(url: str) -> str:
    """The url with any password replaced by ``***``: urls appear in messages, secrets never."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    netloc = f"{user}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _import_redis() -> Any:
    try:
        import redis.asyncio as aredis
    except ImportError as exc:  # pragma: no cover - the extra is installed in CI
        raise GateUnavailableError(
            '[gate] kind = "redis" needs the redis client — pip install "rrcli[redis]"'
        ) from exc
    return aredis


class _Hub:
    """One process's side of the shared gates: the connection, renewal, wake listener, outages."""

    def __init__(
        self,
        url: str,
        *,
        lease: float,
        adaptive: bool,
        rng: random.Random,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.url = url
        self.lease = lease
        self.adaptive = adaptive
        self.rng = rng
        self.clock = clock
        self.sleep = sleep
        self.interval = lease / 3.0  # renewal period
        self.poll = min(POLL_MAX, lease / 4.0)
        self.ticket_lease = max(1.0, 5.0 * self.poll)
        self.retry = min(self.interval, 0.5)  # renewal retry while Redis is away
        self.grace = 2.0 * self.retry + 0.1  # no new admission this long after an outage
        self.process = secrets.token_hex(8)  # tokens must differ across processes: not the rng
        self._serial = 0
        self.gates: dict[str, RedisGate] = {}
        self.admit_after = 0.0
        self.outage = False
        self.closed = False
        self._client: Any = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._renew_now = asyncio.Event()

    # -- connection --------------------------------------------------------------------------

    def client(self) -> Any:
        if self._client is None:
            aredis = _import_redis()
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            self._client = aredis.Redis.from_url(
                self.url,
                socket_connect_timeout=CONNECT_TIMEOUT,
                socket_timeout=SOCKET_TIMEOUT,
                retry=Retry(NoBackoff(), 0),  # our loops retry; the client's 10 retries would stall
                decode_responses=True,
            )
            self._start_loops()
        return self._client

    def _start_loops(self) -> None:
        self._loops = [
            asyncio.create_task(self._renewal(), name="rrcli.run.redis_gate.renewal"),
            asyncio.create_task(self._listen(), name="rrcli.run.redis_gate.listen"),
        ]

    async def run(self, script: lua.Script, keys: dict[str, str], *args: object) -> Any:
        """Run one script (EVALSHA, then EVAL on a server that lost its script cache)."""
        from redis.exceptions import NoScriptError

        client = self.client()
        names = [keys[k] for k in script.keys]

        async def call() -> Any:
            try:
                return await client.evalsha(script.sha, len(names), *names, *args)
            except NoScriptError:
                return await client.eval(script.text, len(names), *names, *args)

        return await self.guarded(call())

    async def guarded(self, step: Awaitable[Any]) -> Any:
        """Await one Redis step; a lost connection becomes ``_Down`` (translated here only)."""
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            reply = await step
        except (ConnectionError, TimeoutError, OSError) as exc:
            self._went_down(exc)
            raise _Down(str(exc)) from exc
        self._came_back()
        return reply

    async def ping(self) -> None:
        """After an outage, reach Redis before admitting anything (starts the grace)."""
        await self.guarded(self.client().ping())

    async def run_until_up(self, script: lua.Script, keys: dict[str, str], *args: object) -> Any:
        """Run one script, retrying the connection with jittered backoff while Redis is away."""
        delay = BACKOFF_INITIAL
        while True:
            try:
                return await self.run(script, keys, *args)
            except _Down:
                await self.sleep(self.rng.uniform(delay / 2, delay))
                delay = min(BACKOFF_MAX, delay * 2)

    async def best_effort(self, what: str, script: lua.Script, keys: dict[str, str], *args: object):
        """Run one script whose failure is tolerated (a release: the lease expires by itself)."""
        try:
            return await self.run(script, keys, *args)
        except _Down as exc:
            log.warning(
                "rrcli.gate_step_skipped", step=what, url=redacted_url(self.url), error=str(exc)
            )
            return None

    def _went_down(self, exc: BaseException) -> None:
        if not self.outage:
            self.outage = True
            log.warning("rrcli.gate_unreachable", url=redacted_url(self.url), error=str(exc))

    def _came_back(self) -> None:
        if self.outage:
            self.outage = False
            self.admit_after = self.clock() + self.grace
            log.warning("rrcli.gate_reconnected", url=redacted_url(self.url), grace_s=self.grace)
            self._renew_now.set()

    async def wait_admissible(self) -> None:
        """After an outage, wait out the grace so re-registered slots are counted first."""
        while (left := self.admit_after - self.clock()) > 0:
            await self.sleep(left)

    def token(self) -> str:
        self._serial += 1
        return f"{self.process}:{self._serial}"

    def background(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- renewal and wake-ups ----------------------------------------------------------------

    async def renew_all(self) -> None:
        """Renew every held lease of this process in one round trip (re-adding lost ones)."""
        held = {s: list(g.held) for s, g in self.gates.items() if g.held}
        if not held:
            return

        async def renew() -> list[Any]:
            async with self.client().pipeline(transaction=False) as pipe:
                for scope, tokens in held.items():
                    key = self.gates[scope].keys["slots"]
                    pipe.eval(lua.RENEW.text, 1, key, self.lease, *tokens)
                return await pipe.execute()

        replies = await self.guarded(renew())
        for scope, added in zip(held, replies, strict=True):
            if added:
                log.warning("rrcli.gate_leases_restored", scope=scope, leases=int(added))

    async def _renewal(self) -> None:
        wait = self.interval
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._renew_now.wait(), wait)
            self._renew_now.clear()
            try:
                await self.renew_all()
                wait = self.interval
            except _Down:
                wait = self.retry

    async def _listen(self) -> None:
        """Wake this process's waiters when any process releases a slot of their scope.

        The subscription's socket is also the outage detector: it closes the moment Redis goes
        away, so even a process that sent nothing then knows to wait out the grace.
        """
        from redis.exceptions import ConnectionError, TimeoutError

        channels = {g.keys["wake"]: g for g in self.gates.values()}
        delay = BACKOFF_INITIAL
        while True:
            try:
                async with self.client().pubsub() as pubsub:
                    await pubsub.subscribe(*channels)
                    self._came_back()
                    delay = BACKOFF_INITIAL
                    async for message in pubsub.listen():
                        gate = channels.get(message.get("channel"))
                        if gate is None or message.get("type") != "message":
                            continue
                        if message.get("data") != self.process:  # ours were counted already
                            gate.wake()
            except (ConnectionError, TimeoutError, OSError) as exc:
                self._went_down(exc)
                await self.sleep(self.rng.uniform(delay / 2, delay))  # polls cover the gap
                delay = min(self.retry, delay * 2)

    async def close(self) -> None:
        """Stop renewal and listening, release every held lease, close the connection."""
        if self.closed:
            return
        self.closed = True
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=SOCKET_TIMEOUT)
        for gate in self.gates.values():
            while gate.held:
                await gate.release()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()


class RedisGate:
    """One scope's gate, shared through Redis; the same interface as ``gate.Gate``.

    ``in_flight`` and ``waiting`` count this process's calls; ``cap`` is the shared effective cap
    as last seen. All times are seconds.
    """

    def __init__(self, hub: _Hub, limits: ScopeLimits) -> None:
        self.hub = hub
        self.limits = limits
        self.scope = limits.scope
        self.keys = lua.scope_keys(limits.scope)
        self.held: list[str] = []
        self._cap = limits.max_cap
        self._waiting = 0
        self._wakes = 0
        self._woken = asyncio.Event()
        self._listeners: list[Callable[[], None]] = []
        self._paused_until = 0.0  # local clock, as last learnt from Redis
        self._req_interval = 60.0 / limits.rpm if limits.rpm else 0.0
        self._req_burst = max(1.0, limits.rpm / 60.0) if limits.rpm else 1.0
        self._tok_interval = 60.0 / limits.tpm if limits.tpm else 0.0
        self._tok_burst = max(1.0, limits.tpm / 60.0) if limits.tpm else 1.0

    @property
    def cap(self) -> int:
        return self._cap

    @property
    def max_cap(self) -> int:
        return self.limits.max_cap

    @property
    def paused_until(self) -> float:
        """This process's clock time until which the scope is paused, as last learnt."""
        return self._paused_until

    @property
    def in_flight(self) -> int:
        return len(self.held)

    @property
    def waiting(self) -> int:
        return self._waiting

    # -- slots -------------------------------------------------------------------------------

    async def _admit(self, token: str, ticket: str) -> tuple[bool, int, int, float]:
        """One admission step; returns (admitted, tickets ahead, free slots, pause seconds)."""
        hub = self.hub
        reply = await hub.run(
            lua.ACQUIRE, self.keys, token, ticket, self.max_cap, hub.lease, hub.ticket_lease
        )
        admitted, cap, pause, ahead, free = reply
        self._cap = int(cap)
        pause = float(pause)
        if pause > 0:
            self._paused_until = max(self._paused_until, hub.clock() + pause)
        if admitted:
            self.held.append(token)
        return bool(admitted), int(ahead), int(free), pause

    async def acquire(self) -> None:
        """Wait for a slot, FIFO with every waiter of every process."""
        hub = self.hub
        token = hub.token()
        self._waiting += 1
        delay = BACKOFF_INITIAL
        try:
            while True:
                seen = self._wakes
                try:
                    if hub.outage:
                        await hub.ping()
                    await hub.wait_admissible()
                    admitted, ahead, free, pause = await self._admit(token, token)
                except _Down:
                    await hub.sleep(hub.rng.uniform(delay / 2, delay))
                    delay = min(BACKOFF_MAX, delay * 2)
                    continue
                delay = BACKOFF_INITIAL
                if admitted:
                    return
                if pause > 0:  # a server asked every process to hold off
                    await hub.sleep(min(pause, hub.poll))
                    continue
                await self._await_releases(seen, max(1, ahead - free + 1))
        except BaseException:
            if token not in self.held:
                hub.background(
                    hub.best_effort("abandon", lua.ABANDON, self.keys, token, hub.process)
                )
            raise
        finally:
            self._waiting -= 1

    async def _await_releases(self, seen: int, needed: int) -> None:
        """Sleep until ``needed`` releases were announced since ``seen``, or a jittered poll."""
        hub = self.hub
        deadline = hub.clock() + hub.rng.uniform(0.5, 1.0) * hub.poll
        while self._wakes - seen < needed:
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
            if max(hub.admit_after, self._paused_until) > hub.clock():
                return False
            admitted, *_ = await self._admit(hub.token(), "")
        except _Down:
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

    def add_release_listener(self, callback: Callable[[], None]) -> None:
        self._listeners.append(callback)

    def remove_release_listener(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(ValueError):
            self._listeners.remove(callback)

    # -- rate limits -------------------------------------------------------------------------

    async def reserve(self, tokens: int) -> None:
        """Wait until the shared rpm/tpm budgets let a call of ``tokens`` start; charge them."""
        hub = self.hub
        if not (self._req_interval or self._tok_interval):
            return
        while True:
            wait = float(
                await hub.run_until_up(
                    lua.RESERVE,
                    self.keys,
                    self._req_interval,
                    self._req_burst,
                    self._tok_interval,
                    self._tok_burst,
                    max(0, int(tokens)),
                )
            )
            if wait <= 0:
                return
            await hub.sleep(wait)

    async def settle(self, estimated: int, actual: int) -> None:
        """Charge or refund the tpm budget by the difference the response's usage revealed."""
        if self._tok_interval and actual != estimated:
            await self.hub.best_effort(
                "settle", lua.SETTLE, self.keys, self._tok_interval, int(actual) - int(estimated)
            )

    def record(self, rate_limited: bool) -> None:
        """Per attempt: with ``adaptive``, feed the shared adaptive cap (in the background); the
        rule is ``gate.aimd_step``'s, run atomically in Redis (``_redis_scripts.AIMD``)."""
        if self.hub.adaptive:
            self.hub.background(self._record(rate_limited))

    async def _record(self, rate_limited: bool) -> None:
        cap = await self.hub.best_effort(
            "aimd", lua.AIMD, self.keys, self.max_cap, int(rate_limited), AIMD_TTL,
            PROBE_INITIAL, PROBE_MAX,
        )  # fmt: skip
        if cap is not None:
            self._cap = int(cap)

    def pause_until(self, deadline: float) -> None:
        """Grant no slot, in any process, before ``deadline`` (this process's clock); a later
        deadline extends the pause, an earlier one never shortens it. Held slots stay held."""
        hub = self.hub
        seconds = deadline - hub.clock()
        if seconds <= 0 or deadline <= self._paused_until:
            return
        self._paused_until = deadline
        log.info("rrcli.gate_paused", scope=self.scope, seconds=round(seconds, 3))
        hub.background(hub.best_effort("pause", lua.PAUSE, self.keys, seconds))


class RedisGates(dict[str, RedisGate]):
    """The gates of one process, by scope; ``await gates.close()`` stops renewal and releases."""

    def __init__(self, hub: _Hub, gates: dict[str, RedisGate]) -> None:
        super().__init__(gates)
        self.hub = hub

    async def close(self) -> None:
        await self.hub.close()


def _check_reachable(url: str) -> None:
    """Raise GateUnavailableError naming the url (never its password) if Redis does not answer."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    shown = redacted_url(url)
    try:
        client = redis.Redis.from_url(
            url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=CONNECT_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )  # fmt: skip
    except ValueError as exc:
        raise GateUnavailableError(
            f"[gate] url {shown!r} is not a Redis url ({exc}) — use redis://HOST:PORT/DB"
        ) from exc
    try:
        client.ping()
    except redis.RedisError as exc:
        raise GateUnavailableError(
            f"[gate] cannot reach Redis at {shown}: {exc} — start redis-server there, fix "
            '[gate] url, or use [gate] kind = "local"'
        ) from exc
    finally:
        client.close()


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
    _import_redis()
    _check_reachable(settings.url)
    hub = _Hub(
        settings.url,
        lease=settings.lease,
        adaptive=settings.adaptive,
        rng=rng,
        clock=clock,
        sleep=sleep,
    )
    for limits in scope_limits(profile.backends):
        hub.gates[limits.scope] = RedisGate(hub, limits)
    return RedisGates(hub, hub.gates)
