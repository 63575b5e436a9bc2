"""A worker of a shared work queue (``rrcli run --queue NAME``): any number of
processes on any number of hosts pull one batch's jobs from Redis Streams as they have room.

- Loading: ``queue_load.load_jobs`` (once per queue, whatever the number of loaders); the
  queue's ``lease`` and ``max_deliveries`` are the first loader's, and a worker whose profile
  says otherwise warns and follows the queue.
- Pulling: ``fetch`` hands the run's workers (``JobFeed.fill``) jobs from ``XREADGROUP``, never
  more than the run's concurrency held at once (jobs fetched and not yet acknowledged).
- Ending a job: the engine's result goes to the local --out as in a plain run, and the same
  line to Redis, stored and the job acknowledged in one script (``_queue_scripts.ACK``); the
  --out is flushed to the OS before each acknowledgement, so a job acknowledged is in its
  worker's --out even after ``kill -9``.
- A dead worker: the jobs it held stay pending; the live ones renew theirs every ``lease / 3``
  s, so a job idle for ``lease`` s is claimed (``XAUTOCLAIM``) by another worker; a job
  delivered more than ``max_deliveries`` times ends as an error naming the cause.
- The end: the queue is drained (loaded, nothing undelivered) and nothing is pending anywhere.
  A step Redis refuses (out of memory, the queue gone) stops the worker with its error, also
  when the acknowledging or heartbeat task met it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import orjson

from rrcli.config.profile import Profile
from rrcli.errors import RRCLIError, UsageError
from rrcli.fleet._hub import redacted_url
from rrcli.fleet.names import worker_name
from rrcli.fleet.queue_load import load_jobs, stored_job
from rrcli.fleet.queue_store import QueueStore
from rrcli.logs import get_logger
from rrcli.records.attempt import CallOutcome
from rrcli.records.jobs import InvalidJob, Job, job_key
from rrcli.records.traceschema import rfc3339
from rrcli.routing.status import EngineStatus

__all__ = ["QueueEngine", "RedisQueue"]

log = get_logger("rrcli.fleet.queue")

ACK_BATCH = 256  # results stored and acknowledged in one script at the most
BLOCK_MS = 500  # the longest one read waits for a job
KEEP_S = 7 * 24 * 3600  # a queue nobody works on or collects expires after this
Entry = tuple[str, dict[bytes, bytes]]  # a stream entry: its id and fields


class _Progress(Protocol):
    def queue_done(self, done: int) -> None:
        """Every worker's jobs done in the queue, seen now."""


class QueueEngine(Protocol):
    """What a worker asks of the engine it feeds: whether the run stopped (``status``), the
    binding mode, the sessions other workers bound, the end of a job it gives up on (too many
    deliveries), and where the queue's progress goes."""

    session_binding: bool
    summary: _Progress

    def status(self) -> EngineStatus: ...
    def restore_bindings(self, mapping: Mapping[str, str]) -> None: ...
    def finish(self, outcome: CallOutcome) -> None: ...


class RedisQueue:
    """One process's side of queue ``name`` (the runner's SharedQueue): it loads ``jobs`` when
    given, then feeds the run jobs and stores their results."""

    def __init__(
        self,
        profile: Profile,
        name: str,
        jobs: Path | None,
        concurrency: int,
        *,
        worker: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if not profile.queue_url:
            raise UsageError(
                f"--queue {name}: the profile names no Redis — set [queue] url, or use "
                '[gate] kind = "redis" (its url is the default)'
            )
        self.worker = worker or worker_name()
        self.label = {"name": name, "worker": self.worker}
        self.settings = profile.queue
        self.lease = profile.queue.lease  # the queue's, once open: fixed when it was loaded
        self.max_deliveries = profile.queue.max_deliveries
        self.jobs = jobs
        self.concurrency = max(1, concurrency)
        self.store = QueueStore(profile.queue_url, name, self.worker, rng=rng or random.Random())
        self.held: dict[str, tuple[str, int]] = {}  # job key -> (stream id, line): not yet done
        self.acks: list[tuple[str, int, bytes, str, str, str]] = []
        self.unacked = 0  # jobs done here whose acknowledgement is not yet stored
        self.loaded = False
        self.finished = False  # every job had its result before this worker came
        self.engine: QueueEngine | None = None
        self._writer: Any = None  # the local --out, flushed before each acknowledgement
        self._cursor = "0-0"
        self._next_claim = 0.0
        self._due = asyncio.Event()  # an acknowledgement is due (the acker's wake-up)
        self._room = asyncio.Event()  # a job ended or was acknowledged (the fetcher's wake-up)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False  # the background loops end (a cancel the client ate included)

    # -- SharedQueue -----------------------------------------------------------------------------

    async def open(self) -> int:
        """Connect, load the jobs file when there is one, start beating; the jobs in the queue."""
        await self.store.connect()
        if self.jobs is not None:
            await load_jobs(self.store, self.jobs, self.settings)
            self.loaded = True
        meta = await self.store.meta()
        if not meta:
            raise UsageError(
                f"{self.store.name!r} is not a queue at {redacted_url(self.store.url)} — load "
                f"it first: rrcli run JOBS -p PROFILE --queue {self.store.name}"
            )
        self._fixed(meta)
        total = int(meta.get("total") or 0)
        self.finished = meta.get("state") == "loaded" and await self.store.finished(total)
        self._tasks.append(asyncio.create_task(self._beat(), name="rrcli.queue.beat"))
        return total

    def _fixed(self, meta: dict[str, str]) -> None:
        """Take the lease and max_deliveries the queue was loaded with (a queue loaded without
        them keeps this profile's); warn where this profile says otherwise."""
        for setting, kind in (("lease", float), ("max_deliveries", int)):
            mine = getattr(self, setting)
            theirs = kind(meta.get(setting) or mine)
            if theirs != mine:
                log.warning(
                    "rrcli.queue_setting_differs",
                    queue=self.store.name,
                    setting=setting,
                    queue_value=theirs,
                    profile_value=mine,
                    note=f"the queue's {setting} holds: it was fixed when the queue was loaded",
                )
                setattr(self, setting, theirs)

    def sink(self, writer: Any) -> QueueSink:
        self._writer = writer
        return QueueSink(writer, self)

    def attach(self, engine: QueueEngine) -> None:
        self.engine = engine
        self._tasks.append(asyncio.create_task(self._acker(), name="rrcli.queue.acker"))

    async def fetch(self) -> list[Job | InvalidJob] | None:
        """The next jobs for this worker, None once the queue is drained."""
        engine = self.engine
        assert engine is not None  # attached before the run pulls
        while not engine.status().stopping:
            self._raise_failure()
            # jobs held (fetched, not ended) never pass the concurrency; acknowledgements still
            # being stored may lag one concurrency more, so a read overlaps them
            room = self.concurrency - len(self.held) - max(0, self.unacked - self.concurrency)
            if room <= 0:
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), 1.0)
                continue
            loaded = self.loaded or await self._loaded()
            entries = await self._claim(room)
            if not entries:
                entries = await self.store.read(room, BLOCK_MS)
            if entries:
                return await self._take(entries)
            if loaded and not self.held and not self.unacked and not await self.store.pending():
                return None
        return None

    def _raise_failure(self) -> None:
        """The error a background task (acknowledging, beating) stopped with, raised here."""
        for task in self._tasks:
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def close(self) -> None:
        """Store the acknowledgements still due, stop beating, leave, disconnect; raise what
        storing them met (the results are in the local --out whatever happens)."""
        failure: BaseException | None = None
        try:
            await asyncio.wait_for(self._flush(), 30.0)
        except TimeoutError:
            pass
        except RRCLIError as exc:
            failure = exc
        self._closing = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        with contextlib.suppress(TimeoutError, RRCLIError):
            await asyncio.wait_for(self.store.leave(), 5.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.store.close(), 5.0)
        if failure is not None:
            raise failure

    # -- working ---------------------------------------------------------------------------------

    async def _loaded(self) -> bool:
        self.loaded = (await self.store.live()).get("state") == "loaded"
        return self.loaded

    async def _claim(self, room: int) -> list[Entry]:
        """Jobs idle for ``lease`` s (their worker died), at most every ``lease / 4`` s; a job
        delivered more than ``max_deliveries`` times ends here as an error."""
        now = time.monotonic()
        if now < self._next_claim:
            return []
        lease = self.lease
        self._next_claim = now + min(5.0, max(0.25, lease / 4))
        self._cursor, claimed = await self.store.claim(int(lease * 1000), self._cursor, room)
        entries = []
        for mid, fields, deliveries in claimed:
            if deliveries <= self.max_deliveries:
                entries.append((mid, fields))
                continue
            job = self._hold(mid, fields)
            self.engine.finish(self._too_many(job, deliveries))
        if claimed:
            log.warning("rrcli.queue_claimed", queue=self.store.name, jobs=len(claimed))
        return entries

    def _too_many(self, job: Job | InvalidJob, deliveries: int) -> CallOutcome:
        if isinstance(job, InvalidJob):
            return CallOutcome(job, "invalid")
        error = {
            "type": "max_deliveries",
            "message": (
                f"delivered {deliveries} times, more than [queue] max_deliveries = "
                f"{self.max_deliveries}: every worker it went to stopped before it "
                "ended (killed, out of memory, or its host lost)"
            ),
        }
        session = job.session if self.engine.session_binding or job.kind == "session" else None
        return CallOutcome(job, "error", error=error, session=session)

    async def _take(self, entries: list[Entry]) -> list[Job | InvalidJob]:
        jobs = [self._hold(mid, fields) for mid, fields in entries]
        if self.engine.session_binding:
            named = [j.session for j in jobs if isinstance(j, Job) and j.session is not j.key]
            if named:
                self.engine.restore_bindings(await self.store.bindings(named))
        return jobs

    def _hold(self, mid: str, fields: dict[bytes, bytes]) -> Job | InvalidJob:
        line = int(mid.split("-", 1)[1])
        job = stored_job(line, fields)
        self.held[job.key] = (mid, line)
        return job

    def ended(self, key: str, line: bytes, ok: bool, session: Any, deployment: Any) -> None:
        """A job ended here (its result ``line`` written locally, ``ok`` or not): acknowledge
        it."""
        held = self.held.pop(key, None)
        if held is None:
            return
        bind = self.engine.session_binding and isinstance(session, str)
        mid, number = held
        self.acks.append(
            (
                mid,
                number,
                line,
                "1" if ok else "",
                session if bind else "",
                deployment if bind and deployment else "",
            )
        )
        self.unacked += 1
        self._due.set()
        self._room.set()

    async def _acker(self) -> None:
        while not self._closing:
            await self._due.wait()
            self._due.clear()
            await self._flush()

    async def _flush(self) -> None:
        while self.acks:
            batch, self.acks = self.acks[:ACK_BATCH], self.acks[ACK_BATCH:]
            if self._writer is not None:
                self._writer.flush()  # a job acknowledged is in this worker's --out first
            await self.store.ack(batch)
            self.unacked -= len(batch)
            self._room.set()

    async def _beat(self) -> None:
        """The heartbeat (what ``rrcli queue`` counts as alive), the renewal of the jobs held
        here and a look at the jobs done in the whole queue, every ``lease / 3`` s (at most
        5 s)."""
        every = min(5.0, self.lease / 3)
        started = rfc3339(time.time())
        while not self._closing:
            info = {"pid": os.getpid(), "host": socket.gethostname(), "started": started}
            await self.store.beat(orjson.dumps(info), int(every * 3000), KEEP_S)
            await self.store.renew([mid for mid, _ in self.held.values()])
            if self.engine is not None:  # the queue's progress, for the display and its ETA
                self.engine.summary.queue_done(await self.store.results())
            await asyncio.sleep(every)


class QueueSink:
    """The run's results: each line written to the local --out as in a plain run, and the same
    line handed to the queue to store and acknowledge."""

    def __init__(self, writer: Any, queue: RedisQueue) -> None:
        self._writer = writer
        self._queue = queue

    def write(self, result: dict[str, Any], *, body: dict[str, Any] | None = None) -> None:
        line = self._writer.encode(result, body=body)
        self._writer.write_line(line)
        key = job_key(result["id"])
        ok = result.get("status") == "ok"
        self._queue.ended(key, line, ok, result.get("session"), result.get("deployment"))

    def flush(self) -> None:
        self._writer.flush()
