"""Call records as OpenTelemetry spans: one span per call, a parent span per job.

A span is made from the record alone, so ``rrcli run --otlp`` (records as they are written) and
``rrcli export`` (records read back from the file) send the same spans: a job's trace id and
its parent span's id are hashes of the run id and the job id, a call's span id a hash of those
and the call's place among its job's calls. Span times are the record's ``ts_start`` and
``ts_end``; a job's span runs from its first call's start to its last call's end and is made
when the job ends (``job_done``), its run ends (``run_end``) or the records do (``finish``).

Attributes follow the OpenTelemetry GenAI semantic conventions where one exists (README,
"OpenTelemetry"), and ``rrcli.*`` otherwise; a null field sets no attribute.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.status import Status, StatusCode

from rrcli import __version__
from rrcli.records.traceschema import parse_rfc3339

__all__ = ["JOB_SPAN", "OPERATIONS", "SpanMaker", "job_key", "span_ids"]

#: a provider whose name in OpenTelemetry's GenAI conventions is not rrcli's
_PROVIDER_NAMES = {"gemini": "gcp.gemini"}

#: gen_ai.operation.name of each endpoint (the conventions' names; moderations has none)
OPERATIONS = {
    "chat": "chat",
    "responses": "chat",
    "completions": "text_completion",
    "embeddings": "embeddings",
    "moderations": "moderations",
}
JOB_SPAN = "rrcli.job"  # the name of a job's parent span
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)
#: record field → attribute, set when the field is not null
_OPTIONAL = (
    ("response_model", "gen_ai.response.model"),
    ("input_tokens", "gen_ai.usage.input_tokens"),
    ("output_tokens", "gen_ai.usage.output_tokens"),
    ("error_type", "error.type"),
    ("http_status", "http.response.status_code"),
    ("queue_ms", "rrcli.queue_ms"),
    ("ttft_ms", "rrcli.ttft_ms"),
    ("session", "rrcli.session"),
)


def _hash(size: int, *parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=size).digest()
    return int.from_bytes(digest, "big") or 1  # an id of 0 is invalid


def job_key(job_id: object) -> str:
    """The job id as JSON text: the id 7 and the id "7" are two jobs."""
    return orjson.dumps(job_id).decode()


def span_ids(run_id: str, job_id: object, call: int | None = None) -> tuple[int, int]:
    """(trace id, span id) of a job's parent span, or of its ``call``-th call (from 0)."""
    key = job_key(job_id)
    trace_id = _hash(16, run_id, key)
    if call is None:
        return trace_id, _hash(8, run_id, key, "job")
    return trace_id, _hash(8, run_id, key, "call", call)


_seconds: dict[str, int] = {}  # "YYYY-MM-DDTHH:MM:SS" → epoch seconds


def _ns(ts: str) -> int:
    """An RFC 3339 timestamp as epoch nanoseconds, to the millisecond; ValueError if it is not
    one. The canonical form the trace writer writes is read from a cache of its second."""
    if len(ts) == 24 and ts[19] == "." and ts[23] == "Z" and ts[20:23].isdigit():
        second = _seconds.get(ts[:19])
        if second is None:
            if len(_seconds) > 4096:
                _seconds.clear()
            parsed = parse_rfc3339(ts[:19] + "Z")
            if parsed is None:
                raise ValueError(f"not a timestamp: {ts!r}")
            second = _seconds[ts[:19]] = int(parsed)
        return (second * 1000 + int(ts[20:23])) * 1_000_000
    seconds = parse_rfc3339(ts) if isinstance(ts, str) else None
    if seconds is None:
        raise ValueError(f"not a timestamp: {ts!r}")
    return round(seconds * 1000) * 1_000_000


def _server(address: str | None) -> dict[str, Any]:
    """server.address and server.port of a trace's ``host[:port]`` (the port when it names one)."""
    if not address:
        return {}
    host, sep, port = address.rpartition(":")
    if not sep or host.endswith(":") or (address.startswith("[") and not host.endswith("]")):
        return {"server.address": address.strip("[]")}
    if not port.isdigit():
        return {"server.address": address}
    return {"server.address": host.strip("[]"), "server.port": int(port)}


@dataclass(slots=True, kw_only=True)
class _Job:
    """A job whose calls have been seen: what its parent span needs."""

    run_id: str
    job_id: Any
    trace_id: int
    span_id: int
    start: int
    end: int
    calls: int
    outcome: str
    model: str
    operation: str


class SpanMaker:
    """Turns trace records into spans; keeps the jobs whose parent span is not made yet."""

    def __init__(self, resource: Resource | None = None) -> None:
        # service.name is rrcli unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise
        ours = Resource.create({"service.name": "rrcli", "service.version": __version__})
        self.resource = resource or ours.merge(OTELResourceDetector().detect())
        self.scope = InstrumentationScope("rrcli", __version__)
        self._jobs: dict[tuple[str, str], _Job] = {}

    def parents_due(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Parent spans still to come: the open jobs' and those of jobs first seen in the
        call records ``records`` (not fed yet)."""
        keys = {(r["run_id"], job_key(r["job_id"])) for r in records if r.get("event") == "call"}
        return len(keys | self._jobs.keys())

    def feed(self, record: Mapping[str, Any]) -> list[ReadableSpan]:
        """The spans a record completes: a call's own span; at a run's end, its jobs' spans.
        Raises KeyError, TypeError or ValueError for a call record that is not one."""
        event = record.get("event")
        if event == "call":
            return [self.call(record)]
        if event == "run_end":
            return self.run_end(record["run_id"])
        return []

    def call(self, record: Mapping[str, Any]) -> ReadableSpan:
        """The span of one call record, its job's span extended to cover it."""
        run_id, job_id = record["run_id"], record["job_id"]
        start, end = _ns(record["ts_start"]), _ns(record["ts_end"])
        if end < start:
            raise ValueError("ts_end before ts_start")
        model, outcome = record["model"], record["outcome"]
        operation = OPERATIONS.get(record.get("endpoint") or "chat", record.get("endpoint"))
        job = self._job(run_id, job_id, start, end, model, operation)
        trace_id, parent = job.trace_id, job.span_id
        span_id = _hash(8, run_id, job_key(job_id), "call", job.calls)
        job.calls += 1
        job.outcome, job.model, job.end = outcome, model, max(job.end, end)
        attributes = {
            "gen_ai.operation.name": operation,
            "gen_ai.provider.name": _provider_name(record["provider"]),
            "gen_ai.request.model": model,
            **_server(record.get("server_address")),
            "rrcli.job_id": str(job_id),
            "rrcli.deployment": record["deployment"],
            "rrcli.attempt": record["attempt"],
            "rrcli.outcome": outcome,
        }
        if record.get("turn"):
            attributes["rrcli.turn"] = record["turn"]
        for field, name in _OPTIONAL:
            value = record.get(field)
            if value is not None:
                attributes[name] = value
        failed = outcome in ("retry", "error")
        status = Status(StatusCode.ERROR, record.get("error_type")) if failed else Status()
        return self._span(
            f"{operation} {model}",
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent,
            attributes=attributes,
            start=start,
            end=end,
            kind=SpanKind.CLIENT,
            status=status,
        )

    def _job(
        self, run_id: str, job_id: Any, start: int, end: int, model: str, operation: str
    ) -> _Job:
        key = (run_id, job_key(job_id))
        job = self._jobs.get(key)
        if job is None:
            trace_id, span_id = span_ids(run_id, job_id)
            job = _Job(
                run_id=run_id,
                job_id=job_id,
                trace_id=trace_id,
                span_id=span_id,
                start=start,
                end=end,
                calls=0,
                outcome="",
                model=model,
                operation=operation,
            )
            self._jobs[key] = job
        job.start = min(job.start, start)
        return job

    def job_done(self, run_id: str, job_id: Any) -> ReadableSpan | None:
        """The parent span of a job that has ended (None when none of its calls was seen)."""
        job = self._jobs.pop((run_id, job_key(job_id)), None)
        return None if job is None else self._job_span(job)

    def run_end(self, run_id: str) -> list[ReadableSpan]:
        """The parent spans of every job of ``run_id`` not ended yet."""
        keys = [key for key in self._jobs if key[0] == run_id]
        return [self._job_span(self._jobs.pop(key)) for key in keys]

    def finish(self) -> list[ReadableSpan]:
        """The parent spans of every job still open (records that stop without a run_end)."""
        jobs, self._jobs = self._jobs, {}
        return [self._job_span(job) for job in jobs.values()]

    def _job_span(self, job: _Job) -> ReadableSpan:
        attributes = {
            "gen_ai.operation.name": job.operation,
            "gen_ai.request.model": job.model,
            "rrcli.run_id": job.run_id,
            "rrcli.job_id": str(job.job_id),
            "rrcli.outcome": job.outcome,
            "rrcli.calls": job.calls,
        }
        status = Status(StatusCode.ERROR) if job.outcome == "error" else Status()
        return self._span(
            JOB_SPAN,
            trace_id=job.trace_id,
            span_id=job.span_id,
            parent_id=None,
            attributes=attributes,
            start=job.start,
            end=job.end,
            kind=SpanKind.INTERNAL,
            status=status,
        )

    def _span(
        self,
        name: str,
        *,
        trace_id: int,
        span_id: int,
        parent_id: int | None,
        attributes: dict[str, Any],
        start: int,
        end: int,
        kind: SpanKind,
        status: Status,
    ) -> ReadableSpan:
        """A finished span, the child of span ``parent_id`` of its trace when one is given."""
        parent = None if parent_id is None else SpanContext(trace_id, parent_id, False, _SAMPLED)
        return ReadableSpan(
            name=name,
            context=SpanContext(trace_id, span_id, False, _SAMPLED),
            parent=parent,
            resource=self.resource,
            attributes=attributes,
            kind=kind,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=self.scope,
        )


def spans_of(records: Iterable[Mapping[str, Any]]) -> list[ReadableSpan]:
    """Every span of a sequence of records (tests and small exports)."""
    maker = SpanMaker()
    spans = [span for record in records for span in maker.feed(record)]
    return spans + maker.finish()


def _provider_name(provider: str) -> str:
    """A provider's ``gen_ai.provider.name`` (OpenTelemetry's GenAI conventions: ``gcp.gemini``
    for Gemini's API)."""
    return _PROVIDER_NAMES.get(provider, provider)
