"""A job's result line, built from how it ended: the one place the line's keys and
their order are written. ``results.ResultWriter`` then encodes the line in the chosen format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rrcli.records.jobs import InvalidJob, Job

if TYPE_CHECKING:
    from rrcli.config.profile import Backend
    from rrcli.providers.base import Reply
    from rrcli.records.attempt import Attempt, CallOutcome

__all__ = ["cached_chat_line", "result_line"]


def result_line(outcome: CallOutcome, keep_response: bool = False) -> dict[str, Any]:
    """The result line of one job, from how it ended. The key order is part of the format:
    ``id, status, deployment, model, output, refusal?, tool_calls?, finish_reason, usage,
    attempts, latency_ms, cached?, request_id?, system_fingerprint?, metadata, reasoning_content?,
    logprobs?, choices?, session?, turns?, response?`` for ``ok``; ``id, status, deployment,
    attempts, error, metadata, session?, turns?`` for ``error``; ``id, status, error,
    duplicate_of?`` for ``invalid``. ``usage`` is ``input_tokens, output_tokens,
    cached_input_tokens?, reasoning_tokens?, usage_estimated?`` (true when the server reported
    none and the counts are rrcli's estimate). A key marked ``?`` is written only when the
    provider said it (so a plain text answer's line has none of them): the answer's own fields
    first, next to ``output``; the bulky ones (logprobs, every choice, the whole response body)
    last, after ``metadata``. ``response`` (``keep_response``) is the body as received, or the
    body a stream folded into. A session's line sums its turns' attempts, latency and usage; its
    output, finish reason and deployment are its last turn's; each turn's own fields (tool calls,
    reasoning...) are in its ``turns`` entry. A job for another endpoint than chat names it after
    ``model`` (``deployment`` for an error) and carries that endpoint's answer
    (``_endpoint_line``)."""
    job = outcome.job
    if type(job) is InvalidJob:
        return _invalid_line(job)
    attempt, reply, turns = outcome.attempt, outcome.reply, outcome.turns
    if outcome.status == "error":
        line = _error_line(outcome, job)
    elif job.endpoint != "chat":
        assert attempt is not None and reply is not None
        return _endpoint_line(job, outcome, attempt, reply, keep_response)
    else:
        assert attempt is not None and reply is not None
        line = _chat_line(job, outcome, attempt, reply, keep_response)
    if outcome.session is not None:
        line["session"] = outcome.session
    if turns:
        line["turns"] = [_turn(t, keep_response) for t in turns]
    return line


def _invalid_line(job: InvalidJob) -> dict[str, Any]:
    """The ``invalid`` line of a job that could not be read or sent."""
    line: dict[str, Any] = {
        "id": job.id,
        "status": "invalid",
        "error": {"type": "invalid_job", "message": job.message},
    }
    if job.duplicate_of is not None:
        line["duplicate_of"] = job.duplicate_of
    return line


def _chat_line(
    job: Job, outcome: CallOutcome, attempt: Attempt, reply: Reply, keep_response: bool
) -> dict[str, Any]:
    """The ``ok`` line of a chat job, up to ``metadata`` and the bulky fields after it; a
    session's sums come from its turns."""
    turns = outcome.turns
    line: dict[str, Any] = {
        "id": job.id,
        "status": "ok",
        "deployment": attempt.backend.id,
        "model": attempt.backend.model,
        "output": reply.output,
    }
    if not turns:
        _answer(line, reply)
    line["finish_reason"] = reply.finish_reason
    line["usage"] = _usage(turns) if turns else _tokens(reply)
    line["attempts"] = _attempts(turns) if turns else attempt.number  # outcome.attempts
    line["latency_ms"] = _latency_ms(turns) if turns else attempt.latency_ms
    if _cached(outcome) if turns else attempt.decision == "cached":
        line["cached"] = True
    if reply.request_id is not None:
        line["request_id"] = reply.request_id
    if reply.system_fingerprint is not None and not turns:
        line["system_fingerprint"] = reply.system_fingerprint
    line["metadata"] = job.metadata or {}
    if not turns:
        _details(line, reply, keep_response)
    return line


def cached_chat_line(
    job: Job, backend: Backend, reply: Mapping[str, Any], session: str | None, keep_response: bool
) -> dict[str, Any]:
    """``_chat_line``'s line of a chat job that is not a session, answered by the response
    cache on ``backend``, from the stored answer's fields (``reply``; one absent is None)
    without a Reply, an Attempt or a CallOutcome: a cached rerun writes nothing else, and
    building them cost more than the line. ``session``: the line's (``CallOutcome.session``)."""
    get = reply.get
    line: dict[str, Any] = {
        "id": job.id,
        "status": "ok",
        "deployment": backend.id,
        "model": backend.model,
        "output": reply["output"],
    }
    if (refusal := get("refusal")) is not None:
        line["refusal"] = refusal
    if (tool_calls := get("tool_calls")) is not None:
        line["tool_calls"] = tool_calls
    line["finish_reason"] = get("finish_reason")
    usage = {"input_tokens": get("input_tokens"), "output_tokens": get("output_tokens")}
    for name in ("cached_input_tokens", "reasoning_tokens"):
        if (count := get(name)) is not None:
            usage[name] = count
    if get("usage_estimated"):
        usage["usage_estimated"] = True
    line["usage"], line["attempts"], line["latency_ms"], line["cached"] = usage, 1, 0.0, True
    for name in ("request_id", "system_fingerprint"):
        if (value := get(name)) is not None:
            line[name] = value
    line["metadata"] = job.metadata or {}
    if reasoning := get("reasoning_content"):
        line["reasoning_content"] = reasoning
    for name in ("logprobs", "choices"):
        if (value := get(name)) is not None:
            line[name] = value
    if keep_response and (body := get("body")) is not None:
        line["response"] = body
    if session is not None:
        line["session"] = session
    return line


def _error_line(outcome: CallOutcome, job: Job) -> dict[str, Any]:
    """The ``error`` line of a job (a call that found no backend has no deployment)."""
    attempt = outcome.attempt
    line = {
        "id": job.id,
        "status": "error",
        "deployment": None if attempt is None else attempt.backend.id,
    }
    if job.endpoint != "chat":
        line["endpoint"] = job.endpoint
    line["attempts"] = outcome.attempts
    line["error"] = outcome.error
    line["metadata"] = job.metadata or {}
    return line


def _endpoint_line(
    job: Job, outcome: CallOutcome, attempt: Attempt, reply: Reply, keep_response: bool
) -> dict[str, Any]:
    """The ``ok`` line of a job for another endpoint: ``id, status, deployment, model,
    endpoint``, then its answer: ``embeddings`` (one vector per input, in input order) or
    ``moderations`` (one result per input), else ``output, refusal?, tool_calls?,
    finish_reason, response_id?`` (a Responses answer's id); then ``usage`` (embeddings and
    moderations: input tokens only), ``attempts, latency_ms, cached?, request_id?, metadata``, the
    details as a chat line's (a completion's several ``choices`` among them) and ``session?``."""
    line: dict[str, Any] = {
        "id": job.id,
        "status": "ok",
        "deployment": attempt.backend.id,
        "model": attempt.backend.model,
        "endpoint": job.endpoint,
    }
    if job.endpoint in ("embeddings", "moderations"):
        line[job.endpoint] = reply.embeddings if job.endpoint == "embeddings" else reply.moderations
        line["usage"] = {"input_tokens": reply.input_tokens}
    else:
        line["output"] = reply.output
        _answer(line, reply)
        line["finish_reason"] = reply.finish_reason
        if job.endpoint == "responses":
            line["response_id"] = reply.response_id
        line["usage"] = _tokens(reply)
    line["attempts"] = outcome.attempts
    line["latency_ms"] = attempt.latency_ms
    if _cached(outcome):
        line["cached"] = True
    if reply.request_id is not None:
        line["request_id"] = reply.request_id
    line["metadata"] = job.metadata or {}
    _details(line, reply, keep_response)
    if outcome.session is not None:
        line["session"] = outcome.session
    return line


def _cached(outcome: CallOutcome) -> bool:
    """Whether the response cache gave the answer (no HTTP call was made): a call's, or every
    turn's of a session."""
    if outcome.turns:
        return all(_cached(turn) for turn in outcome.turns)
    return outcome.attempt is not None and outcome.attempt.decision == "cached"


def _answer(entry: dict[str, Any], reply: Reply) -> None:
    """The answer's fields that sit next to its output: a refusal, the tool calls."""
    if reply.refusal is not None:
        entry["refusal"] = reply.refusal
    if reply.tool_calls is not None:
        entry["tool_calls"] = reply.tool_calls


def _details(entry: dict[str, Any], reply: Reply, keep_response: bool) -> None:
    """The answer's fields that follow the line's metadata: reasoning, logprobs, every choice,
    with ``keep_response`` the body."""
    if reply.reasoning_content:
        entry["reasoning_content"] = reply.reasoning_content
    if reply.logprobs is not None:
        entry["logprobs"] = reply.logprobs
    if reply.choices is not None:
        entry["choices"] = reply.choices
    if keep_response and reply.body is not None:
        entry["response"] = reply.body


def _tokens(reply: Reply) -> dict[str, int | None]:
    usage = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
    if reply.cached_input_tokens is not None:
        usage["cached_input_tokens"] = reply.cached_input_tokens
    if reply.reasoning_tokens is not None:
        usage["reasoning_tokens"] = reply.reasoning_tokens
    if reply.usage_estimated:
        usage["usage_estimated"] = True
    return usage


def _usage(turns: tuple[CallOutcome, ...]) -> dict[str, int]:
    """A session's usage: its turns' summed (a count the server did not give counts 0; the
    cached and reasoning counts only when some turn reported them)."""
    usage = {"input_tokens": 0, "output_tokens": 0}
    for turn in turns:
        for name, value in _tokens(turn.reply).items():  # type: ignore[arg-type]
            if name != "usage_estimated":
                usage[name] = usage.get(name, 0) + (value or 0)
    if any(turn.reply is not None and turn.reply.usage_estimated for turn in turns):
        usage["usage_estimated"] = True
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


def _turn(turn: CallOutcome, keep_response: bool) -> dict[str, Any]:
    """A session turn's entry in its line's ``turns``: ``output, refusal?, tool_calls?,
    deployment, usage, cached?, system_fingerprint?, reasoning_content?, logprobs?, choices?,
    response?``."""
    reply, attempt = turn.reply, turn.attempt
    assert reply is not None and attempt is not None
    entry: dict[str, Any] = {"output": reply.output}
    _answer(entry, reply)
    entry["deployment"] = attempt.backend.id
    entry["usage"] = _tokens(reply)
    if _cached(turn):
        entry["cached"] = True
    if reply.system_fingerprint is not None:
        entry["system_fingerprint"] = reply.system_fingerprint
    _details(entry, reply, keep_response)
    return entry
