"""``rrcli export``: trace files sent to an OTLP/HTTP collector as spans.

The files are read line by line; each call record is checked against the trace schema
(``records/traceschema.py``) and becomes a span, its job's parent span following at its run's
``run_end`` or the files' end (spans.py). Spans go in batches; once a batch fails the collector
is taken to be unreachable and the rest are counted, not sent, so the command ends quickly with
the number of spans not delivered.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import msgspec
import orjson

from rrcli.errors import UsageError
from rrcli.otel.sender import BATCH, Shipper
from rrcli.otel.spans import SpanMaker
from rrcli.records.traceschema import CALL

__all__ = ["ExportReport", "export_traces"]

#: what a call record needs to be a span; every other field may be absent or null
_NEEDED = (
    "run_id",
    "job_id",
    "attempt",
    "deployment",
    "provider",
    "model",
    "outcome",
    "ts_start",
    "ts_end",
)
_Checked = msgspec.defstruct(
    "_Checked",
    [
        (name, kind) if name in _NEEDED else (name, kind | None, None)
        for name, kind in CALL
        if name != "event"
    ],
    kw_only=True,
)


@dataclass(frozen=True, slots=True)
class ExportReport:
    """What an export did: ``spans`` made (calls and jobs), ``sent`` to ``endpoint`` (its
    credentials masked),
    ``malformed`` lines skipped, and the exporter's ``error`` when some were not delivered."""

    endpoint: str
    spans: int
    sent: int
    malformed: int
    error: str | None

    @property
    def exit_code(self) -> int:
        return 0 if self.sent == self.spans else 1

    def lines(self) -> list[str]:
        """The report for standard error."""
        out = []
        if self.malformed:
            out.append(f"rrcli: {self.malformed} malformed trace line(s) skipped")
        if self.sent == self.spans:
            out.append(f"exported {self.sent} spans to {self.endpoint}")
        else:
            why = f" ({self.error})" if self.error else ""
            out.append(
                f"rrcli: {self.spans - self.sent} of {self.spans} spans not delivered to "
                f"{self.endpoint}{why} — is the collector running? Check the URL and export again"
            )
        return out


def export_traces(
    sources: Iterable[str | Path | IO[bytes]], endpoint: str, *, timeout: float | None = None
) -> ExportReport:
    """Send every call record of ``sources`` (paths, or binary streams) to ``endpoint`` (a full
    OTLP/HTTP traces URL) as spans. UsageError (exit 2) for a file that cannot be read."""
    shipper = Shipper(endpoint, timeout)
    maker = SpanMaker()
    batch: list[Any] = []
    spans = malformed = 0
    try:
        for source in sources:
            for record in _records(source):
                try:
                    made = maker.feed(record) if record is not None else None
                except (KeyError, TypeError, ValueError):  # e.g. it ends before it starts
                    made = None
                if made is None:
                    malformed += 1
                    continue
                batch.extend(made)
                spans += len(made)
                if len(batch) >= BATCH:
                    _ship(shipper, batch)
        finished = maker.finish()
        spans += len(finished)
        _ship(shipper, batch + finished)
    finally:
        shipper.close()
    return ExportReport(shipper.endpoint, spans, shipper.sent, malformed, shipper.error)


def _ship(shipper: Shipper, batch: list[Any]) -> None:
    """Send and empty ``batch``; after a failure nothing more is sent (only counted)."""
    if batch and not (shipper.failed or shipper.last_failed):
        shipper.ship(batch)
    batch.clear()


def _records(source: str | Path | IO[bytes]) -> Iterator[dict[str, Any] | None]:
    """The trace records of one source, None for each malformed line (blank lines and records
    of an event this version does not know are skipped)."""
    if isinstance(source, (str, Path)):
        try:
            stream = open(source, "rb")  # noqa: SIM115 (closed below)
        except OSError as exc:
            raise UsageError(f"{source}: cannot read the trace file: {exc.strerror}") from None
    else:
        stream = source
    try:
        for line in stream:
            if line.strip():
                yield _record(line)
    finally:
        if stream is not source:
            stream.close()


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(record) is not dict or not isinstance(record.get("event"), str):
        return None
    if record["event"] == "call":
        try:
            msgspec.convert(record, _Checked)
        except msgspec.ValidationError:
            return None
    return record
