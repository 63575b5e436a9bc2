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

import structlog

__all__ = ["configure_logging", "log_level"]

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
    """Send rrcli's events to stderr as ``fmt`` ("console" or "json") at ``level`` and above."""
    for name in ("httpx", "httpx2", "httpcore", "httpcore2", "uvicorn.access"):
        logging.getLogger(name).setLevel(logging.WARNING)
    if fmt == "json":
        renderer: structlog.typing.Processor = structlog.processors.JSONRenderer()
    else:
        colors = sys.stderr.isatty() and "NO_COLOR" not in os.environ
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
        print(message, file=sys.stderr, flush=True)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg
