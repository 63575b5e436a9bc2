"""What the outside sees of a run: its counters (``RunSummary``: the run_end record's job
counts, the halt that stopped it, and its exit code), and where it stands (``Progress``: what
the live display and the progress lines off a terminal both show)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from rrcli.records.traceschema import JOB_COUNTS
from rrcli.routing.control import Halt

__all__ = ["Progress", "RunSummary"]


@dataclass(frozen=True, slots=True)
class Progress:
    """Jobs done (ended or skipped) of ``total`` (None: not known; ``estimated``: a guess until
    the input ends, such as a shard of a file), at ``rate`` jobs a second; ``eta_s`` seconds
    left (None without a total or a rate). For a worker of a shared queue, the whole queue's."""

    done: int
    total: int | None
    estimated: bool
    rate: float
    eta_s: float | None

    def line(self) -> str:
        """``812/2,000  55.1/s  ETA 0m21s``: the total marked ``~`` while it is an estimate."""
        text = f"{self.done:,}"
        if self.total is not None:
            text += f"/{'~' if self.estimated else ''}{self.total:,}"
        text += f"  {self.rate:,.1f}/s"
        if self.eta_s is not None:
            seconds = int(self.eta_s)
            if seconds >= 3600:
                text += f"  ETA {seconds // 3600}h{seconds % 3600 // 60:02d}m"
            else:
                text += f"  ETA {seconds // 60}m{seconds % 60:02d}s"
        return text


@dataclass(slots=True)
class RunSummary:
    """Counts of a run; ``jobs`` has the keys of the run_end trace record."""

    run_id: str
    ok: int = 0
    error: int = 0
    invalid: int = 0
    skipped: int = 0
    interrupted: bool = False
    total: int | None = None  # jobs this run will end or skip, when the input could be counted
    total_estimated: bool = False  # ``total`` is a guess until the input's end (--shard)
    halted: Halt | None = None  # the run stopped itself (jobs not started have no result)
    cached: int = 0  # calls answered from the response cache (--cache), known at the end
    failures: Counter[str] = field(default_factory=Counter)  # failed jobs by error type
    queue: str | None = None  # the shared queue this run worked on (--queue)
    queue_finished: bool = False  # every job of the queue had its result before the run came
    started: float = field(default_factory=time.monotonic)
    # a worker of a shared queue: (monotonic time, jobs done in the queue), first and last seen
    queue_first: tuple[float, int] | None = None
    queue_last: tuple[float, int] | None = None

    @property
    def done(self) -> int:
        return self.ok + self.error + self.invalid

    @property
    def jobs(self) -> dict[str, int]:
        """The run_end record's job counts, in its order."""
        return {name: getattr(self, name) for name in JOB_COUNTS}

    @property
    def next_step(self) -> str | None:
        """What to run next, when the run did not do it all: the command that goes on after an
        interruption, or how to collect a queue that was finished already and start another."""
        queue = self.queue
        if self.interrupted:
            if queue is None:
                return "interrupted: run again with --resume to finish"
            return f"interrupted: start a worker to finish: rrcli run -p PROFILE --queue {queue}"
        if self.queue_finished:
            return (
                f"queue {queue!r} was finished already (every job has its result): collect it "
                f"with rrcli results --queue {queue} -p PROFILE --out FILE; to run its jobs "
                "again, load them under another name: rrcli run JOBS -p PROFILE --queue OTHER"
            )
        return None

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.halted is not None:
            return self.halted.code
        return 1 if (self.error or self.invalid) else 0

    def failures_line(self) -> str:
        """The live display's line: ``failed jobs: 170 http_500, 7 timeout (…)``."""
        kinds = ", ".join(f"{count:,} {kind}" for kind, count in self.failures.most_common())
        return f"failed jobs: {kinds} (each kind logged once; the results file has every one)"

    def queue_done(self, done: int, now: float | None = None) -> None:
        """A worker of a shared queue saw ``done`` jobs done in the queue, by every worker."""
        seen = (time.monotonic() if now is None else now, done)
        self.queue_first = self.queue_first or seen
        self.queue_last = seen

    def progress(self, now: float | None = None) -> Progress:
        """Where the run stands at ``now`` (monotonic seconds): this run's jobs, or the whole
        queue's, and its rate over the time it ran (the queue's between its first and last
        look, once they are apart)."""
        now = time.monotonic() if now is None else now
        done, rate = self.done + self.skipped, self.done / max(now - self.started, 1e-9)
        if self.queue_first is not None and self.queue_last is not None:
            (t0, d0), (t1, d1) = self.queue_first, self.queue_last
            done = max(d1, done)
            if t1 > t0 and d1 > d0:
                rate = (d1 - d0) / (t1 - t0)
        eta = None
        if self.total and rate > 0:
            eta = max(self.total - done, 0) / rate
        return Progress(done, self.total, self.total_estimated, rate, eta)
