"""A library that says nothing unless asked: rrcli's events go to the standard ``logging``
logger ``rrcli`` when structlog was never configured.

structlog's defaults print every event on standard output, so a program calling ``rrcli.run``
or ``rrcli.Pool`` would find ``rrcli.run_started`` lines in its own output. Routed to ``logging``
instead (a NullHandler on ``rrcli``, as libraries do), the events show only where the caller
configured logging (``logging.basicConfig(level="INFO")``), at the levels it chose. A caller
that configures structlog itself, as the CLI does, keeps its own set-up.
"""

from __future__ import annotations

import logging

from rrcli import logs

__all__ = ["debug_logged", "quiet_unless_configured"]


def quiet_unless_configured() -> None:
    """Route rrcli's events to ``logging.getLogger("rrcli")`` unless structlog is configured
    (or the CLI set a level: it configures structlog at the first event shown)."""
    if logs.level_set():
        return
    import structlog

    if structlog.is_configured():
        return
    root = logging.getLogger("rrcli")
    if not any(isinstance(h, logging.NullHandler) for h in root.handlers):
        root.addHandler(logging.NullHandler())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.KeyValueRenderer(key_order=["event"]),
        ],
        wrapper_class=structlog.stdlib.BoundLogger,
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )


def debug_logged() -> bool:
    """Whether a debug event per attempt would be shown (structlog's filtering loggers, or the
    stdlib's a library run logs to): checked once per run, so at info level attempts pay nothing."""
    shown = logs.shown("debug")
    if shown is not None:
        return shown
    import structlog

    bound = structlog.get_logger("rrcli").bind()
    enabled = getattr(bound, "is_enabled_for", None) or getattr(bound, "isEnabledFor", None)
    return structlog.is_configured() and (enabled is None or bool(enabled(logging.DEBUG)))
