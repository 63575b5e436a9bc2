"""structlog set-up for the CLI: console or JSON lines on stderr.

Only the CLI imports this module; the core logs through ``structlog.get_logger("rrcli")`` and
works with structlog's defaults when used as a library. The HTTP client's per-request INFO lines
are silenced: rrcli's own trace file records every call already.
"""

from __future__ import annotations

import logging
import os
import sys

import structlog

__all__ = ["configure_logging"]


def configure_logging(*, level: str = "info", fmt: str = "console") -> None:
    """Send rrcli's events to stderr as ``fmt`` ("console" or "json") at ``level`` and above."""
    numeric = {"debug": logging.DEBUG, "info": logging.INFO, "error": logging.ERROR}[level]
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
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
