"""A worker of a shared work queue (``rrcli run --queue NAME``, SPEC §14): any number of
processes on any number of hosts pull one batch's jobs from Redis Streams as they have room.

- Loading: ``rrcli run JOBS --queue NAME`` adds each line of JOBS to the queue's stream once,
  under a loader lock; a second process with the same file (same SHA-256) waits for the load
  and loads nothing; a loader that dies mid-load leaves the lock to expire and the next one
  goes on from the last line stored. Another file under a used NAME is refused (exit 2).
- Pulling: ``fetch`` hands the run's workers (``JobFeed.fill``) jobs from ``XREADGROUP``, never
  more than the run's concurrency held at once (jobs fetched and not yet acknowledged).
- Ending a job: the engine's result goes to the local --out as in a plain run, and the same
  line to Redis, stored and the job acknowledged in one script (``_queue_scripts.ACK``).
- A dead worker: the jobs it held stay pending; the live ones renew theirs every ``lease / 3``
  s, so a job idle for ``lease`` s is claimed (``XAUTOCLAIM``) by another worker; a job
  delivered more than ``max_deliveries`` times ends as an error naming the cause.
- The end: the queue is drained (loaded, nothing undelivered) and nothing is pending anywhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import structlog

from rrcli.config.profile import Profile
from rrcli.errors import UsageError
from rrcli.fleet._hub import redacted_url
from rrcli.fleet.names import worker_name
from rrcli.fleet.queue_store import QueueStore
from rrcli.records.attempt import CallOutcome
from rrcli.records.jobs import InvalidJob, Job, iter_jobs, job_key, open_jobs_file, parse_job
from rrcli.records.traceschema import rfc3339

__all__ = ["RedisQueue"]

log = structlog.get_logger("rrcli.fleet.queue")

LOCK_MS = 10_000  # the loader lock's lease: a dead loader's lock frees this soon
LOAD_BATCH = 1000  # lines added in one transaction
ACK_BATCH = 256  # results stored and acknowledged in one script at the most
BLOCK_MS = 500  # the longest one read waits for a job
KEEP_S = 7 * 24 * 3600  # a queue nobody works on or collects expires after this
Entry = tuple[str, dict[bytes, bytes]]  # a stream entry: its id and fields


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
        self.jobs = jobs
        self.concurrency = max(1, concurrency)
        self.store = QueueStore(profile.queue_url, name, self.worker, rng=rng or random.Random())
        self.held: dict[str, tuple[str, int]] = {}  # job key -> (stream id, line): not yet done
        self.acks: list[tuple[str, int, bytes, str, str]] = []
        self.unacked = 0  # jobs done here whose acknowledgement is not yet stored
        self.done = 0
        self.loaded = False
        self.engine: Any = None
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
            total = await self._load(self.jobs)
        else:
            meta = await self.store.meta()
            if not meta:
                raise UsageError(
                    f"{self.store.name!r} is not a queue at {redacted_url(self.store.url)} — load "
                    f"it first: rrcli run JOBS -p PROFILE --queue {self.store.name}"
                )
            total = int(meta.get("total") or 0)
        self._tasks.append(asyncio.create_task(self._beat(), name="rrcli.queue.beat"))
        return total

    def sink(self, writer: Any) -> QueueSink:
        return QueueSink(writer, self)

    def attach(self, engine: Any) -> None:
        self.engine = engine
        self._tasks.append(asyncio.create_task(self._acker(), name="rrcli.queue.acker"))

    async def fetch(self) -> list[Job | InvalidJob] | None:
        """The next jobs for this worker, None once the queue is drained."""
        while not self.engine.control.stopping:
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

    async def close(self) -> None:
        """Store the acknowledgements still due, stop beating, leave, disconnect."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._flush(), 30.0)
        self._closing = True
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.store.leave(), 5.0)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.store.close(), 5.0)

    # -- loading ---------------------------------------------------------------------------------

    async def _load(self, path: Path) -> int:
        """Load ``path`` unless it is loaded (or being loaded: then wait); the jobs it holds."""
        digest = file_digest(path)
        token = secrets.token_hex(8)
        while True:
            meta = await self.store.meta()
            self._same_file(meta.get("digest"), digest, path)
            if meta.get("state") == "loaded":
                self.loaded = True
                return int(meta["total"])
            if await self.store.lock(token, LOCK_MS):
                break
            await asyncio.sleep(0.2)  # another process is loading this file
        held = await self.store.begin_load(digest, str(path), rfc3339(time.time()))
        self._same_file(held, digest, path)
        start = int((await self.store.meta()).get("loaded_to") or 0)
        total = await self._add_lines(path, start, token, digest)
        await self.store.end_load(total, token)
        self.loaded = True
        log.info("rrcli.queue_loaded", queue=self.store.name, jobs=total, source=str(path))
        return total

    def _same_file(self, held: str | None, digest: str, path: Path) -> None:
        if held is not None and held != digest:
            name = self.store.name
            raise UsageError(
                f"queue {name!r} holds another jobs file than {path} — join it without JOBS "
                f"(rrcli run -p PROFILE --queue {name}), or load {path} under a new name"
            )

    async def _add_lines(self, path: Path, start: int, token: str, digest: str) -> int:
        """Add every line after line ``start`` to the stream; the jobs in the file."""
        total = 0
        batch: list[tuple[int, dict[str, bytes]]] = []
        for line, fields in _stored_lines(path):
            total += 1
            if line <= start:
                continue
            batch.append((line, fields))
            if len(batch) >= LOAD_BATCH:
                await self._add(batch, token, digest)
                batch = []
        if batch:
            await self._add(batch, token, digest)
        return total

    async def _add(
        self, batch: list[tuple[int, dict[str, bytes]]], token: str, digest: str
    ) -> None:
        if not await self.store.lock(token, LOCK_MS):
            raise UsageError(f"queue {self.store.name!r}: another process took over the load")
        if (await self.store.meta()).get("digest") != digest:  # Redis restarted empty
            raise self.store.lost()
        await self.store.add(batch, batch[-1][0])

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
        lease = self.settings.lease
        self._next_claim = now + min(5.0, max(0.25, lease / 4))
        self._cursor, claimed = await self.store.claim(int(lease * 1000), self._cursor, room)
        entries = []
        for mid, fields, deliveries in claimed:
            if deliveries <= self.settings.max_deliveries:
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
                f"{self.settings.max_deliveries}: every worker it went to stopped before it "
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
                self.engine.router.restore_bindings(await self.store.bindings(named))
        return jobs

    def _hold(self, mid: str, fields: dict[bytes, bytes]) -> Job | InvalidJob:
        line = int(mid.split("-", 1)[1])
        job = stored_job(line, fields)
        self.held[job.key] = (mid, line)
        return job

    def ended(self, key: str, line: bytes, session: Any, deployment: Any) -> None:
        """A job ended here (its result ``line`` written locally): acknowledge it."""
        held = self.held.pop(key, None)
        if held is None:
            return
        bind = self.engine.session_binding and isinstance(session, str)
        mid, number = held
        self.acks.append(
            (mid, number, line, session if bind else "", deployment if bind and deployment else "")
        )
        self.unacked += 1
        self.done += 1
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
            await self.store.ack(batch)
            self.unacked -= len(batch)
            self._room.set()

    async def _beat(self) -> None:
        """The heartbeat (what ``rrcli queue`` counts as alive), the renewal of the jobs held
        here and a look at the jobs done in the whole queue, every ``lease / 3`` s (at most
        5 s)."""
        every = min(5.0, self.settings.lease / 3)
        started = rfc3339(time.time())
        while not self._closing:
            info = {"pid": os.getpid(), "host": socket.gethostname(), "started": started}
            info["done"] = self.done
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
        self._queue.ended(key, line, result.get("session"), result.get("deployment"))

    def flush(self) -> None:
        self._writer.flush()


def stored_job(line: int, fields: dict[bytes, bytes]) -> Job | InvalidJob:
    """The job of a stream entry: a valid line (``j``) parsed again, an invalid one (``i``) as
    the loader found it."""
    raw = fields.get(b"j")
    if raw is not None:
        return parse_job(raw, line)
    job_id, message, duplicate_of, source = orjson.loads(fields[b"i"])
    return InvalidJob(job_id, line, message, duplicate_of, source)


def _stored_lines(path: Path) -> Iterator[tuple[int, dict[str, bytes]]]:
    """Each job of ``path`` as (line, its stream entry's fields): the raw line of a valid job,
    ``iter_jobs``'s verdict on an invalid one (duplicates need the whole file to be seen)."""
    with open_jobs_file(path) as stream:
        tee = _Tee(stream)
        for job in iter_jobs(tee, str(path)):  # type: ignore[arg-type]
            if isinstance(job, Job):
                yield job.line, {"j": tee.last}
            else:
                verdict = [job.id, job.message, job.duplicate_of, job.source]
                yield job.line, {"i": orjson.dumps(verdict)}


class _Tee:
    """A jobs stream that keeps the last line read (the raw line of the job just parsed)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.last = b""

    def readline(self, size: int = -1) -> bytes:
        self.last = self._stream.readline(size)
        return self.last

    def peek(self, size: int) -> bytes:
        return self._stream.peek(size)


def file_digest(path: Path) -> str:
    """The SHA-256 of a file: what tells a queue's jobs file from another."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the jobs file: {exc.strerror}") from exc
    return digest.hexdigest()
