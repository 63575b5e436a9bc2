"""Spans sent while a run goes on, from a thread, never in the run's way.

The trace writer hands every record to ``LiveSender.put`` (one ``len`` and one ``append`` on the
hot path); a daemon thread turns them into spans every ``interval`` seconds and sends them in
batches through the SDK's OTLP/HTTP exporter. When the collector is slow or gone the queue fills
and further records are dropped and counted, never waited for. ``close`` gives the thread time to
send what is left while it makes progress and reports what was sent and what was not: it gives
up when the last batch failed, after ``drain_s``, or when a batch hangs for ``stall_s`` (only
``dead_s`` when the collector has taken nothing yet: a collector that never answered does not
hold up the end of the run).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from rrcli.config.redaction import redact_each, redacted_url, url_secrets
from rrcli.otel.report import SendReport
from rrcli.otel.spans import SpanMaker, job_key

__all__ = ["BATCH", "LiveSender", "Shipper"]

BATCH = 512  # spans in one export request
_EXPORTER_LOGGER = "opentelemetry.exporter.otlp"


class _LastError(logging.Handler):
    """Keeps the exporter's last complaint (its own log lines would interleave with ours)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.message: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        self.message = record.getMessage()


class Shipper:
    """One OTLP/HTTP exporter and its counts: spans sent and failed, and why the last failed.
    ``timeout`` (seconds a batch may take, retries included): None is the exporter's default
    (OTEL_EXPORTER_OTLP_TIMEOUT, else 10)."""

    def __init__(self, endpoint: str, timeout: float | None = None) -> None:
        self.endpoint = redacted_url(endpoint)  # as reports show it
        self._secrets = url_secrets(endpoint)
        self.sent = self.failed = 0
        self.last_failed = False
        self._errors = _LastError()
        logger = logging.getLogger(_EXPORTER_LOGGER)
        logger.handlers = [self._errors]
        logger.propagate = False
        self._exporter = OTLPSpanExporter(endpoint=endpoint, timeout=timeout)

    @property
    def error(self) -> str | None:
        message = self._errors.message
        return None if message is None else redact_each(message, self._secrets)

    def ship(self, spans: list[ReadableSpan]) -> bool:
        """Send ``spans`` in one request; True when the collector took them."""
        ok = self._exporter.export(spans) is SpanExportResult.SUCCESS
        if ok:
            self.sent += len(spans)
        else:
            self.failed += len(spans)
        self.last_failed = not ok
        return ok

    def close(self) -> None:
        self._exporter.shutdown()


class _Orphans:
    """The jobs whose calls a full queue turned away, every one of them: their parent span is
    never made, so it is counted as dropped (``lost``) when the job ends, or at the close."""

    __slots__ = ("_fed", "_orphans", "lost")

    def __init__(self) -> None:
        self._fed: set[str] = set()  # jobs not ended with a call queued: their parent will come
        self._orphans: set[str] = set()  # jobs not ended with calls dropped and none queued
        self.lost = 0

    def kept(self, record: dict[str, Any]) -> None:
        key = job_key(record.get("job_id"))
        self._fed.add(key)
        self._orphans.discard(key)

    def dropped(self, record: dict[str, Any]) -> None:
        key = job_key(record.get("job_id"))
        if key not in self._fed:
            self._orphans.add(key)

    def ended(self, job_id: Any, dropped: bool) -> bool:
        """The job ended (``dropped``: some of its calls were turned away before they came
        here): True when it has a parent span to make."""
        key = job_key(job_id)
        fed = key in self._fed
        self._fed.discard(key)
        if key in self._orphans or (dropped and not fed):
            self._orphans.discard(key)
            self.lost += 1
            return False
        return True

    def left(self) -> int:
        """Parent spans lost with the jobs not ended by the close."""
        return self.lost + len(self._orphans)


class LiveSender:
    """The run's span thread. ``put(record)`` takes each trace record, ``job_done(job_id)`` says
    a job ended (its parent span can go), ``close()`` ends it and returns the SendReport."""

    def __init__(
        self,
        shipper: Shipper,
        run_id: str,
        *,
        queue_max: int = 1 << 14,
        interval: float = 0.5,
        drain_s: float = 10.0,
        stall_s: float = 3.0,
        dead_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._shipper = shipper
        self._run_id = run_id
        self._maker = SpanMaker()
        self._queue: deque[Any] = deque()
        self._max = queue_max
        self._overflow = 0  # calls the full queue turned away (counted by put)
        self._orphans = _Orphans()  # and the parents of jobs it turned all the calls away of
        self._unmade = 0  # records that made no span (counted by the thread)
        self._interval, self._drain_s = interval, drain_s
        self._stall_s, self._dead_s = stall_s, dead_s
        self._clock = clock
        self._wake = threading.Event()
        self._lock = threading.Lock()  # held by the thread except while a batch is sent
        self._abandoned = False
        self._pending: list[ReadableSpan] = []
        self._sending_since: float | None = None
        self._in_flight = 0  # spans of the batch being sent
        self._thread = threading.Thread(target=self._loop, name="rrcli-otlp", daemon=True)
        self._thread.start()

    def put(self, record: dict[str, Any]) -> None:
        """Queue a trace record (the hot path); a full queue drops a call and counts it."""
        queue, call = self._queue, record.get("event") == "call"
        if len(queue) < self._max:
            queue.append(record)
            if call:
                self._orphans.kept(record)
        elif call:
            self._overflow += 1
            self._orphans.dropped(record)

    def job_done(self, job_id: Any, *, dropped: bool = False) -> None:
        """A job ended: its parent span is made once its queued records are. ``dropped``: some
        of its calls were dropped before they reached this sender (the run's own buffer)."""
        queue = self._queue
        if self._orphans.ended(job_id, dropped) and len(queue) < self._max:
            queue.append((job_id,))

    def _loop(self) -> None:
        closing = False
        while True:  # a pause between rounds only when nothing is left to send
            busy = self._pending or len(self._queue) >= BATCH
            closing = closing or (self._wake.is_set() if busy else self._wake.wait(self._interval))
            with self._lock:
                if self._abandoned:
                    return
                self._take()
                if closing and not self._queue:
                    self._pending.extend(self._maker.finish())
                batch, self._pending = self._pending[:BATCH], self._pending[BATCH:]
                if not batch:
                    if closing and not self._queue:
                        return
                    continue
                self._sending_since, self._in_flight = self._clock(), len(batch)
            if not self._send(batch):
                return

    def _take(self) -> None:
        """Every queued record as spans ready to send (at most a few batches ahead)."""
        queue, maker, pending = self._queue, self._maker, self._pending
        while queue and len(pending) < 4 * BATCH:
            item = queue.popleft()
            if type(item) is tuple:
                span = maker.job_done(self._run_id, item[0])
                if span is not None:
                    pending.append(span)
            else:
                try:
                    pending.extend(maker.feed(item))
                except (KeyError, TypeError, ValueError):  # not a span: never the thread's end
                    self._unmade += 1

    def _send(self, batch: list[ReadableSpan]) -> bool:
        """Send a batch outside the lock; False when the sender was abandoned meanwhile."""
        self._shipper.ship(batch)
        with self._lock:
            self._sending_since, self._in_flight = None, 0
            return not self._abandoned

    def close(self) -> SendReport:
        """Stop taking records and let the thread send the rest while it gets anywhere; what is
        not sent by then is dropped and counted."""
        self._wake.set()
        deadline = self._clock() + self._drain_s
        while self._thread.is_alive():
            self._thread.join(0.02)
            since, now = self._sending_since, self._clock()
            stall = self._stall_s if self._shipper.sent else self._dead_s
            hung = since is not None and now - since > stall
            if now > deadline or hung or self._shipper.last_failed:
                break
        with self._lock:
            self._abandoned = True
            queued = [r for r in self._queue if type(r) is dict and r.get("event") == "call"]
            left = len(self._pending) + self._in_flight + len(queued)
            left += self._maker.parents_due(queued)
            self._queue.clear()
        shipper = self._shipper
        if not self._thread.is_alive():
            shipper.close()
        dropped = shipper.failed + self._overflow + self._unmade + left + self._orphans.left()
        return SendReport(shipper.endpoint, shipper.sent, dropped, shipper.error)
