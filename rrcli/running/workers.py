"""The run's workers, started as jobs come, and the one feed of jobs they all pull from.

A worker is started only when a job is handed out while there is room for one more, so there are
never more workers than ``concurrency``, nor more than the jobs in flight plus the one pulling the
next: a cap of thousands costs nothing until thousands of jobs are in flight.

Jobs from a regular file (or ``--prompt``) are pulled by the workers themselves, in the event loop:
a read from disk never waits long. Jobs from a pipe, a terminal or a device are read by a thread
into a bounded buffer, because such a read can wait for its writer forever: the event loop never
blocks on it, so calls in flight go on and Ctrl-C and SIGTERM are obeyed (``rrcli run /dev/zero``
reads a line that never ends). A worker that finds the buffer empty ends; the next job to arrive
starts one. The thread stops reading when the run ends. Jobs of a shared queue come into the same
buffer from a task of the event loop (``fill``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, NoReturn, Protocol

import orjson

from rrcli.engine.summary import RunSummary
from rrcli.errors import UsageError
from rrcli.records.jobs import InvalidJob, Job, open_jobs_file, shard_of
from rrcli.routing.control import RunControl
from rrcli.running.options import RunOptions

__all__ = [
    "BUFFERED_JOBS",
    "Fetch",
    "JobDicts",
    "JobFeed",
    "SharedQueue",
    "StoppableReader",
    "count_lines",
    "open_jobs",
    "planned_total",
    "select_jobs",
]

BUFFERED_JOBS = 1024  # jobs read ahead from a pipe at the most
_POLL = 0.25  # seconds between looks at the run's stop switch while no worker runs

Worker = Callable[[Iterator[Job | InvalidJob]], Coroutine[Any, Any, None]]
Fetch = Callable[[], Awaitable[list[Job | InvalidJob] | None]]


class SharedQueue(Protocol):
    """Jobs from a queue several processes share (fleet/queue.py) instead of a file.

    ``open`` connects (and loads the jobs file when there is one), returning the jobs in the
    queue; ``sink`` wraps the results file's writer (each line is the queue's to store and
    acknowledge too); ``attach`` hands it the engine; ``fetch`` returns the next jobs, None
    once the queue is drained; ``label`` names the queue and this worker in the trace;
    ``finished``: once open, every job of the queue had its result already."""

    label: dict[str, str]
    finished: bool

    async def open(self) -> int: ...
    def sink(self, writer: Any) -> Any: ...
    def attach(self, engine: Any) -> None: ...
    async def fetch(self) -> list[Job | InvalidJob] | None: ...
    async def close(self) -> None: ...


class JobDicts:
    """Jobs given as dicts, read as the lines of a jobs file (``readline``), one at a time as
    the run goes: the file's rules hold for them (ids, duplicates, invalid jobs), and the
    caller's dicts are never changed."""

    __slots__ = ("_dicts", "_n")

    def __init__(self, dicts: Iterable[Mapping[str, Any]]) -> None:
        self._dicts = iter(dicts)
        self._n = 0

    def readline(self, size: int = -1) -> bytes:
        job = next(self._dicts, None)
        if job is None:
            return b""
        self._n += 1
        try:
            return orjson.dumps(job) + b"\n"
        except TypeError as exc:
            raise UsageError(
                f"job {self._n}: {exc} — a job dict holds JSON values only (str, numbers, "
                "lists, dicts, bool, None)"
            ) from None


class StoppableReader:
    """A stream opened for the run whose ``readline`` returns end of file once ``stop()`` was
    called, so a reader thread skipping an endless line ends with the run."""

    __slots__ = ("_stream", "stopped")

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.stopped = False

    def readline(self, size: int = -1) -> bytes:
        return b"" if self.stopped else self._stream.readline(size)

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        self._stream.close()


def count_lines(path: Path | None) -> int | None:
    """Lines in the jobs file (an upper bound of jobs, for the progress display's ETA); None
    unless it is a regular file: a pipe read here would have no jobs left to run."""
    if path is None or not path.is_file():
        return None
    count = 0
    with open_jobs_file(path) as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
    return count


def planned_total(
    lines: int | None, shard: tuple[int, int] | None, limit: int | None
) -> tuple[int | None, bool]:
    """The jobs a run of a file of ``lines`` lines will end or skip, and whether that is an
    estimate: a shard's share is 1/N of the lines until the file's end is reached."""
    if lines is None:
        return (limit, True) if limit is not None else (None, False)
    total = lines if shard is None else -(-lines // shard[1])
    if limit is not None:
        total = min(total, limit)
    return total, shard is not None


def select_jobs(
    jobs: Iterator[Job | InvalidJob],
    *,
    done: Any,
    summary: RunSummary,
    shard: tuple[int, int] | None,
    limit: int | None,
) -> Iterator[Job | InvalidJob]:
    """--shard, --limit and --resume applied to the stream of jobs, lazily, in that order: the
    first N jobs of the shard (skipped or not, so a resumed run selects the same jobs). At the
    end of the selection the summary's total is the exact count."""
    taken = 0
    for job in jobs:
        if shard is not None and shard_of(job.key, shard[1]) != shard[0]:
            continue
        if limit is not None and taken >= limit:
            break
        taken += 1
        if done is not None and job.key in done:
            summary.skipped += 1
            continue
        yield job
    summary.total, summary.total_estimated = taken, False


def open_jobs(options: RunOptions, stack: ExitStack) -> tuple[str, BinaryIO | StoppableReader]:
    """The jobs' name and stream. A stream that may wait for its writer (a pipe, a terminal, a
    device) comes as a StoppableReader, to be read by a thread (JobFeed.read); ``stack`` closes a
    regular file, the reader thread anything else it opened."""
    if options.prompts:
        import io

        lines = b"".join(
            orjson.dumps({"id": f"prompt-{i + 1}", "prompt": p}) + b"\n"
            for i, p in enumerate(options.prompts)
        )
        return "--prompt", io.BytesIO(lines)
    if options.job_dicts is not None:
        return "<jobs>", JobDicts(options.job_dicts)  # type: ignore[return-value]
    path = options.job_path
    if path is None:
        stream = sys.stdin.buffer
    else:
        stream = open_jobs_file(path)  # closed by stack or the reader
    source = "<stdin>" if path is None else str(path)
    if stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
        if path is not None:
            stack.enter_context(stream)
        return source, stream
    if path is None:
        # The reader thread may still wait in a read of it when the process exits, holding its
        # buffer's lock: a buffer of its own (standard input stays open), as the interpreter
        # closes sys.stdin's at exit and aborts (Fatal Python error) on finding that lock held.
        stream = os.fdopen(os.dup(stream.fileno()), "rb")
    return source, StoppableReader(stream)


class JobFeed:
    """The iterator every worker pulls from; see the module docstring.

    Once ``control`` is stopping, no job is handed out and the run ends when the workers in
    flight have."""

    def __init__(self, worker: Worker, concurrency: int, control: RunControl) -> None:
        self._worker = worker
        self._concurrency = max(1, concurrency)
        self._control = control
        self._jobs: Iterator[Job | InvalidJob] | None = None  # pulled in the loop
        self._buffer: deque[Job | InvalidJob] = deque()  # filled by the reader thread
        self._space = threading.Condition()
        self._pulling: set[asyncio.Task[None]] = set()  # workers that will pull again
        self._tasks: set[asyncio.Task[None]] = set()
        self._ended = False  # no job will come any more
        self._failed: BaseException | None = None
        self._reader: StoppableReader | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._settled: asyncio.Event  # the workers are all gone, one failed, or the jobs ended

    # -- the workers' side -------------------------------------------------------------------

    def __iter__(self) -> JobFeed:
        return self

    def __next__(self) -> Job | InvalidJob:
        if self._control.stopping:
            return self._leave()
        if self._jobs is not None:
            job = next(self._jobs, None)
            if job is None:
                self._ended = True
                return self._leave()
        elif self._buffer:
            job = self._buffer.popleft()
            if len(self._buffer) == BUFFERED_JOBS - 1:
                with self._space:
                    self._space.notify()
        else:
            return self._leave()
        if len(self._pulling) < self._concurrency and (self._jobs is not None or self._buffer):
            self._spawn()
        return job

    def _leave(self) -> NoReturn:
        self._pulling.discard(asyncio.current_task())  # type: ignore[arg-type]
        raise StopIteration

    def _spawn(self) -> None:
        task = asyncio.get_running_loop().create_task(self._worker(self))
        self._pulling.add(task)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._pulling.discard(task)
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None and self._failed is None:
            self._failed = task.exception()
        if not self._tasks or self._failed is not None:
            self._settled.set()

    # -- running -----------------------------------------------------------------------------

    async def pull(self, jobs: Iterator[Job | InvalidJob]) -> None:
        """Run workers over ``jobs``, pulled in the event loop, until every job is done."""
        self._jobs = jobs
        await self._run()

    async def read(self, jobs: Iterator[Job | InvalidJob], reader: StoppableReader) -> None:
        """Run workers over ``jobs``, read from ``reader`` by a thread, until every job is done
        or the run stops."""
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        thread = threading.Thread(target=self._read, args=(jobs,), daemon=True, name="rrcli-jobs")
        thread.start()
        try:
            await self._run()
        finally:
            reader.stop()
            with self._space:
                self._space.notify()

    async def fill(self, fetch: Fetch) -> None:
        """Run workers over jobs fetched in the event loop by ``fetch`` (a shared queue), until
        every job is done or the run stops. ``fetch`` returns the next jobs when it has some
        (it alone bounds how many are held at once), None once no job will come."""
        fetcher = asyncio.ensure_future(self._fetch(fetch))
        try:
            await self._run()
        finally:
            fetcher.cancel()
            await asyncio.gather(fetcher, return_exceptions=True)

    async def _fetch(self, fetch: Fetch) -> None:
        try:
            while not self._control.stopping:
                jobs = await fetch()
                if jobs is None:
                    break
                self._buffer.extend(jobs)
                self._arrived()
        except Exception as exc:  # handed to the run: it fails as a worker would
            self._failed = exc
        finally:
            self._end()

    async def _run(self) -> None:
        self._settled = asyncio.Event()
        if self._jobs is not None:
            self._spawn()
        try:
            while self._tasks or not (self._ended or self._control.stopping):
                if self._failed is not None:
                    raise self._failed
                self._settled.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._settled.wait(), _POLL)
                self._arrived()
            if self._failed is not None:
                raise self._failed
        except asyncio.CancelledError:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            raise

    # -- the reader thread's side ------------------------------------------------------------

    def _read(self, jobs: Iterator[Job | InvalidJob]) -> None:
        assert self._loop is not None and self._reader is not None
        try:
            for job in jobs:
                with self._space:
                    while len(self._buffer) >= BUFFERED_JOBS and not self._reader.stopped:
                        self._space.wait()
                if self._reader.stopped:
                    return
                self._buffer.append(job)
                if len(self._buffer) == 1:
                    self._call_soon(self._arrived)
        except BaseException as exc:  # handed to the loop: the run fails as a worker would
            self._failed = exc
        finally:
            self._reader.close()
            self._call_soon(self._end)

    def _call_soon(self, callback: Callable[[], None]) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the run is over and its loop closed
            pass

    def _arrived(self) -> None:
        """Jobs are waiting: start a worker if none will pull them."""
        if self._buffer and not self._control.stopping and len(self._pulling) < self._concurrency:
            self._spawn()

    def _end(self) -> None:
        self._arrived()
        self._ended = True
        self._settled.set()
