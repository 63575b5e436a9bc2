"""rrcli's event loggers: structlog, loaded only for an event that is to be shown.

Every module logs through ``get_logger(name)``. In a library (nothing called ``set_level``) each
event goes to structlog as the caller configured it. The CLI calls ``set_level`` with the level
its flags ask and the function that sets structlog up: an event below that level returns at
once, and structlog (with rich, which its console renderer loads) is imported and set up at the
first event at or above it, so a run that shows no event never loads either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["LEVELS", "Logger", "get_logger", "level_set", "set_level", "shown"]

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}

_threshold: int | None = None  # None: no level set, structlog's configuration decides
_setup: Callable[[], None] | None = None
_lock = threading.Lock()


def set_level(level: str, setup: Callable[[], None]) -> None:
    """Show events at ``level`` and above; ``setup`` configures structlog before the first."""
    global _threshold, _setup
    with _lock:
        _threshold, _setup = LEVELS[level], setup


def level_set() -> bool:
    """Whether ``set_level`` was called (the CLI owns structlog's set-up)."""
    return _threshold is not None


def shown(level: str) -> bool | None:
    """Whether an event at ``level`` is shown; None when no level was set (a library run,
    where structlog's configuration decides)."""
    return None if _threshold is None else _threshold <= LEVELS[level]


def _structlog_logger(name: str | None) -> Any:
    """The structlog logger for ``name``, after the pending set-up ran (once)."""
    global _setup
    with _lock:
        setup, _setup = _setup, None
        if setup is not None:
            setup()
    import structlog

    return structlog.get_logger(name) if name is not None else structlog.get_logger()


class Logger:
    """``log.info(event, **fields)`` and the other levels, as structlog's loggers take them."""

    __slots__ = ("_bound", "_name")

    def __init__(self, name: str | None) -> None:
        self._name = name
        self._bound: Any = None

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        if _threshold is not None and _threshold > LEVELS[level]:
            return
        if self._bound is None or _setup is not None:
            self._bound = _structlog_logger(self._name)
        getattr(self._bound, level)(event, **fields)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)


def get_logger(name: str | None = None) -> Logger:
    """The logger of ``name`` (structlog's default logger when None)."""
    return Logger(name)
