"""Loading a jobs file into a shared queue, and a stream entry back into its job.

``rrcli run JOBS --queue NAME`` adds each line of JOBS to the queue's stream once, under a loader
lock; a second process with the same file (same SHA-256) waits for the load and loads nothing; a
loader that dies mid-load leaves the lock to expire and the next one goes on from the last line
stored. Another file under a used NAME is refused (exit 2). The queue's ``lease`` and
``max_deliveries`` are fixed by the first loader: every worker claims and gives up by the same
times, whatever its own profile says.

A Redis at its ``maxmemory`` (policy ``noeviction``) refuses the load: exit 2 saying so, the
queue left loading; each batch is one script, so the run that follows goes on from the last
batch stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from rrcli.config.profile import QueueSettings
from rrcli.errors import QueueFullError, UsageError
from rrcli.fleet.queue_store import QueueStore
from rrcli.logs import get_logger
from rrcli.records.jobs import InvalidJob, Job, iter_jobs, open_jobs_file, parse_job
from rrcli.records.traceschema import rfc3339

__all__ = ["file_digest", "load_jobs", "stored_job"]

log = get_logger("rrcli.fleet.queue")

LOCK_MS = 10_000  # the loader lock's lease: a dead loader's lock frees this soon
LOAD_BATCH = 1000  # lines added in one transaction


async def load_jobs(store: QueueStore, path: Path, settings: QueueSettings) -> int:
    """Load ``path`` into the queue of ``store`` unless it is loaded (or being loaded: then
    wait); the jobs it holds. UsageError when the queue holds another file, or Redis has no
    memory left for the jobs."""
    token = secrets.token_hex(8)
    try:
        return await _load(store, path, settings, token)
    except QueueFullError as exc:
        await store.unlock(token)  # the next run goes on at once
        loaded = (await store.meta()).get("loaded_to") or "0"
        raise UsageError(
            f"{exc.what} — queue {store.name!r} holds {int(loaded):,} lines of {path} so far; "
            "give Redis more memory (maxmemory in its config, or CONFIG SET maxmemory) or free "
            "some (collect finished queues: rrcli results --queue NAME), then run the same "
            "command again: the load goes on where it stopped"
        ) from exc


async def _load(store: QueueStore, path: Path, settings: QueueSettings, token: str) -> int:
    digest = file_digest(path)
    while True:
        meta = await store.meta()
        _same_file(store, meta.get("digest"), digest, path)
        if meta.get("state") == "loaded":
            return int(meta["total"])
        if await store.lock(token, LOCK_MS):
            break
        await asyncio.sleep(0.2)  # another process is loading this file
    fixed = {"lease": settings.lease, "max_deliveries": settings.max_deliveries}
    held = await store.begin_load(digest, str(path), rfc3339(time.time()), fixed)
    _same_file(store, held, digest, path)
    start = int((await store.meta()).get("loaded_to") or 0)
    total = await _add_lines(store, path, start, token, digest)
    await store.end_load(total, token)
    log.info("rrcli.queue_loaded", queue=store.name, jobs=total, source=str(path))
    return total


def _same_file(store: QueueStore, held: str | None, digest: str, path: Path) -> None:
    if held is not None and held != digest:
        name = store.name
        raise UsageError(
            f"queue {name!r} holds another jobs file than {path} — join it without JOBS "
            f"(rrcli run -p PROFILE --queue {name}), or load {path} under a new name"
        )


async def _add_lines(store: QueueStore, path: Path, start: int, token: str, digest: str) -> int:
    """Add every line after line ``start`` to the stream; the jobs in the file."""
    total = 0
    batch: list[tuple[int, dict[str, bytes]]] = []
    for line, fields in _stored_lines(path):
        total += 1
        if line <= start:
            continue
        batch.append((line, fields))
        if len(batch) >= LOAD_BATCH:
            await _add(store, batch, token, digest)
            batch = []
    if batch:
        await _add(store, batch, token, digest)
    return total


async def _add(
    store: QueueStore, batch: list[tuple[int, dict[str, bytes]]], token: str, digest: str
) -> None:
    if not await store.lock(token, LOCK_MS):
        raise UsageError(f"queue {store.name!r}: another process took over the load")
    if (await store.meta()).get("digest") != digest:  # Redis restarted empty
        raise store.lost()
    await store.add(batch, batch[-1][0])


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
