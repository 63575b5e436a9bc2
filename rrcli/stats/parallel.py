"""The processes of ``rrcli stats``: reading a large file in parts at once, and summing two
halves of a summary at once.

Why it exists: decoding JSON lines is CPU-bound Python work that one process does at about
half a million lines a second, and the arithmetic that follows is whole-array numpy work on one
core; a machine with more cores reads a file of a million lines in parts, each part in a forked
process, and sums the groups in one process while this one sums the total. Forked (never
spawned): a child starts in microseconds and reads what the parent holds without copying it.
Where fork is missing (Windows, macOS's default aside) everything runs in this process.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import IO, Any

from rrcli.stats.columns import TraceReader

__all__ = ["Source", "both", "cpus", "read_all"]

Source = str | os.PathLike[str] | IO[bytes]
_PARALLEL_BYTES = 64 << 20  # files this large are read in parts, one a process
_child: Callable[[], Any] | None = None  # what the forked child of ``both`` runs


def read_all(sources: list[Source], by: str, workers: int) -> TraceReader:
    """Read every source; files of _PARALLEL_BYTES or more are cut at line boundaries into
    ``workers`` parts, read by this process and ``workers`` − 1 forked ones, whose readers are
    merged."""
    reader, parts = TraceReader(by), []
    for source in sources:
        if not isinstance(source, str | os.PathLike):
            reader.read(getattr(source, "buffer", source))
            continue
        size = os.path.getsize(source)
        cuts = _cuts(source, size, workers if size >= _PARALLEL_BYTES else 1)
        if len(cuts) > 2:
            parts += [(source, a, b, by) for a, b in itertools.pairwise(cuts)]
        else:
            with open(source, "rb") as stream:
                reader.read(stream)
    if parts:  # this process reads its share of the parts while the others read the rest
        share = max(1, len(parts) // workers)
        fork = multiprocessing.get_context("fork")
        pool_size = max(1, min(workers - 1, len(parts) - share))
        with ProcessPoolExecutor(pool_size, mp_context=fork) as pool:
            rest = pool.map(_read_part, parts[share:])
            for part in parts[:share]:
                reader.merge(_read_part(part))
            for theirs in rest:
                reader.merge(theirs)
    return reader


def both(child: Callable[[], Any], here: Callable[[], Any]) -> tuple[Any, Any]:
    """``(child(), here())``, ``child`` run in a forked process while ``here`` runs in this
    one: the child sees what this process holds when it forks, and only its answer is copied
    back."""
    global _child
    _child = child
    try:
        fork = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(1, mp_context=fork) as pool:
            theirs = pool.submit(_run_child)  # forks now, with _child set
            mine = here()
            return theirs.result(), mine
    finally:
        _child = None


def cpus() -> int:
    """The CPUs this process may use (1 where processes cannot be forked)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _run_child() -> Any:
    assert _child is not None  # set by ``both`` before it forks
    return _child()


def _cuts(path: Source, size: int, parts: int) -> list[int]:
    """Byte offsets that cut a file into about ``parts`` pieces of whole lines."""
    cuts = [0]
    with open(path, "rb") as stream:
        for i in range(1, parts):
            stream.seek(size * i // parts)
            stream.readline()
            if cuts[-1] < stream.tell() < size:
                cuts.append(stream.tell())
    return [*cuts, size]


def _read_part(part: tuple[Source, int, int, str]) -> TraceReader:
    path, start, end, by = part
    reader = TraceReader(by)
    with open(path, "rb") as stream:
        stream.seek(start)
        reader.read(stream, end - start)
    return reader
