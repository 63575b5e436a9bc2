"""Whether calls may still start: the run's switch (``RunControl``: drain or cancel, or
``halt``: the run itself stops dispatching for a reason, such as no healthy backend left or the
budget reached, with its own exit code). Routing reads it before every admission; the run and
the live display read and set it. The run's counters are ``run.summary.RunSummary``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Halt", "RunControl"]


@dataclass(frozen=True, slots=True)
class Halt:
    """Why a run stopped dispatching by itself: ``code`` is the exit code, ``reason`` a short
    word for records (``no_backend``, ``budget``), ``message`` the sentence the user of a run
    reads (what happened and what to do: fix and ``--resume``); ``plain``: what happened in
    words any front-end may say (a gateway's or a program's, which have no ``--resume``), else
    the message itself."""

    code: int
    reason: str
    message: str
    plain: str = ""

    def said(self) -> str:
        """What happened, for a front-end other than a run."""
        return self.plain or self.message


class RunControl:
    """Stops a run: ``stop()`` drains, ``cancel()`` cancels calls in flight, ``halt()`` drains
    for a reason of the run's own (the first halt wins). ``stopping``, ``cancelled`` and
    ``halted`` say which was asked (the live display reads them)."""

    def __init__(self) -> None:
        self.stopping = False
        self.cancelled = False
        self.halted: Halt | None = None
        self._cancel: Callable[[], None] | None = None

    def on_cancel(self, callback: Callable[[], None] | None) -> None:
        """What ``cancel()`` calls besides setting its flags (the run's workers cancelled);
        None: nothing."""
        self._cancel = callback

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
