"""``rrcli run --otlp``: the run's records sent on as OpenTelemetry spans while it goes on.

The trace writer hands each encoded record to the span process (otel/live.py) and the results
sink tells it when a job ends (its parent span can go) and when the outputs are flushed; the run
never waits for the collector: at the end the spans sent and dropped are logged, a warning when
any did not arrive.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from rrcli.logs import get_logger

if TYPE_CHECKING:
    from rrcli.otel.live import SpanProcess
    from rrcli.records.results import ResultSink

__all__ = ["JobEnds", "close_sender", "open_sender", "otlp_url"]

log = get_logger("rrcli")


def otlp_url(option: str | None, environ: Mapping[str, str]) -> str | None:
    """The collector's traces URL for ``--otlp`` (None: not asked). UsageError (exit 2, nothing
    sent) for a bad URL or a missing SDK."""
    if option is None:
        return None
    from rrcli.otel.endpoint import require_sdk, traces_url

    url = traces_url(option, environ)
    require_sdk()
    return url


def open_sender(url: str | None, run_id: str, stack: ExitStack) -> SpanProcess | None:
    """The span process of the run, None without a URL; should the run fail before it is
    closed, ``stack`` ends it."""
    if url is None:
        return None
    from rrcli.otel.live import SpanProcess

    process = SpanProcess(url, run_id)
    stack.callback(process.abandon)
    return process


class JobEnds:
    """A results sink that also tells the sender each job that ended, and flushes it with the
    outputs."""

    __slots__ = ("_done", "_flush", "_inner")

    def __init__(self, inner: ResultSink, sender: SpanProcess) -> None:
        self._inner, self._done, self._flush = inner, sender.job_done, sender.flush

    def write(self, result: dict[str, Any], *, body: dict[str, Any] | None = None) -> None:
        self._inner.write(result, body=body)
        self._done(result.get("id"))

    def flush(self) -> None:
        self._inner.flush()
        self._flush()


async def close_sender(sender: SpanProcess | None) -> None:
    """End the span process (without blocking the loop) and log what reached the collector."""
    if sender is None:
        return
    report = await asyncio.to_thread(sender.close)
    if report.dropped:
        log.warning(
            "rrcli.otlp_dropped",
            dropped=report.dropped,
            sent=report.sent,
            endpoint=report.endpoint,
            error=report.error,
        )
    else:
        log.info("rrcli.otlp_sent", sent=report.sent, endpoint=report.endpoint)
