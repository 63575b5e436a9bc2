"""What the outside sees of a run: its counters (``RunSummary``: the run_end record's job
counts, the halt that stopped it, and its exit code)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rrcli.records.traceschema import JOB_COUNTS
from rrcli.routing.control import Halt

__all__ = ["RunSummary"]


@dataclass(slots=True)
class RunSummary:
    """Counts of a run; ``jobs`` has the keys of the run_end trace record."""

    run_id: str
    ok: int = 0
    error: int = 0
    invalid: int = 0
    skipped: int = 0
    interrupted: bool = False
    total: int | None = None  # jobs expected, when the input could be counted
    halted: Halt | None = None  # the run stopped itself (jobs not started have no result)
    cached: int = 0  # calls answered from the response cache (--cache), known at the end
    queue: str | None = None  # the shared queue this run worked on (--queue)
    queue_finished: bool = False  # every job of the queue had its result before the run came
    started: float = field(default_factory=time.monotonic)

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
