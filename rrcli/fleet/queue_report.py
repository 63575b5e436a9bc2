"""What a shared queue holds, read by one short-lived command: ``rrcli queue NAME``
(progress and the workers alive) and ``rrcli results --queue NAME`` (one results file).

The results are the queue's ``results`` hash (line number -> result line), read as a
``collect.LineSource`` whose locator is the job's line in the jobs file, so ``collect_results``
writes them in the file's order, the final line of each job once. Once every job is collected,
the queue's keys expire after COLLECTED_KEEP_S: Redis holds a finished batch only so long.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from rrcli.config.profile import Profile
from rrcli.errors import UsageError
from rrcli.fleet._hub import CONNECT_TIMEOUT, check_reachable, redacted_url
from rrcli.fleet._queue_scripts import GROUP, queue_keys, worker_key
from rrcli.fleet.names import check_queue_name
from rrcli.records.collect import CollectReport, collect_results

__all__ = ["COLLECTED_KEEP_S", "Progress", "QueueCollected", "collect_queue", "queue_progress"]

COLLECTED_KEEP_S = 3600  # a fully collected queue's keys expire after this
READ_AHEAD = 1000  # result lines fetched in one round trip
READS_ONLY = frozenset({"env_unset"})  # only Redis is read: a backend's key need not be set


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """Where queue ``name`` stands: ``jobs`` in it (those loaded so far while ``state`` is
    ``loading``), ``done`` (a result stored), ``pending`` (delivered, not yet done: by worker
    in ``by_worker``), ``not_started``; ``workers`` each worker ever seen, alive or not."""

    name: str
    state: str
    source: str
    jobs: int
    done: int
    pending: int
    by_worker: dict[str, int]
    workers: tuple[dict[str, Any], ...]

    @property
    def not_started(self) -> int:
        return max(0, self.jobs - self.done - self.pending)

    @property
    def complete(self) -> bool:
        return self.state == "loaded" and self.done >= self.jobs and not self.pending

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.name,
            "state": self.state,
            "source": self.source,
            "jobs": self.jobs,
            "done": self.done,
            "pending": self.pending,
            "not_started": self.not_started,
            "workers_alive": sum(1 for w in self.workers if w["alive"]),
            "workers": list(self.workers),
        }

    def json(self) -> str:
        return orjson.dumps(self.as_dict(), option=orjson.OPT_INDENT_2).decode()

    def lines(self) -> list[str]:
        """The progress for a terminal: one line for the queue, one a worker."""
        alive = sum(1 for w in self.workers if w["alive"])
        head = (
            f"queue {self.name} ({self.state}, {self.source}): {self.jobs:,} jobs, "
            f"{self.done:,} done, {self.pending:,} pending, {self.not_started:,} not started; "
            f"{alive} worker(s) alive"
        )
        rows = [
            f"  {w['name']}: {'alive' if w['alive'] else 'gone'}, {w['pending']:,} pending, "
            f"{w['done']:,} done"
            for w in self.workers
        ]
        return [head, *rows]


def _load(profile_path: str | None) -> Profile:
    """The profile at ``profile_path`` (or where ``rrcli run`` would look without it)."""
    from rrcli.config.load import load_profile, resolve_profile_path

    path = resolve_profile_path(profile_path, os.environ)
    return load_profile(path, environ=os.environ, ignore=READS_ONLY)


def _client(profile: Profile, name: str) -> Any:
    check_queue_name(name)
    url = profile.queue_url
    if not url:
        raise UsageError(
            f"--queue {name}: the profile names no Redis — set [queue] url, or use "
            '[gate] kind = "redis" (its url is the default)'
        )
    check_reachable(url, "queue")
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=30)


def queue_progress(profile_path: str | None, name: str) -> Progress:
    """Read where queue ``name`` of the profile at ``profile_path`` stands; UsageError when
    Redis holds no such queue."""
    profile = _load(profile_path)
    client = _client(profile, name)
    try:
        return _progress(client, name, profile.queue_url)
    finally:
        client.close()


def _progress(client: Any, name: str, url: str) -> Progress:
    keys = queue_keys(name)
    meta = {k.decode(): v.decode() for k, v in client.hgetall(keys["meta"]).items()}
    if not meta:
        raise UsageError(
            f"{name!r} is not a queue at {redacted_url(url)} — load one with: "
            f"rrcli run JOBS -p PROFILE --queue {name}"
        )
    summary = client.xpending(keys["jobs"], GROUP)
    by_worker = {c["name"].decode(): int(c["pending"]) for c in summary.get("consumers") or ()}
    names = sorted(m.decode() for m in client.smembers(keys["workers"]))
    beats = client.mget([worker_key(name, w) for w in names]) if names else []
    done_by = client.hmget(keys["done"], names) if names else []
    workers = [
        {
            "name": worker,
            "alive": beat is not None,
            "pending": by_worker.get(worker, 0),
            "done": int(done or 0),
        }
        for worker, beat, done in zip(names, beats, done_by, strict=True)
    ]
    state = meta.get("state", "loading")
    jobs = int(meta.get("total") or meta.get("loaded_to") or 0)
    done = int(client.hlen(keys["results"]))
    return Progress(
        name=name,
        state=state,
        source=meta.get("source", ""),
        jobs=jobs,
        done=done,
        pending=int(summary["pending"]),
        by_worker=by_worker,
        workers=tuple(workers),
    )


class QueueResults:
    """The queue's stored results as a LineSource: the locator is the job's line number."""

    def __init__(self, client: Any, name: str) -> None:
        self.name = f"queue {name}"
        self._client = client
        self._key = queue_keys(name)["results"]
        self._seen: list[int] = []
        self._order: list[int] | None = None
        self._ahead: dict[int, bytes] = {}

    def lines(self) -> Iterator[tuple[int, bytes]]:
        for field, line in self._client.hscan_iter(self._key, count=READ_AHEAD):
            number = int(field)
            self._seen.append(number)
            yield number, line

    def read(self, locator: int) -> bytes:
        """One line back; lines are read ahead in order, READ_AHEAD a round trip."""
        line = self._ahead.pop(locator, None)
        if line is not None:
            return line
        if self._order is None:
            self._order = sorted(self._seen)
        at = bisect_left(self._order, locator)
        wanted = self._order[at : at + READ_AHEAD]
        self._ahead = dict(zip(wanted, self._client.hmget(self._key, wanted), strict=True))
        return self._ahead.pop(locator) or b""


@dataclass(frozen=True, slots=True)
class QueueCollected:
    """What ``collect_queue`` wrote (``report``) and where the queue stands (``progress``)."""

    report: CollectReport
    progress: Progress

    @property
    def exit_code(self) -> int:
        """0 once every job of the queue has its line, else 1 (run workers to finish it)."""
        return 0 if self.progress.complete else 1

    def lines(self, out: Path | None, jobs: Path | None = None) -> list[str]:
        """The report for standard error: what was written where, then the queue's counts."""
        return [*self.report.lines(out, None), self.progress.lines()[0]]


def collect_queue(
    profile_path: str | None, name: str, out: Path | None, status: str | None
) -> QueueCollected:
    """Write each job's result stored in queue ``name`` (of the profile at ``profile_path``) to
    ``out`` (None: standard output), in the jobs file's order; once every job is done, the
    queue's keys expire after COLLECTED_KEEP_S."""
    profile = _load(profile_path)
    client = _client(profile, name)
    try:
        progress = _progress(client, name, profile.queue_url)
        report = collect_results([QueueResults(client, name)], out, status=status, by_locator=True)
        if progress.complete:
            keys = [*queue_keys(name).values()]
            keys += [worker_key(name, w["name"]) for w in progress.workers]
            with client.pipeline(transaction=False) as pipe:
                for key in keys:
                    pipe.expire(key, COLLECTED_KEEP_S)
                pipe.execute()
        return QueueCollected(report, progress)
    finally:
        client.close()
