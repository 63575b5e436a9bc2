"""A run's output files are its own: never one of its inputs, never each other, and held by that
run alone for its whole life.

``refuse_same_files`` runs before anything is opened for writing: an output that is the jobs file
(``--out jobs.jsonl --overwrite`` would empty it) or the other output is a usage error. Files are
compared by identity (device and inode: a hard link or a symlink is the same file), and an output
that does not exist yet by its resolved path.

``OutputClaim`` then takes an exclusive ``flock`` on each output that is a regular file, before
it is truncated or read for ``--resume``, and keeps it until the run ends; the kernel releases it
if the process dies, so a killed run never leaves a stale lock. A second run on a held file is a
usage error naming the holder's pid (read from ``/proc/locks`` where there is one). Terminals,
pipes and ``/dev/null`` are not locked: nothing there can be clobbered.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from rrcli.errors import OutputBusyError, UsageError

__all__ = ["STDIN", "OutputClaim", "refuse_same_files"]

_PROC_LOCKS = Path("/proc/locks")


STDIN = Path("-")  # the jobs input when it is standard input


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a regular file (``STDIN``: standard input's), else None."""
    try:
        st = os.fstat(0) if path is STDIN else os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _same(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file."""
    ida, idb = _identity(a), _identity(b)
    if ida is not None or idb is not None:
        return ida == idb
    if a is STDIN or b is STDIN:
        return False
    return os.path.realpath(a) == os.path.realpath(b)


def refuse_same_files(jobs: Path | None, outputs: Iterable[tuple[str, Path | None]]) -> None:
    """UsageError when an output (``(option, path)``; path None: not written) is the jobs file
    (``jobs``: a path, ``STDIN``, or None when the jobs are no file) or an output named before
    it."""
    seen: list[tuple[str, Path]] = []
    for option, path in outputs:
        if path is None:
            continue
        if jobs is not None and _same(jobs, path):
            raise UsageError(
                f"{option} {path} is the jobs file itself: writing it would destroy the jobs — "
                f"choose another {option}"
            )
        for other, earlier in seen:
            if _same(earlier, path):
                raise UsageError(
                    f"{other} {earlier} and {option} {path} are one file — give each its own"
                )
        seen.append((option, path))


class OutputClaim:
    """Exclusive locks on a run's output files, held until ``close``."""

    def __init__(self) -> None:
        self._fds: list[int] = []

    def take(self, path: Path | None, what: str) -> None:
        """Lock ``path`` (created if missing) for this run; OutputBusyError (exit 2) when another
        run holds it. A path that cannot be opened is left to the writer to report."""
        if path is None:
            return
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        except OSError:
            return
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _holder(fd)
            os.close(fd)
            by = f"another rrcli run (pid {holder})" if holder else "another rrcli run"
            raise OutputBusyError(
                f"cannot write {what} to {path}: {by} is writing it — wait for that run to end, "
                "or write to another file"
            ) from None
        self._fds.append(fd)

    def close(self) -> None:
        """Release every lock."""
        while self._fds:
            os.close(self._fds.pop())


def _holder(fd: int) -> int | None:
    """The pid holding a flock on ``fd``'s file, from /proc/locks (Linux); None if unknown."""
    st = os.fstat(fd)
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        text = _PROC_LOCKS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; waiters' lines carry "->"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == where:
            return int(fields[4]) if fields[4].isdigit() else None
    return None
