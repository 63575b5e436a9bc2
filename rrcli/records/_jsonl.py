"""Whole JSON lines out to a file or standard output: where results and traces touch the disk.

Lines are gathered in memory and handed to the OS in one ``os.write`` per flush, so a file only
ever receives whole lines (a kill can tear at most the last one, which ``--resume`` repairs), and
the hot path is one copy into a bytearray (measured: keeping each line's ``bytes`` alive in a list
until the flush costs ~4 µs a line in allocator traffic; copying costs ~0.2 µs). Only the
writers in ``results`` and ``trace`` use this; ``dumps_line`` encodes their records.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from rrcli.errors import RRCLIError, UsageError

__all__ = ["LineFile", "dumps_line", "open_error"]

_FLUSH_AT = 1 << 16  # bytes gathered before they are handed to the OS


def dumps_line(record: Any) -> bytes:
    """``record`` as one JSON line (newline included), by orjson.

    orjson refuses integers beyond 64 bits, which a job's metadata may carry (``jobs`` keeps
    them exact): a record holding one is encoded by the stdlib instead, compact like orjson's.
    The fallback costs nothing until it is needed (one ``try``)."""
    try:
        return orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError as exc:
        if "64-bit" not in str(exc):
            raise
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def open_error(what: str, path: Path, exc: OSError, fix: str) -> UsageError:
    """The UsageError for a file that cannot be opened: the path, the cause and what to do."""
    cause = exc.strerror or type(exc).__name__
    return UsageError(f"cannot write {what} to {path}: {cause} — {fix}")


class LineFile:
    """An append-only sink of encoded lines (each ``bytes`` ends with a newline).

    ``path`` None writes to standard output. The file is always opened in append mode, so lines
    never land over another writer's; ``append`` False truncates it first. When the reader of a
    pipe goes away (``rrcli run --out - | head``), the lines are dropped from then on and
    ``on_closed`` is called once: the run decides what that means. ``first`` runs before each
    write of queued lines: the results' file flushes the traces' first, so a result on disk has
    its calls' records on disk however the process ends.
    """

    __slots__ = ("_buf", "_closed", "_fd", "_first", "_on_closed", "_path", "_stdout")

    def __init__(
        self,
        path: Path | None,
        *,
        append: bool,
        what: str,
        on_closed: Callable[[], None] | None = None,
        first: Callable[[], None] | None = None,
    ) -> None:
        self._buf = bytearray()
        self._first = first
        self._path = path
        self._stdout = path is None
        self._fd = -1
        self._closed = False
        self._on_closed = on_closed
        if path is None:
            return
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as exc:
            raise open_error(what, path, exc, "check the folder exists and is writable") from exc
        if not append and stat.S_ISREG(os.fstat(self._fd).st_mode):
            os.ftruncate(self._fd, 0)

    def write(self, line: bytes) -> None:
        """Queue one whole line; flush when enough has gathered."""
        buf = self._buf
        buf += line
        if len(buf) >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Hand every queued line to the OS, in one write."""
        buf = self._buf
        if not buf:
            return
        if self._first is not None:
            self._first()
        try:
            if self._closed:
                pass
            elif self._stdout:
                out = sys.stdout.buffer
                out.write(buf)
                out.flush()
            else:
                with memoryview(buf) as view:
                    done = 0
                    while done < len(view):
                        done += os.write(self._fd, view[done:])
        except BrokenPipeError:
            self._reader_gone()
        except OSError as exc:
            raise RRCLIError(f"cannot write to {self._path}: {exc.strerror}") from exc
        finally:
            buf.clear()

    def _reader_gone(self) -> None:
        """The pipe's reader left: drop what is left, keep Python's own flush of standard
        output at exit from failing again, and tell ``on_closed``."""
        self._closed = True
        if self._stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        if self._on_closed is not None:
            self._on_closed()

    def close(self) -> None:
        """Flush and close (standard output stays open)."""
        try:
            self.flush()
        finally:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1
