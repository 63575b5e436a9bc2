"""A job's result line (SPEC §4), built from how it ended: the one place the line's keys and
their order are written. ``results.ResultWriter`` then encodes the line in the chosen format.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rrcli.records.jobs import InvalidJob

if TYPE_CHECKING:
    from rrcli.providers.base import Reply
    from rrcli.runtime.attempt import CallOutcome

__all__ = ["result_line"]


def result_line(outcome: CallOutcome) -> dict[str, Any]:
    """The SPEC §4 line of one job, from how it ended. The key order is part of the format:
    ``id, status, deployment, model, output, finish_reason, usage, attempts, latency_ms,
    request_id?, metadata, reasoning_content?, session?, turns?`` for ``ok``; ``id, status,
    deployment, attempts, error, metadata, session?, turns?`` for ``error``; ``id, status, error,
    duplicate_of?`` for ``invalid``. A session's line sums its turns' attempts, latency and usage;
    its output, finish reason and deployment are its last turn's."""
    job = outcome.job
    if type(job) is InvalidJob:
        line: dict[str, Any] = {
            "id": job.id,
            "status": "invalid",
            "error": {"type": "invalid_job", "message": job.message},
        }
        if job.duplicate_of is not None:
            line["duplicate_of"] = job.duplicate_of
        return line
    attempt, reply, turns = outcome.attempt, outcome.reply, outcome.turns
    if outcome.status == "error":
        line = {
            "id": job.id,
            "status": "error",
            "deployment": None if attempt is None else attempt.backend.id,
            "attempts": outcome.attempts,
            "error": outcome.error,
            "metadata": job.metadata or {},
        }
    else:
        assert attempt is not None and reply is not None
        line = {
            "id": job.id,
            "status": "ok",
            "deployment": attempt.backend.id,
            "model": attempt.backend.model,
            "output": reply.output,
            "finish_reason": reply.finish_reason,
            "usage": _usage(turns) if turns else _tokens(reply),
            "attempts": _attempts(turns) if turns else outcome.attempts,
            "latency_ms": _latency_ms(turns) if turns else attempt.latency_ms,
        }
        if reply.request_id is not None:
            line["request_id"] = reply.request_id
        line["metadata"] = job.metadata or {}
        if reply.reasoning_content and not turns:
            line["reasoning_content"] = reply.reasoning_content
    if outcome.session is not None:
        line["session"] = outcome.session
    if turns:
        line["turns"] = [_turn(t) for t in turns]
    return line


def _tokens(reply: Reply) -> dict[str, int | None]:
    return {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}


def _usage(turns: tuple[CallOutcome, ...]) -> dict[str, int]:
    """A session's usage: its turns' summed (a count the server did not give counts 0)."""
    usage = {"input_tokens": 0, "output_tokens": 0}
    for turn in turns:
        assert turn.reply is not None
        usage["input_tokens"] += turn.reply.input_tokens or 0
        usage["output_tokens"] += turn.reply.output_tokens or 0
    return usage


def _attempts(turns: tuple[CallOutcome, ...]) -> int:
    """A session's attempts: its turns' summed."""
    return sum(turn.attempts for turn in turns)


def _latency_ms(turns: tuple[CallOutcome, ...]) -> float:
    """A session's latency: the sum of its turns' (each its last attempt's)."""
    total = 0.0
    for turn in turns:
        assert turn.attempt is not None
        total += turn.attempt.latency_ms
    return round(total, 3)


def _turn(turn: CallOutcome) -> dict[str, Any]:
    """A session turn's entry in its line's ``turns``."""
    reply, attempt = turn.reply, turn.attempt
    assert reply is not None and attempt is not None
    entry: dict[str, Any] = {
        "output": reply.output,
        "deployment": attempt.backend.id,
        "usage": _tokens(reply),
    }
    if reply.reasoning_content:
        entry["reasoning_content"] = reply.reasoning_content
    return entry
