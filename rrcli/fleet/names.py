"""How a process is named among the workers of a shared queue."""

from __future__ import annotations

import os
import socket

__all__ = ["worker_name"]


def worker_name() -> str:
    """This process as a worker of a shared queue: ``host-pid`` (what ``rrcli queue`` lists)."""
    return f"{socket.gethostname()}-{os.getpid()}"
