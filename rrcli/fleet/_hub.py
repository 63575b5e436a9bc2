"""One process's side of the Redis gates: the connection, the scripts, the leases' renewal, the
wake-ups, and what an outage means.

``redis_gate`` holds the gate's logic (admission, rates, AIMD) as Lua steps; this is the plumbing
every scope of a process shares: one client, each step run as one script (EVALSHA, then EVAL
after a script-cache loss), a background task renewing every held lease in one round trip each
``lease / 3`` s, a subscription that wakes waiters when any process releases a slot of their
scope, and the outage rules. A lost connection is translated once, into ``RedisDown``.

Redis going away mid-run: calls in flight finish; a failed release is tolerated (its lease
expires); new acquires wait and retry with backoff. Redis restarted empty: the renewal adds this
process's held leases back, and a process that saw the outage admits nothing new for a grace
period (two renewal retries) after it reconnects, so the survivors' slots are counted again
before anyone takes a new one (docs/redis.md says what remains).

``redis`` (redis.asyncio) is an optional extra, ``rrcli[redis]``; only the Redis gate's modules
import it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import re
import secrets
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from rrcli.config.profile import GateSettings
from rrcli.config.redaction import redacted_url
from rrcli.errors import GateUnavailableError, RedisDown
from rrcli.fleet import _scripts as lua
from rrcli.logs import get_logger

__all__ = [
    "BACKOFF_INITIAL",
    "Hub",
    "ScopeGate",
    "check_reachable",
    "import_redis",
    "redacted_url",
]

log = get_logger("rrcli.fleet.redis_gate")

BACKOFF_INITIAL = 0.05  # seconds: retrying the connection while Redis is away
BACKOFF_MAX = 2.0
POLL_MAX = 0.5  # seconds: the slowest a waiter re-checks without a wake message
CONNECT_TIMEOUT = 2.0
SOCKET_TIMEOUT = 5.0


class ScopeGate(Protocol):
    """What the hub needs of one scope's gate: its keys, the lease tokens it holds, a wake-up."""

    keys: dict[str, str]
    held: list[str]

    def wake(self) -> None: ...
    async def release(self) -> None: ...


def import_redis() -> Any:
    try:
        import redis.asyncio as aredis
    except ImportError as exc:  # pragma: no cover - the extra is installed in CI
        raise GateUnavailableError(
            '[gate] kind = "redis" needs the redis client — pip install "rrcli[redis]"'
        ) from exc
    return aredis


class Hub:
    """One process's side of the shared gates: the connection, renewal, wake listener, outages."""

    def __init__(
        self,
        settings: GateSettings,
        *,
        rng: random.Random,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.url, self.lease, self.adaptive = settings.url, settings.lease, settings.adaptive
        self.rng, self.clock, self.sleep = rng, clock, sleep
        self.interval = self.lease / 3.0  # renewal period
        self.poll = min(POLL_MAX, self.lease / 4.0)
        self.ticket_lease = max(1.0, 5.0 * self.poll)
        self.retry = min(self.interval, 0.5)  # renewal retry while Redis is away
        self.grace = 2.0 * self.retry + 0.1  # no new admission this long after an outage
        self.process = secrets.token_hex(8)  # tokens must differ across processes: not the rng
        self._serial = 0
        self.gates: dict[str, ScopeGate] = {}
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
            aredis = import_redis()
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
            asyncio.create_task(self._renewal(), name="rrcli.fleet.redis_gate.renewal"),
            asyncio.create_task(self._listen(), name="rrcli.fleet.redis_gate.listen"),
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
        """Await one Redis step; a lost connection becomes ``RedisDown`` (translated here only)."""
        from redis.exceptions import ConnectionError, TimeoutError

        try:
            reply = await step
        except (ConnectionError, TimeoutError, OSError) as exc:
            self._went_down(exc)
            raise RedisDown(str(exc)) from exc
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
            except RedisDown:
                delay = await self.back_off(delay)

    async def back_off(self, delay: float, most: float = BACKOFF_MAX) -> float:
        """Sleep a jittered ``delay`` (half to all of it); returns the next delay, doubled up to
        ``most``."""
        await self.sleep(self.rng.uniform(delay / 2, delay))
        return min(most, delay * 2)

    async def best_effort(self, what: str, script: lua.Script, keys: dict[str, str], *args: object):
        """Run one script whose failure is tolerated (a release: the lease expires by itself)."""
        try:
            return await self.run(script, keys, *args)
        except RedisDown as exc:
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
            except RedisDown:
                wait = self.retry

    async def _listen(self) -> None:
        """Wake this process's waiters when any process releases a slot of their scope.

        The subscription's socket is also the outage detector: it closes the moment Redis goes
        away, so even a process that sent nothing then knows to wait out the grace.
        """
        from redis.exceptions import ConnectionError, TimeoutError

        channels = {g.keys["wake"]: g for g in self.gates.values()}
        if not channels:  # a budget's own connection: no gate to wake
            return
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
                delay = await self.back_off(delay, self.retry)  # polls cover the gap

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


def check_reachable(url: str, section: str = "gate") -> None:
    """Raise GateUnavailableError naming the url (never its password) if Redis does not answer;
    ``section`` is the profile's table that names it (gate or queue)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    shown = redacted_url(url)
    try:
        client = redis.Redis.from_url(
            url,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=CONNECT_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )
    except ValueError as exc:
        raise GateUnavailableError(
            f"[{section}] url {shown!r} is not a Redis url ({exc}) — use redis://HOST:PORT/DB"
        ) from exc
    other = '[gate] kind = "local"' if section == "gate" else "run without --queue"
    try:
        client.ping()
    except TypeError as exc:  # the query names an option this scheme's connection does not take
        option = re.search(r"argument '(\w+)'", str(exc))
        named = option.group(1) if option else "an option of its query"
        raise GateUnavailableError(
            f"[{section}] url {shown!r} is not a Redis url ({named} is not an option of a "
            f"{url.partition(':')[0]}:// url) — remove it, or write rediss:// for a TLS option"
        ) from exc
    except redis.RedisError as exc:
        raise GateUnavailableError(
            f"[{section}] cannot reach Redis at {shown}: {exc} — start redis-server there, fix "
            f"[{section}] url, or {other}"
        ) from exc
    finally:
        client.close()
