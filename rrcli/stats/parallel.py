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

import contextlib
import itertools
import mmap
import multiprocessing
import os
import pickle
import tempfile
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import IO, Any

from rrcli.stats.columns import TraceReader
from rrcli.stats.decoding import BlockDecoder

__all__ = ["Source", "both", "cpus", "read_all"]

Source = str | os.PathLike[str] | IO[bytes]
_PARALLEL_BYTES = 64 << 20  # files this large are read in parts by several processes
#: each process's parts, as shares of the file: large ones first, then smaller, so that the
#: processes end about together (the last part taken is a small one) at few parts in all
_PART_WEIGHTS = (8, 8, 4, 4, 2, 2, 1, 1)
#: where a forked reader leaves what it read: memory (tmpfs) where there is one
_HANDOVER_DIR = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
_ALIGN = 64  # where each array handed over starts in its file: a cache line
_child: Callable[[], Any] | None = None  # what the forked child of ``both`` runs
_claims: Any = None  # the next part to read, shared by the processes of ``_read_parts``


def read_all(sources: list[Source], by: str, workers: int) -> TraceReader:
    """Read every source; files of _PARALLEL_BYTES or more are cut at line boundaries into
    parts (each weight of _PART_WEIGHTS ``workers`` times, in turn), read by this process and
    ``workers`` − 1 forked ones, whose readers are merged in the parts' order."""
    reader, parts = TraceReader(by), []
    for source in sources:
        if not isinstance(source, str | os.PathLike):
            reader.read(getattr(source, "buffer", source))
            continue
        size = os.path.getsize(source)
        parallel = size >= _PARALLEL_BYTES and workers > 1
        weights = [w for w in _PART_WEIGHTS for _ in range(workers)] if parallel else [1]
        cuts = _cuts(source, size, weights)
        if len(cuts) > 2:
            parts += [(source, a, b, by) for a, b in itertools.pairwise(cuts)]
        else:
            with open(source, "rb") as stream:
                reader.read(stream)
    for theirs in _read_parts(parts, workers) if parts else ():
        reader.merge(theirs)
    return reader


def _read_parts(parts: list[tuple[Source, int, int, str]], workers: int) -> list[TraceReader]:
    """A reader of each part, in order. This process and ``workers`` − 1 forked ones each take
    the next part not yet taken (a shared counter) until none is left, so one that the machine
    slows reads fewer. A forked one hands its readers back in a file in _HANDOVER_DIR (a pipe
    takes a context switch every 64 KiB, which a loaded machine makes slow), mapped here."""
    global _claims
    fork = multiprocessing.get_context("fork")
    _claims = fork.Value("i", 0)
    read: dict[int, TraceReader] = {}
    theirs: list[Future[str]] = []
    try:
        with ProcessPoolExecutor(max(1, workers - 1), mp_context=fork) as pool:
            theirs = [pool.submit(_read_claimed, parts) for _ in range(max(1, workers - 1))]
            read.update(_claimed(parts))
        for future in theirs:
            read.update(_handed_over(future.result()))
    finally:
        _claims = None
        for future in theirs:  # all done: the pool waited for them
            if not future.cancelled() and future.exception() is None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(future.result())
    return [read[at] for at in range(len(parts))]


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


def _cuts(path: Source, size: int, weights: list[int]) -> list[int]:
    """Byte offsets that cut a file into pieces of whole lines, about in the proportions of
    ``weights``."""
    cuts, total = [0], sum(weights)
    with open(path, "rb") as stream:
        for upto in itertools.accumulate(weights[:-1]):
            stream.seek(size * upto // total)
            stream.readline()
            if cuts[-1] < stream.tell() < size:
                cuts.append(stream.tell())
    return [*cuts, size]


def _claimed(parts: list[tuple[Source, int, int, str]]) -> dict[int, TraceReader]:
    """Readers of the parts this process takes, by the part's place."""
    assert _claims is not None  # set by ``_read_parts`` before it forks
    read, decoder = {}, BlockDecoder()  # one for every part: each knows the names read before
    while True:
        with _claims.get_lock():
            at = _claims.value
            _claims.value += 1
        if at >= len(parts):
            return read
        read[at] = _read_part(parts[at], decoder)


def _read_claimed(parts: list[tuple[Source, int, int, str]]) -> str:
    """In a forked process: ``_claimed``, its readers written to a file whose path it returns:
    their pickle, then each array's bytes, each after its length and each starting at a
    multiple of _ALIGN bytes, so that ``_handed_over`` maps the arrays in place."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(_claimed(parts), protocol=5, buffer_callback=buffers.append)
    fd, path = tempfile.mkstemp(prefix="rrcli-stats-", dir=_HANDOVER_DIR)
    with os.fdopen(fd, "wb") as handover:
        for chunk in (head, *(b.raw() for b in buffers)):
            handover.write(len(chunk).to_bytes(_ALIGN, "little"))
            handover.write(chunk)
            handover.write(bytes(-handover.tell() % _ALIGN))
    return path


def _handed_over(path: str) -> dict[int, TraceReader]:
    """The readers ``_read_claimed`` wrote, their arrays read in place from the mapped file
    (no copy: they are copied once, into the merged columns)."""
    with open(path, "rb") as handover:
        view = memoryview(mmap.mmap(handover.fileno(), 0, access=mmap.ACCESS_READ))
    chunks, at = [], 0
    while at < len(view):
        size = int.from_bytes(view[at : at + _ALIGN], "little")
        at += _ALIGN
        chunks.append(view[at : at + size])
        at += size + (-size % _ALIGN)
    return pickle.loads(chunks[0], buffers=chunks[1:])


def _read_part(part: tuple[Source, int, int, str], decoder: BlockDecoder) -> TraceReader:
    path, start, end, by = part
    reader = TraceReader(by, decoder)
    with open(path, "rb") as stream:
        stream.seek(start)
        reader.read(stream, end - start)
    return reader
