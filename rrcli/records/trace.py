"""The trace file: the contract between ``rrcli run`` and ``rrcli stats``.

Append-only, one JSON object a line, every line with ``event`` and ``run_id``: one ``run`` record
when the run starts (the pool, never its credentials or headers), one ``call`` record per HTTP
attempt, a ``backend`` record when a backend leaves the pool, one ``run_end`` record. ``call`` is on
the hot path: the attempt's fields straight into a dict literal in the trace's field order, one
``orjson.dumps``, timestamps formatted from a cache of the current second. All times given are epoch
seconds; the ``*_ms`` fields are milliseconds, rounded to three decimals.

A call answered by the response cache (``cached``) is the hot path of a cached rerun: its record
is ``call``'s own, written once per backend with marks for what varies, then filled in by bytes
(about a fifth of ``call``'s time, which builds the record from an ``Attempt``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rrcli import __version__
from rrcli.config.prices import price_of
from rrcli.records._jsonl import LineFile
from rrcli.records.attempt import Attempt, cached_attempt
from rrcli.records.traceschema import CALL_FIELDS, JOB_COUNTS, results_field, rfc3339
from rrcli.registry import server_address

if TYPE_CHECKING:
    from rrcli.config.profile import Backend, Price, Profile

__all__ = ["CALL_FIELDS", "TraceWriter", "new_run_id", "rfc3339"]

_NEWLINE = orjson.OPT_APPEND_NEWLINE
_UNPRICED = (None, False)
#: what varies between the call records of cached answers on one backend, in record order
_HIT_FIELDS = (
    "job_id",
    "session",
    "response_model",
    "ts_start",
    "ts_end",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "usage_estimated",
)
_EPOCH = b'"1970-01-01T00:00:00.000Z"'  # rfc3339(0.0): a template's mark for its times


def new_run_id(clock: Callable[[], float] = time.time) -> str:
    """A fresh run id, sortable by start time: ``20261129T213129Z-3f9a2c1b``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
    return f"{stamp}-{os.urandom(4).hex()}"


def _hit(
    job_id: Any,
    session: Any,
    backend: Backend,
    reply: Mapping[str, Any],
    stream: Any,
    endpoint: Any,
    ts: float,
) -> Attempt:
    """The attempt of a call of turn 0 the response cache answered at ``ts`` (engine.cached),
    ``reply`` the stored answer's fields."""
    answer: Any = _Stored(reply)
    return cached_attempt(job_id, session, 0, backend, answer, stream, endpoint, ts, 0.0)


class _Stored:
    """A stored answer's fields read as a Reply's attributes, one absent as Reply's default
    (None, ``usage_estimated`` False): what ``call`` reads of a reply (records may not import
    ``providers.base`` at run time)."""

    __slots__ = ("_fields",)

    def __init__(self, fields: Mapping[str, Any]) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        return self._fields.get(name, False if name == "usage_estimated" else None)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000.0, 3)


def _price_record(price: Price) -> dict[str, float]:
    """A price as the run record writes it: the cache prices only when set."""
    record = {"input": price.input, "output": price.output}
    if price.cached_input is not None:
        record["cached_input"] = price.cached_input
    if price.cache_write is not None:
        record["cache_write"] = price.cache_write
    return record


def _backend_record(backend: Backend) -> dict[str, Any]:
    known = price_of(backend)
    price = None if known is None else known.price
    return {
        "id": backend.id,
        "provider": backend.provider,
        "model": backend.model,
        "host": server_address(backend.provider, backend.base_url),
        "max_concurrency": backend.max_concurrency,
        "price": None if price is None else _price_record(price),
    }


class TraceWriter:
    """Writes one run's trace records to ``path`` (appended, or from an empty file when not
    ``append``; None writes nothing).

    ``clock`` (epoch seconds) stamps the ``run`` and ``run_end`` records; call records carry the
    times they are given. ``tap``, when given, is handed every record's line as it is written
    (``rrcli run --otlp`` sends them on from a child process); it must not block.
    """

    __slots__ = ("_clock", "_hits", "_out", "_path", "_tap", "run_id")

    def __init__(
        self,
        path: Path | None,
        run_id: str,
        *,
        clock: Callable[[], float] = time.time,
        tap: Callable[[bytes], None] | None = None,
        append: bool = True,
    ) -> None:
        self.run_id = run_id
        self._clock = clock
        self._tap = tap
        self._path = path
        self._out = None if path is None else LineFile(path, append=append, what="traces")
        #: (backend id, stream, endpoint) -> the template of a cached answer's call record
        self._hits: dict[tuple[str, bool, str], bytes | None] = {}

    def reopen(self) -> bool:
        """Open the path again, appending (after a log rotation moved the file), and close the
        file (its lines written); True when that is a new, empty file. UsageError when the path
        cannot be opened: the lines then go on to the file as it was."""
        if self._out is None or self._path is None:
            return False
        self._out.flush()
        fresh = not self._path.exists() or self._path.stat().st_size == 0
        out = LineFile(self._path, append=True, what="traces")
        self._out.close()
        self._out = out
        return fresh

    def _put(self, record: dict[str, Any]) -> None:
        """One record encoded and out: ``_put_line``'s, written out (a call record a job)."""
        line = orjson.dumps(record, option=_NEWLINE)
        if self._tap is not None:
            self._tap(line)
        if self._out is not None:
            self._out.write(line)

    def _put_line(self, line: bytes) -> None:
        """One encoded record out, to the tap and the file."""
        if self._tap is not None:
            self._tap(line)
        if self._out is not None:
            self._out.write(line)

    def run(
        self,
        profile: Profile,
        queue: dict[str, str] | None = None,
        results: Path | None = None,
    ) -> None:
        """The ``run`` record: the pool as routed (never credentials, headers or params), for
        a worker of a shared queue ``{"name", "worker"}`` (else null), and the results file the
        run writes (``results_field``; null when it writes none)."""
        self._put(
            {
                "event": "run",
                "run_id": self.run_id,
                "ts": rfc3339(self._clock()),
                "rrcli_version": __version__,
                "profile": {
                    "name": profile.name,
                    "strategy": profile.strategy,
                    "binding": profile.binding,
                    "backends": [_backend_record(b) for b in profile.backends],
                },
                "queue": queue,
                "results": None if results is None else results_field(results, self._path),
            }
        )

    def call(
        self,
        attempt: Attempt,
        server_address: str | None,
        charged: tuple[float | None, bool] = _UNPRICED,
    ) -> None:
        """The ``call`` record of one HTTP attempt; ``server_address`` is the provider's
        host[:port] (None for the in-process sim); ``charged``: (USD the attempt was charged,
        None unpriced; whether that is an estimate). The dict literal is in the trace format's field
        order, the attempt's derived fields inline: built and encoded once, nothing more."""
        if self._out is None and self._tap is None:
            return
        reply, error, backend = attempt.reply, attempt.error, attempt.backend
        ts_start, took = attempt.ts_start, attempt.ended - attempt.started
        start = rfc3339(ts_start)
        self._put(
            {
                "event": "call",
                "run_id": self.run_id,
                "job_id": attempt.job_id,
                "session": attempt.session,
                "turn": attempt.turn,
                "attempt": attempt.number,
                "deployment": backend.id,
                "provider": backend.provider,
                "model": backend.model,
                "response_model": None if reply is None else reply.response_model,
                "server_address": server_address,
                "binding": attempt.binding,
                "rebound_for": attempt.rebound_for,
                "outcome": "retry" if (decision := attempt.decision) == "failover" else decision,
                "http_status": reply.http_status if reply else error and error.status_code,
                "error_type": None if error is None else error.type,
                "retry_after_ms": None if error is None else _ms(error.retry_after),
                "backoff_ms": None if error is None else _ms(attempt.backoff_s),
                "queue_ms": round(attempt.queue_s * 1000.0, 3),
                "ts_start": start,
                "ts_end": rfc3339(ts_start + took) if took else start,  # a cached answer: 0
                "latency_ms": round(took * 1000.0, 3),
                "ttft_ms": reply and reply.ttft_ms and round(reply.ttft_ms, 3),
                "input_tokens": None if reply is None else reply.input_tokens,
                "output_tokens": None if reply is None else reply.output_tokens,
                "cached_input_tokens": None if reply is None else reply.cached_input_tokens,
                "usage_estimated": False if reply is None else reply.usage_estimated,
                "cost_usd": None if charged[0] is None else round(charged[0], 9),
                "cost_estimated": charged[1],
                "stream": attempt.stream,
                "endpoint": attempt.endpoint,
            },
        )

    def cached(
        self,
        job_id: str | int,
        session: str,
        backend: Backend,
        reply: Mapping[str, Any],
        stream: bool,
        endpoint: str,
        ts_start: float,
    ) -> None:
        """The ``call`` record of a call of turn 0 the response cache answered on ``backend``
        at ``ts_start`` (outcome ``cached``, zero latency, unpriced), ``reply`` the stored
        answer's fields (one absent is None): byte for byte what ``call`` writes of that
        attempt (``records.attempt.cached_attempt``)."""
        if self._out is None and self._tap is None:
            return
        kind = (backend.id, stream, endpoint)
        template = self._hits.get(kind, b"")
        if template == b"":
            template = self._hits[kind] = self._hit_template(backend, stream, endpoint)
        if template is None:  # a record whose fields came out of order: built the long way
            self.call(_hit(job_id, session, backend, reply, stream, endpoint, ts_start), None)
            return
        get, dumps = reply.get, orjson.dumps
        start = b'"%s"' % rfc3339(ts_start).encode()
        job = dumps(job_id)
        values = (
            job,
            job if session is job_id else dumps(session),
            dumps(get("response_model")),
            start,
            start,
            dumps(get("input_tokens")),
            dumps(get("output_tokens")),
            dumps(get("cached_input_tokens")),
            dumps(get("usage_estimated", False)),
        )
        self._put_line(template % values)

    def _hit_template(self, backend: Backend, stream: bool, endpoint: str) -> bytes | None:
        """``call``'s record of a cached answer on ``backend``, each of _HIT_FIELDS a ``%s``:
        written by ``call`` from an attempt whose varying values are marks; None when they do
        not come out once each, in _HIT_FIELDS' order."""
        marks = {name: f"\x00{i}\x00" for i, name in enumerate(_HIT_FIELDS)}
        lines: list[bytes] = []
        attempt = _hit(marks["job_id"], marks["session"], backend, marks, stream, endpoint, 0.0)
        TraceWriter(None, self.run_id, tap=lines.append).call(attempt, None)
        record, at = lines[0].replace(b"%", b"%%"), 0
        for name in _HIT_FIELDS:
            timed = name.startswith("ts_")
            mark = _EPOCH if timed else orjson.dumps(marks[name])
            at = record.find(mark, at)
            if at < 0 or (not timed and record.count(mark) != 1):
                return None
            record = record[:at] + b"%s" + record[at + len(mark) :]
            at += 2
        return record

    def backend(self, deployment: str, state: str, reason: str, message: str) -> None:
        """The ``backend`` record: ``deployment`` is now ``state`` (``down``) for ``reason``."""
        self._put(
            {
                "event": "backend",
                "run_id": self.run_id,
                "ts": rfc3339(self._clock()),
                "deployment": deployment,
                "state": state,
                "reason": reason,
                "message": message,
            }
        )

    def refused(self, api: str, endpoint: str, reason: str, status: int, message: str) -> None:
        """The ``refused`` record: a request in ``api`` to ``endpoint`` answered ``status``
        for ``reason`` before any backend was asked, the client told ``message``."""
        self._put(
            {
                "event": "refused",
                "run_id": self.run_id,
                "ts": rfc3339(self._clock()),
                "api": api,
                "endpoint": endpoint,
                "reason": reason,
                "status": status,
                "message": message,
            }
        )

    def run_end(
        self,
        jobs: Mapping[str, int],
        interrupted: bool,
        budget: Mapping[str, float] | None = None,
        halted: str | None = None,
    ) -> None:
        """The ``run_end`` record: jobs by outcome (ok, error, invalid, skipped; 0 if absent),
        the run's ``budget`` (``{"limit", "spent", "reserved_peak"}`` in USD; None without one),
        and why the run stopped itself before its last job (``halted``: ``budget``,
        ``no_backend``, ``output_closed``; None when it did not)."""
        self._put(
            {
                "event": "run_end",
                "run_id": self.run_id,
                "ts": rfc3339(self._clock()),
                "jobs": {k: int(jobs.get(k, 0)) for k in JOB_COUNTS},
                "interrupted": interrupted,
                "budget": None if budget is None else dict(budget),
                "halted": halted,
            }
        )

    def flush(self) -> None:
        if self._out is not None:
            self._out.flush()

    def close(self) -> None:
        if self._out is not None:
            self._out.close()

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
