"""What several processes serving one pool on one Redis share beside its gates and budget:
which backends are down, and which backend each session is bound to.

Keys of the pool named ``<name>`` (the profile's label, as its budget; hash tag
``{rrcli:p:<name>}``, so one slot on a cluster)::

    down:<deployment>   HASH    reason, message, probe (the server time its next probe is
                                due, seconds): the backend is out of the pool for every process;
                                it expires 30 minutes after its last probe was claimed (three
                                times the longest wait between probes: no process is left)
    s:<session>         STR     the deployment id the session is bound to (the queue's bindings
                                hash holds the same fact, session -> deployment, for a queue's
                                life; a served session ends by idleness, so here each has its
                                own key, expiring ``session_idle`` after its last request)
    health              channel ``down <deployment> <process>`` and ``up <deployment>
                                <process>``, as they happen

A backend one process takes down is down for all at once (the message) and for any process
that starts later (the key). Each process heals on its own schedule, but the probe itself is
claimed: the first process whose wait ends sets the next probe's time and probes; the others
find the time not yet come and wait again. A successful probe deletes the key and says ``up``:
every process brings the backend back. A process that missed the message finds the key gone
at its next wait's end and brings the backend back without probing.

Redis away: each step is skipped (logged once by the hub) and the process goes on with its own
view: its health, its bindings; nothing waits for Redis here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from rrcli.errors import RedisDown
from rrcli.fleet._hub import BACKOFF_INITIAL, Hub
from rrcli.fleet._scripts import Script
from rrcli.logs import get_logger

__all__ = ["SharedPool"]

log = get_logger("rrcli.fleet.shared_pool")

# KEYS down; ARGV wait. The probe of a backend down, claimed: 'up' when its key is gone (a
# probe elsewhere brought it back), else the seconds until the probe another process claimed
# is due, else 0 and the next probe set ``wait`` seconds from now (this process probes now).
CLAIM = Script(
    ("down",),
    """
if redis.call('EXISTS', KEYS[1]) == 0 then return 'up' end
local due = tonumber(redis.call('HGET', KEYS[1], 'probe') or 0)
if due > now then return fmt(due - now) end
redis.call('HSET', KEYS[1], 'probe', fmt(now + tonumber(ARGV[1])))
redis.call('EXPIRE', KEYS[1], 3 * 600)
return '0'
""",
)

# KEYS down; ARGV reason message wait channel deployment process. A backend down: its reason
# and next probe stored (an earlier process's stay) and announced.
DOWN = Script(
    ("down",),
    """
if redis.call('HSETNX', KEYS[1], 'reason', ARGV[1]) == 1 then
  redis.call('HSET', KEYS[1], 'message', ARGV[2], 'probe', fmt(now + tonumber(ARGV[3])))
  redis.call('EXPIRE', KEYS[1], 3 * 600)
end
redis.call('PUBLISH', ARGV[4], 'down ' .. ARGV[5] .. ' ' .. ARGV[6])
return 1
""",
)

#: heard from another process: a backend down (deployment, reason, message), or up (deployment)
OnDown = Callable[[str, str, str], None]
OnUp = Callable[[str], None]


class SharedPool:
    """One process's side of pool ``name``'s shared health and bindings, on ``hub``'s Redis."""

    def __init__(self, hub: Hub, name: str, session_idle: float) -> None:
        self.hub = hub
        self.tag = f"{{rrcli:p:{name}}}"
        self.channel = f"{self.tag}:health"
        self.idle = max(1, round(session_idle))
        self._listener: asyncio.Task[None] | None = None

    def _down(self, deployment: str) -> dict[str, str]:
        return {"down": f"{self.tag}:down:{deployment}"}

    async def _step(self, step: Callable[[Any], Awaitable[Any]]) -> Any:
        """One Redis step; None when Redis is away (the hub logs the outage once)."""
        try:
            return await self.hub.guarded(step(self.hub.client()))
        except RedisDown:
            return None

    # -- health --------------------------------------------------------------------------------

    async def downs(self, deployments: Iterable[str]) -> dict[str, tuple[str, str]]:
        """The backends among ``deployments`` another process took down: (reason, message)."""
        ids = list(deployments)

        async def read(client: Any) -> list[Any]:
            async with client.pipeline(transaction=False) as pipe:
                for deployment in ids:
                    pipe.hmget(self._down(deployment)["down"], "reason", "message")
                return await pipe.execute()

        replies = await self._step(read)
        if replies is None:  # Redis away: none known
            return {}
        return {
            deployment: (reason, message or "")
            for deployment, (reason, message) in zip(ids, replies, strict=True)
            if reason
        }

    async def went_down(self, deployment: str, reason: str, message: str, wait: float) -> None:
        """This process took ``deployment`` down: down for every process, probed in ``wait`` s."""
        with contextlib.suppress(RedisDown):
            await self.hub.run(
                DOWN,
                self._down(deployment),
                reason,
                message,
                wait,
                self.channel,
                deployment,
                self.hub.process,
            )

    async def claim_probe(self, deployment: str, wait: float) -> float | None:
        """None when ``deployment`` is up again (a probe elsewhere); else the seconds until a
        probe another process claimed is due, 0 when this process is to probe now (the next
        probe then set ``wait`` s on). Redis away: 0 (probe)."""
        try:
            reply = await self.hub.run(CLAIM, self._down(deployment), wait)
        except RedisDown:
            return 0.0
        return None if reply == "up" else float(reply)

    async def came_up(self, deployment: str) -> None:
        """A probe of this process was answered: ``deployment`` is up for every process."""
        key = self._down(deployment)["down"]

        async def up(client: Any) -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.delete(key)
                pipe.publish(self.channel, f"up {deployment} {self.hub.process}")
                await pipe.execute()

        await self._step(up)

    def listen(self, on_down: OnDown, on_up: OnUp) -> None:
        """Hear the other processes' ``down`` and ``up`` until ``close``."""
        self._listener = asyncio.ensure_future(self._listen(on_down, on_up))

    async def _listen(self, on_down: OnDown, on_up: OnUp) -> None:
        from redis.exceptions import ConnectionError, TimeoutError

        delay = BACKOFF_INITIAL
        while True:
            try:
                async with self.hub.client().pubsub() as pubsub:
                    await pubsub.subscribe(self.channel)
                    delay = BACKOFF_INITIAL
                    async for message in pubsub.listen():
                        if message.get("type") != "message":
                            continue
                        what, deployment, process = _parts(message.get("data"))
                        if process == self.hub.process:  # its own: known already
                            continue
                        if what == "up":
                            on_up(deployment)
                        elif what == "down":
                            found = await self.downs([deployment])
                            if deployment in found:
                                on_down(deployment, *found[deployment])
            except (ConnectionError, TimeoutError, OSError):
                delay = await self.hub.back_off(delay, self.hub.retry)

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._listener

    # -- sessions ------------------------------------------------------------------------------

    async def bound(self, session: str) -> str | None:
        """The deployment another process bound ``session`` to, if any."""
        value = await self._step(lambda c: c.get(f"{self.tag}:s:{session}"))
        return value or None

    async def bind(self, session: str, deployment: str) -> None:
        """``session`` is bound to ``deployment`` for every process, until idle."""
        key = f"{self.tag}:s:{session}"
        await self._step(lambda c: c.set(key, deployment, ex=self.idle))

    def touch(self, session: str) -> None:
        """A request of ``session``: its binding kept another ``session_idle`` (in the
        background: the request does not wait)."""
        key = f"{self.tag}:s:{session}"
        self.hub.background(self._step(lambda c: c.expire(key, self.idle)))


def _parts(data: object) -> tuple[str, str, str]:
    """A health message's word (down, up), deployment and process ("" for one missing)."""
    what, _, rest = str(data).partition(" ")
    deployment, _, process = rest.rpartition(" ")
    return what, deployment, process
