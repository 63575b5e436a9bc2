"""The trace file (SPEC §5): the contract between ``rrcli run`` and ``rrcli stats``.

Append-only, one JSON object a line, every line with ``event`` and ``run_id``: one ``run`` record
when the run starts (the pool, never its credentials or headers), one ``call`` record per HTTP
attempt, one ``run_end`` record. ``call`` is on the hot path: keyword arguments straight into a
dict literal in the SPEC's field order, one ``orjson.dumps``, timestamps formatted from a cache of
the current second. All times given are epoch seconds; the ``*_ms`` fields are milliseconds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from rrcli import __version__
from rrcli.providers.registry import server_address
from rrcli.records._jsonl import LineFile
from rrcli.records.traceschema import CALL_FIELDS, JOB_COUNTS, rfc3339

if TYPE_CHECKING:
    from rrcli.config.profile import Backend, Profile

__all__ = ["CALL_FIELDS", "TraceWriter", "new_run_id", "rfc3339"]

_NEWLINE = orjson.OPT_APPEND_NEWLINE


def new_run_id(clock: Callable[[], float] = time.time) -> str:
    """A fresh run id, sortable by start time: ``20261129T213129Z-3f9a2c1b``."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
    return f"{stamp}-{os.urandom(4).hex()}"


def _backend_record(backend: Backend) -> dict[str, Any]:
    price = backend.price
    return {
        "id": backend.id,
        "provider": backend.provider,
        "model": backend.model,
        "host": server_address(backend.provider, backend.base_url),
        "max_concurrency": backend.max_concurrency,
        "price": None if price is None else {"input": price.input, "output": price.output},
    }


class TraceWriter:
    """Writes one run's trace records to ``path`` (appended; None writes nothing).

    ``clock`` (epoch seconds) stamps the ``run`` and ``run_end`` records; call records carry the
    times they are given.
    """

    __slots__ = ("_clock", "_out", "run_id")

    def __init__(
        self, path: Path | None, run_id: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self.run_id = run_id
        self._clock = clock
        self._out = None if path is None else LineFile(path, append=True, what="traces")

    def _put(self, record: dict[str, Any]) -> None:
        if self._out is not None:
            self._out.write(orjson.dumps(record, option=_NEWLINE))

    def run(self, profile: Profile) -> None:
        """The ``run`` record: the pool as routed (never credentials, headers or params)."""
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
            }
        )

    def call(
        self,
        *,
        job_id: str | int,
        session: str | None = None,
        turn: int = 0,
        attempt: int = 1,
        deployment: str,
        provider: str,
        model: str,
        response_model: str | None = None,
        server_address: str | None = None,
        binding: str | None = None,
        outcome: str,
        http_status: int | None = None,
        error_type: str | None = None,
        retry_after_ms: float | None = None,
        backoff_ms: float | None = None,
        queue_ms: float | None = None,
        ts_start: float,
        ts_end: float,
        latency_ms: float | None = None,
        ttft_ms: float | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        stream: bool = False,
    ) -> None:
        """One ``call`` record (one HTTP attempt). ``ts_start``/``ts_end`` are epoch seconds;
        ``latency_ms`` defaults to their difference. ``outcome``: ok | retry | error."""
        if self._out is None:
            return
        if latency_ms is None:
            latency_ms = round((ts_end - ts_start) * 1000.0, 3)
        self._out.write(
            orjson.dumps(
                {
                    "event": "call",
                    "run_id": self.run_id,
                    "job_id": job_id,
                    "session": session,
                    "turn": turn,
                    "attempt": attempt,
                    "deployment": deployment,
                    "provider": provider,
                    "model": model,
                    "response_model": response_model,
                    "server_address": server_address,
                    "binding": binding,
                    "outcome": outcome,
                    "http_status": http_status,
                    "error_type": error_type,
                    "retry_after_ms": retry_after_ms,
                    "backoff_ms": backoff_ms,
                    "queue_ms": queue_ms,
                    "ts_start": rfc3339(ts_start),
                    "ts_end": rfc3339(ts_end),
                    "latency_ms": latency_ms,
                    "ttft_ms": ttft_ms,
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "stream": stream,
                },
                option=_NEWLINE,
            )
        )

    def run_end(self, jobs: Mapping[str, int], interrupted: bool) -> None:
        """The ``run_end`` record: jobs by outcome (ok, error, invalid, skipped; 0 if absent)."""
        self._put(
            {
                "event": "run_end",
                "run_id": self.run_id,
                "ts": rfc3339(self._clock()),
                "jobs": {k: int(jobs.get(k, 0)) for k in JOB_COUNTS},
                "interrupted": interrupted,
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
