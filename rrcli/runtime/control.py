"""What the outside sees of a run and does to it: its counters (``RunSummary``, the run_end
record's job counts and the exit code) and its switch (``RunControl``: drain or cancel, or
``halt``: the run itself stops dispatching for a reason, such as no healthy backend left or the
budget reached, with its own exit code).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rrcli.records.traceschema import JOB_COUNTS

__all__ = ["Halt", "Halted", "RunControl", "RunSummary"]


@dataclass(frozen=True, slots=True)
class Halt:
    """Why a run stopped dispatching by itself: ``code`` is the exit code, ``reason`` a short
    word for records (``no_backend``, ``budget``), ``message`` the sentence the user reads
    (what happened and what to do: fix and ``--resume``)."""

    code: int
    reason: str
    message: str


class Halted(Exception):
    """Raised where a halted run refuses to start an attempt (the budget would pass): the job
    ends without a result line, so ``--resume`` runs it."""


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
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        return self.ok + self.error + self.invalid

    @property
    def jobs(self) -> dict[str, int]:
        """The run_end record's job counts, in its order."""
        return {name: getattr(self, name) for name in JOB_COUNTS}

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.halted is not None:
            return self.halted.code
        return 1 if (self.error or self.invalid) else 0


class RunControl:
    """Stops a run: ``stop()`` drains, ``cancel()`` cancels calls in flight, ``halt()`` drains
    for a reason of the run's own (the first halt wins). ``stopping``, ``cancelled`` and
    ``halted`` say which was asked (the live display reads them)."""

    def __init__(self) -> None:
        self.stopping = False
        self.cancelled = False
        self.halted: Halt | None = None
        self._cancel: Callable[[], None] | None = None

    def stop(self) -> None:
        self.stopping = True

    def halt(self, halt: Halt) -> None:
        """Stop dispatching: calls in flight finish, jobs not started get no result line."""
        if self.halted is None and not self.stopping:
            self.halted = halt
        self.stopping = True

    def cancel(self) -> None:
        self.stopping = self.cancelled = True
        if self._cancel is not None:
            self._cancel()

    def interrupt(self) -> None:
        """What Ctrl-C does: the first time drain, the second time cancel."""
        if self.stopping:
            self.cancel()
        else:
            self.stop()
