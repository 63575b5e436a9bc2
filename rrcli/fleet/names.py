"""How a process is named among the workers of a shared queue, and which queue names are
usable: a worker's default outputs are named after its queue, so a name must make a plain file
name in the working folder."""

from __future__ import annotations

import os
import socket

from rrcli.errors import UsageError

__all__ = ["check_queue_name", "worker_name"]

SEPARATORS = frozenset({"/", "\\", os.sep, os.altsep or "/"})


def worker_name() -> str:
    """This process as a worker of a shared queue: ``host-pid`` (what ``rrcli queue`` lists)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def check_queue_name(name: str) -> str:
    """``name`` when it can name a queue; UsageError when it is empty or holds a path separator
    (the outputs ``NAME.host-pid.results.jsonl`` would be hidden files, or land in another
    folder)."""
    if not name.strip():
        raise UsageError('--queue "": a queue needs a name — e.g. --queue nightly')
    if any(sep in name for sep in SEPARATORS) or "\0" in name:
        raise UsageError(
            f"--queue {name!r}: a queue's name may not hold a path separator (it names the "
            "worker's output files in the working folder) — e.g. --queue nightly"
        )
    return name
