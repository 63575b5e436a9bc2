"""The deadlines of one backend's attempts in flight, kept by one timer.

Each attempt is bounded as a whole (``timeout``): connecting, sending, and reading every byte of
the answer, however slowly the server sends it. ``asyncio.timeout`` would do it with a timer
handle per attempt, pushed on the loop's heap and left there cancelled: about 10 µs a call, paid
thousands of times a second by a busy pool. Here an attempt is an entry in a dict (its task, the
time it must end by), moved by assigning ``when``; one ``call_later`` timer, running only while
an attempt is in flight, wakes every ``tick`` seconds and cancels each task whose time passed.
The attempt turns that cancellation into its timeout (``leave``) and tells it apart from any
other (a second Ctrl-C), as ``asyncio.timeout`` does with ``Task.uncancel``.
"""

from __future__ import annotations

import asyncio

__all__ = ["Deadline", "Deadlines"]


class Deadline:
    """One attempt's: ``when`` (loop time) it must end by, and ``key``, the profile key whose limit
    that is (``timeout``, or a stream's ``stream_idle_timeout`` once its text began)."""

    __slots__ = ("cancelling", "expired", "key", "task", "when")

    def __init__(self, task: asyncio.Task[object], when: float) -> None:
        self.task = task
        self.when = when
        self.key = "timeout"
        self.expired = False  # the timer cancelled the task for it
        self.cancelling = task.cancelling()  # cancellations requested before the attempt began


class Deadlines:
    """The deadlines of the attempts in flight; ``tick``: the timer's period, so a deadline is
    kept to within ``tick`` seconds."""

    __slots__ = ("_due", "_loop", "_tick", "_timer")

    def __init__(self, tick: float) -> None:
        self._due: dict[asyncio.Task[object], Deadline] = {}
        self._tick = tick
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def enter(self, seconds: float) -> Deadline:
        """The current task's attempt must end within ``seconds``."""
        loop = asyncio.get_running_loop()
        task = asyncio.current_task(loop)
        assert task is not None
        deadline = self._due[task] = Deadline(task, loop.time() + seconds)
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_later(self._tick, self._check, loop)
        return deadline

    def leave(self, deadline: Deadline) -> bool:
        """The attempt ended (call it in ``finally``; again is a no-op). True when the timer
        cancelled it and no one else did: the cancellation is taken back and the caller raises
        its timeout instead."""
        if self._due.get(deadline.task) is not deadline:
            return False
        del self._due[deadline.task]
        return deadline.expired and deadline.task.uncancel() <= deadline.cancelling

    def _check(self, loop: asyncio.AbstractEventLoop) -> None:
        if loop is not self._loop:  # a timer of an earlier event loop
            return
        now = loop.time()
        for deadline in self._due.values():
            if deadline.when <= now and not deadline.expired:
                deadline.expired = True
                deadline.task.cancel()
        self._timer = loop.call_later(self._tick, self._check, loop) if self._due else None
