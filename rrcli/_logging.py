"""structlog set-up for the CLI: console or JSON lines on stderr, at the level the flags ask.

Only the CLI imports this module; the core logs through ``structlog.get_logger("rrcli")`` and
works with structlog's defaults when used as a library. The HTTP client's per-request INFO lines
are silenced: rrcli's own trace file records every call already.

Each line goes to whatever ``sys.stderr`` is when it is logged: while the live display of
``rrcli run`` is on the terminal, that is rich's proxy, which prints the line above the display,
so warnings show in every mode but ``--quiet`` without tearing the display.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from rrcli import logs

if TYPE_CHECKING:
    from rrcli.engine.summary import RunSummary
    from rrcli.routing.status import EngineStatus

__all__ = ["ProgressLines", "configure_logging", "log_level"]

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def log_level(*, verbose: bool, quiet: bool, tty: bool) -> str:
    """The lowest level shown: ``-q`` errors only (it wins over ``-v``); ``-v`` every event down
    to one per attempt; else warnings and up on a terminal, where the live display shows the
    progress, and info and up (the run's start and end too) in plain log lines."""
    if quiet:
        return "error"
    if verbose:
        return "debug"
    return "warning" if tty else "info"


def configure_logging(*, level: str = "info", fmt: str = "console") -> None:
    """Send rrcli's events to stderr as ``fmt`` ("console" or "json") at ``level`` and above.
    structlog is set up at the first event shown (``rrcli.logs``); colours are decided now, while
    stderr is still the terminal's, not the live display's proxy."""
    for name in ("httpx", "httpx2", "httpcore", "httpcore2", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    colors = fmt != "json" and sys.stderr.isatty() and "NO_COLOR" not in os.environ
    logs.set_level(level, lambda: _configure_structlog(level, fmt, colors=colors))


def _configure_structlog(level: str, fmt: str, *, colors: bool) -> None:
    import structlog

    if fmt == "json":
        renderer: structlog.typing.Processor = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=colors)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS[level]),
        logger_factory=_StderrLogger,
        cache_logger_on_first_use=True,
    )


class _StderrLogger:
    """Prints each rendered event to the current ``sys.stderr`` (looked up per line, so the live
    display's proxy receives the lines while it runs)."""

    def __init__(self, *args: object) -> None:
        pass

    def msg(self, message: str) -> None:
        """One write of the line and its newline, so lines from the progress thread and the
        run never run into each other."""
        stream = sys.stderr
        stream.write(message + "\n")
        stream.flush()

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


class ProgressLines:
    """``rrcli run`` off a terminal: an ``rrcli.progress`` line every ``every`` seconds on
    stderr (jobs done and total, rate, ETA, outcomes, retries, calls in flight), something to
    poll in a log as a batch API's status is polled. A thread reads the run's counters; the
    engine never calls into it. ``every`` 0 shows none."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)

    def start(self, summary: RunSummary, status: Callable[[], EngineStatus]) -> None:
        """Log a run's progress: its ``summary`` and its engine's ``status()``."""
        if self.every > 0:
            self._thread = threading.Thread(
                target=self._run, args=(summary, status), name="rrcli.progress", daemon=True
            )
            self._thread.start()

    def _run(self, summary: RunSummary, status: Callable[[], EngineStatus]) -> None:
        log = logs.get_logger("rrcli")
        while not self._stop.wait(self.every):
            progress, now = summary.progress(), status()
            log.info(
                "rrcli.progress",
                done=progress.done,
                total=progress.total,
                **({"estimated": True} if progress.estimated else {}),
                rate_per_s=round(progress.rate, 1),
                eta_s=None if progress.eta_s is None else round(progress.eta_s),
                ok=summary.ok,
                error=summary.error,
                invalid=summary.invalid,
                retries=now.retried,
                in_flight=now.in_flight,
            )
