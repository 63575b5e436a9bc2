"""Which jobs a results format can hold whole, checked before anything is sent.

An ``anthropic-batch`` result line holds one ``message`` of text a job: an embeddings or
moderations answer has no place in it, nor do the choices past the first of a job asking for
``n`` > 1. Rather than writing such a job's line with its answer dropped, ``refuse_unfit``
names every such line of a jobs file before the run starts (exit 2); jobs that cannot be read
ahead (standard input, ``--prompt``) are made invalid one by one by ``unfit_invalid``, with the
same words. ``rrcli`` and ``openai-batch`` keep every endpoint's body and every choice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from rrcli.errors import UsageError
from rrcli.records.jobs import InvalidJob, Job, iter_jobs, open_jobs_file

__all__ = ["refuse_unfit", "unfit", "unfit_invalid"]

_NAMED = 5  # lines named in the refusal, at most
_KEEPERS = "--format openai-batch or rrcli keeps every answer whole"


def unfit(fmt: str, job: Job) -> str | None:
    """What of ``job``'s answer ``fmt`` would drop, or None when it holds all of it."""
    if fmt != "anthropic-batch":
        return None
    if job.endpoint in ("embeddings", "moderations"):
        return f"the {job.endpoint} answer"
    n = job.params.get("n")
    if type(n) is int and n > 1:
        return f"choices 2 to {n} of n = {n}"
    return None


def refuse_unfit(path: Path, fmt: str) -> None:
    """UsageError naming the lines of the jobs file ``path`` whose answers ``fmt`` would drop
    (reads the file only for a format that can drop something)."""
    if fmt != "anthropic-batch":
        return
    found: list[str] = []
    count = 0
    with open_jobs_file(path) as stream:
        for job in iter_jobs(stream, str(path)):
            what = unfit(fmt, job) if isinstance(job, Job) else None
            if what is not None:
                count += 1
                if len(found) < _NAMED:
                    found.append(f"line {job.line} ({what})")
    if count:
        more = f" and {count - _NAMED:,} more" if count > _NAMED else ""
        raise UsageError(
            f"{path}: --format {fmt} holds one message of text a job and would drop "
            f"{', '.join(found)}{more} — {_KEEPERS}, or run those jobs apart"
        )


def unfit_invalid(jobs: Iterator[Job | InvalidJob], fmt: str) -> Iterator[Job | InvalidJob]:
    """``jobs`` with each one whose answer ``fmt`` would drop made invalid, saying why: ``jobs``
    themselves for a format that drops nothing (no generator between)."""
    if fmt != "anthropic-batch":
        return jobs
    return _made_invalid(jobs, fmt)


def _made_invalid(jobs: Iterator[Job | InvalidJob], fmt: str) -> Iterator[Job | InvalidJob]:
    for job in jobs:
        what = unfit(fmt, job) if isinstance(job, Job) else None
        if what is None:
            yield job
            continue
        message = f"line {job.line}: --format {fmt} would drop {what} — {_KEEPERS}"
        yield InvalidJob(job.id, job.line, message)
