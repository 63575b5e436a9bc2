"""Failed jobs in the log: the first of each kind in full, the rest counted.

Why it exists: a run where one backend answers 500 a hundred times would print a hundred
warnings, each wrapping over two lines above the live display and burying it. So the first
failure of each error type is logged as ``rrcli.job_failed`` (saying that more of its kind are
counted, not logged), the others only counted in the run's summary (the live display shows the
counts); ``-v`` logs every one. When the run ends, one ``rrcli.jobs_failed`` line per kind that
repeated gives its count. Every failure has its result line either way.
"""

from __future__ import annotations

from collections import Counter

from rrcli.logs import get_logger
from rrcli.records.attempt import CallOutcome

__all__ = ["log_failure", "log_repeated"]

log = get_logger("rrcli")


def log_failure(outcome: CallOutcome, failures: Counter[str], *, every: bool) -> None:
    """Count a failed job in ``failures`` by error type; log it if it is the first of its kind
    (or ``every``: -v)."""
    attempt, error = outcome.attempt, outcome.error or {}
    kind = str(error.get("type"))
    failures[kind] += 1
    if failures[kind] > 1 and not every:
        return
    more = {} if every else {"more": "further failures of this type are counted, not logged"}
    log.warning(
        "rrcli.job_failed",
        job_id=outcome.job.id,
        deployment=None if attempt is None else attempt.backend.id,
        attempts=outcome.attempts,
        error_type=error.get("type"),
        message=error.get("message"),
        **more,
    )


def log_repeated(failures: Counter[str]) -> None:
    """At the run's end: one line per error type that failed more than one job."""
    for kind, jobs in failures.most_common():
        if jobs > 1:
            log.warning("rrcli.jobs_failed", error_type=kind, jobs=jobs)
