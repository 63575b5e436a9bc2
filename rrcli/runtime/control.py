"""What the outside sees of a run and does to it: its counters (``RunSummary``, the run_end
record's job counts and the exit code) and its switch (``RunControl``: drain or cancel).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rrcli.records.traceschema import JOB_COUNTS

__all__ = ["RunControl", "RunSummary"]


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
        return 1 if (self.error or self.invalid) else 0


class RunControl:
    """Stops a run from outside: ``stop()`` drains, ``cancel()`` cancels calls in flight.
    ``stopping`` and ``cancelled`` say which was asked (the live display reads them)."""

    def __init__(self) -> None:
        self.stopping = False
        self.cancelled = False
        self._cancel: Callable[[], None] | None = None

    def stop(self) -> None:
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
