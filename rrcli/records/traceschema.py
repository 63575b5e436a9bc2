"""The trace schema: each record's fields in order, the call record's types, and the
one timestamp format.

The trace is the contract between ``rrcli run`` (``records.trace`` writes it), ``rrcli stats``
(``stats.columns`` reads it) and the tests' generator of synthetic traces. All three take the
fields from here, so a field is added, renamed or moved in one place, and a test holds the
writer's keys, the reader's fields and the generator's keys to this list.

Timestamps are RFC 3339 UTC with milliseconds on disk and epoch seconds (float) in Python:
``rfc3339`` formats them, ``parse_rfc3339`` reads them back.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

__all__ = [
    "BACKEND_EVENT_FIELDS",
    "BACKEND_FIELDS",
    "BACKEND_STATES",
    "CALL",
    "CALL_FIELDS",
    "CALL_TYPES",
    "EVENTS",
    "JOB_COUNTS",
    "MAX_CALL_COST_USD",
    "OUTCOMES",
    "PROFILE_FIELDS",
    "REFUSED_FIELDS",
    "RESULT_STATUSES",
    "RUN_END_FIELDS",
    "RUN_FIELDS",
    "parse_rfc3339",
    "results_field",
    "rfc3339",
    "same_results",
]

Outcome = Literal["ok", "retry", "error", "cached", "cancelled"]
#: ok; retry (failed, another attempt follows); error (failed, final); cached (answered from the
#: response cache: no HTTP call, zero latency, never counted against caps, limits or budgets);
#: cancelled (the call was dropped while it was sent, its ``error_type`` saying why, such as
#: ``client_disconnected``: no answer, charged as a call whose usage is unknown)
OUTCOMES: tuple[str, ...] = Outcome.__args__

#: the call record, one per HTTP attempt: (field, type) in the format's order. ``turn`` counts
#: from 0, ``attempt`` from 1 within a turn; ``ts_*`` are RFC 3339 text; ``*_ms`` milliseconds.
CALL: tuple[tuple[str, Any], ...] = (
    ("event", Literal["call"]),
    ("run_id", str),
    ("job_id", str | int),
    ("session", str | None),
    ("turn", int),
    ("attempt", int),
    ("deployment", str),
    ("provider", str),
    ("model", str),
    ("response_model", str | None),
    ("server_address", str | None),
    ("binding", Literal["new", "kept", "rebound"] | None),
    ("rebound_for", str | None),  # why a session bound again: an error type, or ``removed``
    ("outcome", Outcome),
    ("http_status", int | None),
    ("error_type", str | None),
    ("retry_after_ms", float | None),
    ("backoff_ms", float | None),
    ("queue_ms", float | None),
    ("ts_start", str),
    ("ts_end", str),
    ("latency_ms", float),
    ("ttft_ms", float | None),
    ("input_tokens", int | None),
    ("output_tokens", int | None),
    ("cached_input_tokens", int | None),  # input read from the provider's prompt cache
    ("usage_estimated", bool),  # the server reported no usage: the counts are rrcli's estimate
    ("cost_usd", float | None),  # what the attempt was charged (None: unpriced)
    ("cost_estimated", bool),  # the charge stands for a usage rrcli does not know
    ("stream", bool),
    ("endpoint", str),  # chat | embeddings | responses | completions | moderations
)
CALL_FIELDS: tuple[str, ...] = tuple(name for name, _ in CALL)
#: a ``cost_usd`` at or past this (or negative) is no call's charge: whoever reads the record
#: (``--resume``, ``stats``) prices its tokens instead
MAX_CALL_COST_USD = 1e6
CALL_TYPES: dict[str, Any] = dict(CALL)

#: the run record, once when a run starts: the pool as routed, never credentials or headers;
#: ``queue`` is ``{"name", "worker"}`` for a worker of a shared queue, else null; ``results``
#: the results file the run writes (``results_field``), else null
RUN_FIELDS = ("event", "run_id", "ts", "rrcli_version", "profile", "queue", "results")
PROFILE_FIELDS = ("name", "strategy", "binding", "backends")
BACKEND_FIELDS = ("id", "provider", "model", "host", "max_concurrency", "price")
PRICE_FIELDS = ("input", "output", "cached_input", "cache_write")  # the last two when set
#: the run_end record, once when a run ends; ``jobs`` counts jobs by these outcomes: a result
#: line's status (RESULT_STATUSES), or skipped (it already had an ok line); ``budget`` is
#: ``{"limit", "spent", "reserved_peak"}`` (USD) of a run with a budget, else null; ``halted``
#: why the run stopped itself (``budget``, ``no_backend``, ``output_closed``), else null
RUN_END_FIELDS = ("event", "run_id", "ts", "jobs", "interrupted", "budget", "halted")
RESULT_STATUSES = ("ok", "error", "invalid")
JOB_COUNTS = (*RESULT_STATUSES, "skipped")
#: the backend record, when a backend changes state during a run: ``down`` when an
#: answer says it can serve no call (``reason``: the error type, such as ``http_401`` or
#: ``insufficient_quota``; ``message``: the server's words and what to check), or, where
#: backends heal, its connections were refused past a call's retries (``connect_error``);
#: ``up`` when a probe brought it back (``reason``: ``probe_ok``)
BACKEND_EVENT_FIELDS = ("event", "run_id", "ts", "deployment", "state", "reason", "message")
BACKEND_STATES = ("down", "up")
#: the refused record, written by ``rrcli serve`` the first time it refuses a request for a
#: ``reason`` (``unauthorized``, ``too_large``, ``invalid_request``, ``unknown_model``...:
#: ``serve.metrics.REFUSALS``) before any backend was asked; later ones are only counted, in
#: /metrics. ``api`` and ``endpoint`` the request's, ``status`` the answer's, ``message`` what
#: the client was told (cut to 300 characters)
REFUSED_FIELDS = ("event", "run_id", "ts", "api", "endpoint", "reason", "status", "message")
#: every event a trace holds, in the order a run writes them first
EVENTS = ("run", "call", "backend", "refused", "run_end")

_seconds: dict[int, str] = {}  # epoch second → "YYYY-MM-DDTHH:MM:SS"
# ".000Z" ... ".999Z": a lookup and a concatenation instead of formatting (550 → 380 ns a call)
_MILLIS = tuple(f".{ms:03d}Z" for ms in range(1000))


def rfc3339(ts: float) -> str:
    """Epoch seconds as RFC 3339 UTC with milliseconds: ``2026-11-29T21:31:29.123Z``.

    The instant is read to the microsecond as ``datetime.fromtimestamp`` reads it (so a whole
    millisecond given as ``ms / 1000`` keeps its digits despite the float), then truncated to
    the millisecond. On the hot path (two a call record): the text of recent seconds is cached.
    """
    sec = int(ts // 1)
    # int(x + 0.5) where round(x) would do: they differ only on a tie, where round keeps the
    # even count of microseconds and this the odd one above it, never a whole millisecond
    micros = int((ts - sec) * 1e6 + 0.5)
    if micros >= 1_000_000:
        sec, micros = sec + 1, 0
    prefix = _seconds.get(sec)
    if prefix is None:
        if len(_seconds) > 256:
            _seconds.clear()
        prefix = _seconds[sec] = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return prefix + _MILLIS[micros // 1000]


def parse_rfc3339(text: str) -> float | None:
    """An RFC 3339 timestamp (any form ``datetime.fromisoformat`` reads; UTC when it names no
    offset) as epoch seconds; None when it is not one."""
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def results_field(results: Path, traces: Path | None) -> str:
    """The run record's ``results``: the results file's path relative to the trace file's
    folder (so the two can move together), or as given when there is no trace file."""
    if traces is None:
        return str(results)
    return os.path.relpath(os.path.abspath(results), os.path.dirname(os.path.abspath(traces)))


def same_results(field: object, traces: Path, results: Path) -> bool:
    """Whether a run record's ``results`` (``field``, read from ``traces``) names ``results``."""
    if type(field) is not str:
        return False
    named = os.path.join(os.path.dirname(os.path.abspath(traces)), field)
    return os.path.realpath(named) == os.path.realpath(results)
