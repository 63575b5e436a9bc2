"""The final line of each job, gathered from results: what ``rrcli results`` writes.

A results file may hold several lines for one job (an error, then the ok of a resumed run); the
last one is the job's final outcome. ``FinalLines`` reads its sources once and keeps, for each
job id, only where its last line is and its outcome (one entry a job: its key, a source number,
a locator and the outcome, about 150 bytes), never the lines themselves: ``collect_results``
reads each final line back as it writes it, so memory grows with the number of jobs, not with
the size of their outputs.

A source is anything that yields whole lines with a locator and reads a line back by it
(``LineSource``): a results file here, where the locator is the line's byte offset; the shared
queue's stored results fit the same shape. Lines are kept as written, so the output is in the
sources' format (rrcli, openai-batch or anthropic-batch); sources in different formats are
refused.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Protocol

import orjson

from rrcli.errors import UsageError
from rrcli.records.jobs import iter_jobs, open_jobs_file
from rrcli.records.results import line_format, line_outcome
from rrcli.records.traceschema import RESULT_STATUSES

__all__ = [
    "STATUSES",
    "CollectReport",
    "FinalLines",
    "LineSource",
    "ResultsFile",
    "collect_files",
    "collect_results",
]

STATUSES = RESULT_STATUSES  # what --status filters on
MISSING_SHOWN = 20  # job ids without a line named in the report; the rest are counted


class LineSource(Protocol):
    """Where result lines come from: ``name`` for messages, ``lines`` yields (locator, line)
    for every line, ``read`` gives a line back by its locator."""

    name: str

    def lines(self) -> Iterator[tuple[int, bytes]]: ...

    def read(self, locator: int) -> bytes: ...


class ResultsFile:
    """A results file as a LineSource: the locator is the line's byte offset. A last line
    without its newline (torn by a crash) is not yielded."""

    def __init__(self, path: Path, stack: ExitStack) -> None:
        self.name = str(path)
        try:
            self._file: BinaryIO = stack.enter_context(open(path, "rb"))  # noqa: SIM115
        except OSError as exc:
            raise UsageError(f"{path}: cannot read the results file: {exc.strerror}") from exc

    def lines(self) -> Iterator[tuple[int, bytes]]:
        f = self._file
        f.seek(0)
        offset = 0
        for line in f:
            if line.endswith(b"\n"):
                yield offset, line
            offset += len(line)

    def read(self, locator: int) -> bytes:
        self._file.seek(locator)
        return self._file.readline()


class FinalLines:
    """Each job's last line across ``sources``, read once: ``where[key]`` is (source number,
    locator, outcome), in the order the jobs were first seen. ``malformed`` counts lines that
    are not results (blank lines aside); ``fmt`` is the sources' format (None: no line).

    Raises UsageError for sources in different formats, or one with lines but no result among
    them (a trace or a jobs file given by mistake).
    """

    __slots__ = ("fmt", "malformed", "sources", "where")

    def __init__(self, sources: Sequence[LineSource]) -> None:
        self.sources = sources
        self.where: dict[str, tuple[int, int, str]] = {}
        self.malformed = 0
        self.fmt: str | None = None
        for number, source in enumerate(sources):
            self._read(number, source)

    def _read(self, number: int, source: LineSource) -> None:
        where, loads = self.where, orjson.loads
        found = malformed = 0
        for locator, line in source.lines():
            try:
                rec = loads(line)
            except orjson.JSONDecodeError:
                malformed += bool(line.strip())
                continue
            kind = line_format(rec)
            if kind is None:
                malformed += 1
                continue
            if kind != self.fmt:
                self._check_format(kind, source)
            key, outcome = line_outcome(rec, kind)
            where[key] = (number, locator, outcome)
            found += 1
        if malformed and not found:
            raise UsageError(
                f"{source.name}: not a results file (no line of it is a job's result) — give "
                "the results of rrcli run (<JOBS stem>.results.jsonl, or its --out)"
            )
        self.malformed += malformed

    def _check_format(self, kind: str, source: LineSource) -> None:
        if self.fmt is not None:
            raise UsageError(
                f"{source.name} holds {kind} results and an earlier file {self.fmt} results — "
                "collect each format on its own"
            )
        self.fmt = kind

    def line(self, key: str) -> tuple[bytes, str] | None:
        """The last line of job ``key`` as written, with its outcome; None if it has none."""
        found = self.where.get(key)
        if found is None:
            return None
        number, locator, outcome = found
        return self.sources[number].read(locator), outcome


@dataclass(frozen=True, slots=True)
class CollectReport:
    """What ``collect_results`` did: lines written by outcome, the jobs of the jobs file that
    have no line (``missing``, the first MISSING_SHOWN named in ``missing_ids``), result ids the
    jobs file does not have (``unknown``), and lines that are not results (``malformed``)."""

    written: dict[str, int]
    missing: int = 0
    missing_ids: tuple[str, ...] = ()
    unknown: int = 0
    malformed: int = 0
    fmt: str | None = None

    @property
    def exit_code(self) -> int:
        """1 when a job of the jobs file has no result line, else 0."""
        return 1 if self.missing else 0

    def lines(self, out: Path | None, jobs: Path | None) -> list[str]:
        """The report for standard error: what was written where (``out`` None: standard
        output), then the jobs of ``jobs`` without a line and what else was left out."""
        written = self.written
        counts = ", ".join(f"{n:,} {status}" for status, n in written.items())
        lines = [f"{sum(written.values()):,} jobs ({counts}) → {out or 'standard output'}"]
        if self.missing:
            more = self.missing - len(self.missing_ids)
            names = ", ".join(self.missing_ids) + (f" and {more:,} more" if more else "")
            lines.append(
                f"rrcli: {self.missing:,} job(s) of {jobs} have no result line: {names} — "
                f"run them with: rrcli run {jobs} --resume"
            )
        if self.unknown:
            lines.append(f"rrcli: {self.unknown:,} job id(s) in the results are not in {jobs}")
        if self.malformed:
            lines.append(f"rrcli: {self.malformed:,} line(s) that are not results skipped")
        return lines


def collect_results(
    sources: Sequence[LineSource],
    out: Path | None,
    *,
    jobs: Path | None = None,
    status: str | None = None,
    by_locator: bool = False,
) -> CollectReport:
    """Write the final line of each job in ``sources`` to ``out`` (None: standard output):
    in the jobs file's order when ``jobs`` is given (its jobs without a line counted and
    named), else in the order of their locators with ``by_locator`` (a source whose locator
    is the job's place in its file), else in the order first seen; only lines of outcome
    ``status`` when given.

    ``out`` is written whole or not at all (a temporary file renamed over it), so it may be one
    of the sources. Raises UsageError for an unreadable file or sources in different formats.
    """
    if status is not None and status not in STATUSES:
        raise UsageError(f"--status {status!r}: expected one of {', '.join(STATUSES)}")
    final = FinalLines(sources)
    with _Output(out) as sink:
        if jobs is None:
            where = final.where
            keys = sorted(where, key=lambda k: where[k][1]) if by_locator else where
            written = _write(final, keys, status, sink.write)
            return CollectReport(written, malformed=final.malformed, fmt=final.fmt)
        return _write_in_jobs_order(final, jobs, status, sink.write)


def collect_files(
    paths: Sequence[Path],
    out: Path | None,
    *,
    jobs: Path | None = None,
    status: str | None = None,
) -> CollectReport:
    """``collect_results`` over results files."""
    with ExitStack() as stack:
        sources = [ResultsFile(path, stack) for path in paths]
        return collect_results(sources, out, jobs=jobs, status=status)


def _write(
    final: FinalLines, keys: Iterable[str], status: str | None, write: _Write
) -> dict[str, int]:
    written = dict.fromkeys(STATUSES, 0)
    for key in keys:
        found = final.line(key)
        if found is not None and status in (None, found[1]):
            write(found[0])
            written[found[1]] += 1
    return written


def _write_in_jobs_order(
    final: FinalLines, jobs: Path, status: str | None, write: _Write
) -> CollectReport:
    missing: list[str] = []
    count = matched = 0

    def keys() -> Iterator[str]:
        nonlocal count, matched
        for job in _read_jobs(jobs):
            if job in final.where:
                matched += 1
                yield job
            else:
                count += 1
                if len(missing) < MISSING_SHOWN:
                    missing.append(job)

    written = _write(final, keys(), status, write)
    unknown = len(final.where) - matched
    return CollectReport(written, count, tuple(missing), unknown, final.malformed, final.fmt)


def _read_jobs(path: Path) -> Iterator[str]:
    """The keys of a jobs file's lines, in order, as ``rrcli run`` reads them."""
    with open_jobs_file(path) as stream:
        for job in iter_jobs(stream, str(path)):
            yield job.key


class _Write(Protocol):
    def __call__(self, line: bytes, /) -> object: ...


class _Output:
    """The output file, written to a temporary file beside it and renamed over it on success
    (removed on failure); None: standard output."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.temp = None if path is None else path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.file: BinaryIO = sys.stdout.buffer

    def __enter__(self) -> _Output:
        if self.temp is not None:
            try:
                fd = os.open(self.temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            except OSError as exc:
                raise UsageError(
                    f"cannot write results to {self.path}: {exc.strerror} — check the folder "
                    "exists and is writable"
                ) from exc
            self.file = os.fdopen(fd, "wb")
        return self

    def write(self, line: bytes) -> None:
        self.file.write(line)

    def __exit__(self, kind: object, *rest: object) -> None:
        if self.temp is None:
            self.file.flush()
            return
        self.file.close()
        if kind is None:
            os.replace(self.temp, self.path)  # type: ignore[arg-type]
        else:
            self.temp.unlink(missing_ok=True)
