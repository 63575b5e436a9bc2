"""A cached rerun's hot path: a chat job whose answer the response cache read ahead is finished
where the answer was read, never handed to a worker.

On the engine's own path a hit goes through the job feed, a worker, the route rules, the
cache's lookup, a Reply, an Attempt and a CallOutcome before its two lines are written; when
every job is a hit, that machinery is most of the run (a rerun of 100,000 jobs ran at 19,000
jobs a CPU second). Here a hit costs its route rules (a job its rules narrow goes the long way),
its call record filled into a template (``TraceWriter.cached``) and its result line built from
the stored answer's fields by the builder the engine's path uses (``cached_chat_line``, over
``chat_line``), which stays for every other job (sessions, other endpoints, a run being stopped).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from rrcli.config.profile import Backend
from rrcli.engine.engine import Engine
from rrcli.engine.summary import RunSummary
from rrcli.providers.base import Call
from rrcli.records.jobs import InvalidJob, Job
from rrcli.records.result_line import cached_chat_line
from rrcli.records.results import ResultSink
from rrcli.records.trace import TraceWriter
from rrcli.routing.control import RunControl
from rrcli.routing.serving import RouteRules

__all__ = ["CachedHits", "read_ahead"]


def read_ahead(
    engine: Engine, control: RunControl, jobs: Iterator[Job | InvalidJob]
) -> Iterator[Any]:
    """``jobs`` looked up in the run's cache by chunks as they are pulled (one SELECT a chunk),
    a plain chat job found answered finished there (``ResponseCache.ahead``)."""
    if engine.cache is None:
        return jobs
    forget = engine.forget if engine.session_binding else None
    hits = CachedHits(
        engine.traces,
        engine.results,
        engine.summary,
        control,
        engine.rules,
        engine.keep_response,
        forget,
    )
    return engine.cache.ahead(jobs, engine.keyed, hits)


class CachedHits:
    """``ResponseCache.ahead``'s ``finish``: writes a plain chat job's lines from its stored
    answer and counts it ok, as ``Engine.finish`` would; ``forget`` is the router's, under
    session binding (a job naming no session leaves no binding behind)."""

    __slots__ = ("_control", "_forget", "_keep", "_results", "_rules", "_summary", "_traces")

    def __init__(
        self,
        traces: TraceWriter,
        results: ResultSink,
        summary: RunSummary,
        control: RunControl,
        rules: RouteRules,
        keep_response: bool,
        forget: Callable[[str], None] | None,
    ) -> None:
        self._traces, self._results, self._summary = traces, results, summary
        self._control, self._rules = control, rules
        self._keep, self._forget = keep_response, forget

    def __call__(self, job: Job, call: Call, backend: Backend, reply: dict[str, Any]) -> bool:
        """Finish ``job`` with ``reply`` on ``backend``; False, doing nothing, for a job that
        is not one chat call every backend may take, or when the run is stopping."""
        if job.endpoint != "chat" or self._control.stopping:
            return False
        excluded, refusal = self._rules.check(job)
        if excluded or refusal is not None:
            return False
        self._traces.cached(job.id, job.session, backend, reply, call.stream, "chat", time.time())
        forget = self._forget
        line = cached_chat_line(
            job, backend, reply, None if forget is None else job.session, self._keep
        )
        self._results.write(line, body=reply.get("body"))
        self._summary.ok += 1
        if forget is not None and job.session is job.key:
            forget(job.session)
        return True
