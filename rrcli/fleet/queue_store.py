"""One process's connection to a shared work queue in Redis: each step of the queue as one
command or one script (``_queue_scripts``), retried while Redis is away.

Redis going away mid-run (a restart, a network cut): every step waits and retries with jittered
backoff until Redis answers again, logging the outage once; calls in flight go on meanwhile.
With AOF on, a restarted Redis has the queue as it was; without, it comes back empty and the
queue is lost (``QueueLostError``: the README says what that loses).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from rrcli.errors import QueueFullError, QueueLostError
from rrcli.fleet import _queue_scripts as lua
from rrcli.fleet._hub import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    CONNECT_TIMEOUT,
    check_reachable,
    import_redis,
    redacted_url,
)
from rrcli.fleet._scripts import Script
from rrcli.logs import get_logger

__all__ = ["QueueStore"]

log = get_logger("rrcli.fleet.queue")

SOCKET_TIMEOUT = 10.0  # seconds; longer than any blocking read


class QueueStore:
    """The Redis side of queue ``name`` at ``url`` for one process (worker ``worker``)."""

    def __init__(self, url: str, name: str, worker: str, *, rng: random.Random) -> None:
        self.url, self.name, self.worker = url, name, worker
        self.keys = lua.queue_keys(name)
        self.rng = rng
        self.outage = False
        self._client: Any = None

    async def connect(self) -> None:
        """Reach Redis or raise GateUnavailableError naming the url (password masked)."""
        check_reachable(self.url, "queue")
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        self._client = import_redis().Redis.from_url(
            self.url,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            retry=Retry(NoBackoff(), 0),  # step() retries, with backoff
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def step(self, make: Callable[[Any], Awaitable[Any]]) -> Any:
        """Run one step (``make(client)``), waiting and retrying while Redis is away."""
        from redis.exceptions import ConnectionError, OutOfMemoryError, ResponseError, TimeoutError

        delay = BACKOFF_INITIAL
        while True:
            try:
                reply = await make(self._client)
            except OutOfMemoryError as exc:
                raise self.full() from exc
            except ResponseError as exc:
                if "NOGROUP" in str(exc):  # the stream and its group are gone
                    raise self.lost() from exc
                raise
            except (ConnectionError, TimeoutError, OSError) as exc:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the client made our cancel an error
                    raise asyncio.CancelledError from exc
                if not self.outage:
                    self.outage = True
                    url = redacted_url(self.url)
                    log.warning("rrcli.queue_unreachable", url=url, error=str(exc))
                await asyncio.sleep(self.rng.uniform(delay / 2, delay))
                delay = min(BACKOFF_MAX, delay * 2)
                continue
            if self.outage:
                self.outage = False
                log.warning("rrcli.queue_reconnected", url=redacted_url(self.url))
            return reply

    def script(self, script: Script, *args: object) -> Awaitable[Any]:
        """Run one script (EVALSHA, then EVAL on a server that lost its script cache)."""
        from redis.exceptions import NoScriptError

        names = [self.keys[k] for k in script.keys]

        async def call(client: Any) -> Any:
            try:
                return await client.evalsha(script.sha, len(names), *names, *args)
            except NoScriptError:
                return await client.eval(script.text, len(names), *names, *args)

        return self.step(call)

    # -- the queue's state ---------------------------------------------------------------------

    async def meta(self) -> dict[str, str]:
        raw = await self.step(lambda c: c.hgetall(self.keys["meta"]))
        return {k.decode(): v.decode() for k, v in raw.items()}

    async def pending(self) -> int:
        """Jobs delivered to some worker and not yet acknowledged."""
        reply = await self.step(lambda c: c.xpending(self.keys["jobs"], lua.GROUP))
        return int(reply["pending"])

    async def live(self) -> dict[str, str]:
        """The queue's meta, or QueueLostError when it vanished while this worker ran."""
        meta = await self.meta()
        if not meta:
            raise self.lost()
        return meta

    def lost(self) -> QueueLostError:
        return QueueLostError(
            f"queue {self.name!r} vanished from Redis at {redacted_url(self.url)} (restarted "
            "without persistence?) — every worker's --out holds the results it wrote; load "
            "the jobs again under a new name"
        )

    def full(self) -> QueueFullError:
        return QueueFullError(
            f"Redis at {redacted_url(self.url)} is out of memory: it refused to store the jobs "
            f"or results of queue {self.name!r} (its used memory passed maxmemory, and its "
            "maxmemory-policy evicts nothing)",
            "this worker's --out holds every result it wrote; give Redis more memory (maxmemory "
            "in its config, or CONFIG SET maxmemory) or free some (collect finished queues: "
            "rrcli results --queue NAME), then start workers again: rrcli run -p PROFILE "
            f"--queue {self.name} goes on where they stopped",
        )

    # -- loading -------------------------------------------------------------------------------

    async def lock(self, token: str, ttl_ms: int) -> bool:
        """Take (or renew, when ours) the loader lock for ``ttl_ms``."""
        key = self.keys["loader"]

        async def take(client: Any) -> bool:
            if await client.set(key, token, nx=True, px=ttl_ms):
                return True
            if (await client.get(key) or b"").decode() == token:
                return bool(await client.pexpire(key, ttl_ms))
            return False

        return await self.step(take)

    async def begin_load(
        self, digest: str, source: str, created: str, fixed: dict[str, float | int]
    ) -> str:
        """Name the queue's jobs file by its digest, with the settings ``fixed`` for every worker
        (unless named already), and make the stream and its group; returns the digest the queue
        holds."""
        meta, jobs = self.keys["meta"], self.keys["jobs"]

        async def begin(client: Any) -> str:
            if await client.hsetnx(meta, "digest", digest):
                await client.hset(
                    meta,
                    mapping={"source": source, "state": "loading", "created": created, **fixed},
                )
            try:
                await client.xgroup_create(jobs, lua.GROUP, id="0", mkstream=True)
            except Exception as exc:  # BUSYGROUP: made by an earlier loader
                if "BUSYGROUP" not in str(exc):
                    raise
            return (await client.hget(meta, "digest")).decode()

        return await self.step(begin)

    async def add(self, jobs: Sequence[tuple[int, dict[str, bytes]]], loaded_to: int) -> None:
        """Add a batch of jobs (line, stream fields) and record how far the load got, in one
        step."""
        args = [
            v
            for line, fields in jobs
            for name, value in fields.items()
            for v in (line, name, value)
        ]
        await self.script(lua.LOAD, loaded_to, *args)

    async def end_load(self, total: int, token: str) -> None:
        await self.step(
            lambda c: c.hset(self.keys["meta"], mapping={"state": "loaded", "total": total})
        )
        await self.unlock(token)

    async def unlock(self, token: str) -> None:
        """Give the loader lock back, when it is ours (a delete: Redis allows it out of memory)."""

        async def give(client: Any) -> None:
            if (await client.get(self.keys["loader"]) or b"").decode() == token:
                await client.delete(self.keys["loader"])

        await self.step(give)

    # -- working -------------------------------------------------------------------------------

    async def read(self, count: int, block_ms: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """Up to ``count`` jobs never delivered, waiting up to ``block_ms`` for one."""
        jobs = self.keys["jobs"]
        reply = await self.step(
            lambda c: c.xreadgroup(lua.GROUP, self.worker, {jobs: ">"}, count=count, block=block_ms)
        )
        if not reply:
            return []
        return [(mid.decode(), fields) for mid, fields in reply[0][1]]

    async def claim(self, min_idle_ms: int, cursor: str, count: int) -> tuple[str, list[Any]]:
        """Jobs left pending by a dead worker: (next cursor, [(id, raw, deliveries)])."""
        reply = await self.script(lua.CLAIM, lua.GROUP, self.worker, min_idle_ms, cursor, count)
        entries = [
            (mid.decode(), dict(zip(flat[::2], flat[1::2], strict=True)), int(n))
            for mid, flat, n in reply[1]
        ]
        return reply[0].decode(), entries

    async def ack(self, batch: Sequence[tuple[str, int, bytes, str, str, str]]) -> int:
        """Store each job's result and acknowledge it: (id, line, result, "1" for an ok result
        else "", session, deployment)."""
        args = [value for entry in batch for value in entry]
        return int(await self.script(lua.ACK, lua.GROUP, self.worker, *args))

    async def finished(self, total: int) -> bool:
        """Every one of the queue's ``total`` jobs has its result and none is left in the
        stream (undelivered or pending)."""

        async def count(client: Any) -> bool:
            async with client.pipeline(transaction=False) as pipe:
                pipe.hlen(self.keys["results"])
                pipe.xlen(self.keys["jobs"])
                stored, left = await pipe.execute()
            return int(stored) >= total and not int(left)

        return await self.step(count)

    async def renew(self, ids: Sequence[str]) -> None:
        if ids:
            await self.script(lua.RENEW, lua.GROUP, self.worker, *ids)

    async def bindings(self, sessions: Sequence[str]) -> dict[str, str]:
        values = await self.step(lambda c: c.hmget(self.keys["bindings"], list(sessions)))
        return {s: v.decode() for s, v in zip(sessions, values, strict=True) if v is not None}

    async def beat(self, info: bytes, ttl_ms: int, keep_s: int) -> None:
        """This worker's heartbeat; every key of the queue kept for ``keep_s`` more seconds."""
        beat_key = lua.worker_key(self.name, self.worker)

        async def beat(client: Any) -> None:
            async with client.pipeline(transaction=False) as pipe:
                pipe.set(beat_key, info, px=ttl_ms)
                pipe.sadd(self.keys["workers"], self.worker)
                for key in self.keys.values():
                    if key != self.keys["loader"]:
                        pipe.expire(key, keep_s)
                await pipe.execute()

        await self.step(beat)

    async def results(self) -> int:
        """Jobs done in the queue, by every worker: the results it holds."""
        return int(await self.step(lambda c: c.hlen(self.keys["results"])))

    async def leave(self) -> None:
        await self.step(lambda c: c.delete(lua.worker_key(self.name, self.worker)))
