"""A job's result line, built from how it ended: the one place the line's keys and
their order are written. ``results.ResultWriter`` then encodes the line in the chosen format.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rrcli.records.jobs import InvalidJob, Job

if TYPE_CHECKING:
    from rrcli.config.profile import Backend
    from rrcli.providers.base import Reply
    from rrcli.records.attempt import Attempt, CallOutcome

__all__ = ["cached_chat_line", "chat_line", "result_line"]


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
    else:
        assert attempt is not None and reply is not None
        if job.endpoint != "chat":
            return _endpoint_line(job, outcome, attempt, reply, keep_response)
        if not turns:
            return chat_line(
                job,
                attempt.backend,
                reply,
                attempts=attempt.number,
                latency_ms=attempt.latency_ms,
                cached=attempt.decision == "cached",
                session=outcome.session,
                keep_response=keep_response,
            )
        line = _session_line(job, outcome, attempt, reply)
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


def chat_line(
    job: Job,
    backend: Backend,
    answer: Reply | dict[str, Any],
    *,
    attempts: int,
    latency_ms: float,
    cached: bool,
    session: str | None,
    keep_response: bool,
) -> dict[str, Any]:
    """The ``ok`` line of a chat job that is one call (not a session), answered by ``backend``:
    the one builder of it, for a call the engine made and for an answer the response cache
    gave. ``answer``: a Reply, or a stored answer's fields (a dict; one absent is None), read
    alike (``_reader``)."""
    get = _reader(answer)
    line: dict[str, Any] = {
        "id": job.id,
        "status": "ok",
        "deployment": backend.id,
        "model": backend.model,
        "output": get("output"),
    }
    _answer(line, get)
    line["finish_reason"] = get("finish_reason")
    line["usage"] = _tokens(get)
    line["attempts"] = attempts
    line["latency_ms"] = latency_ms
    if cached:
        line["cached"] = True
    for name in ("request_id", "system_fingerprint"):
        if (value := get(name)) is not None:
            line[name] = value
    line["metadata"] = job.metadata or {}
    _details(line, get, keep_response)
    if session is not None:
        line["session"] = session
    return line


def cached_chat_line(
    job: Job, backend: Backend, stored: dict[str, Any], session: str | None, keep_response: bool
) -> dict[str, Any]:
    """``chat_line`` of a chat job that is not a session, answered by the response cache on
    ``backend`` from the stored answer's fields, without a Reply, an Attempt or a CallOutcome
    (a cached rerun writes nothing else, and building them cost more than the line): one
    attempt, zero latency, cached, as ``records.attempt.cached_attempt`` makes it.
    ``session``: the line's (``CallOutcome.session``)."""
    return chat_line(
        job,
        backend,
        stored,
        attempts=1,
        latency_ms=0.0,
        cached=True,
        session=session,
        keep_response=keep_response,
    )


def _session_line(job: Job, outcome: CallOutcome, attempt: Attempt, reply: Reply) -> dict[str, Any]:
    """The ``ok`` line of a chat session up to ``metadata``: the sums of its turns, its last
    turn's output, finish reason and deployment (each turn's own fields are in ``turns``)."""
    turns = outcome.turns
    line: dict[str, Any] = {
        "id": job.id,
        "status": "ok",
        "deployment": attempt.backend.id,
        "model": attempt.backend.model,
        "output": reply.output,
        "finish_reason": reply.finish_reason,
        "usage": _usage(turns),
        "attempts": _attempts(turns),
        "latency_ms": _latency_ms(turns),
    }
    if _cached(outcome):
        line["cached"] = True
    if reply.request_id is not None:
        line["request_id"] = reply.request_id
    line["metadata"] = job.metadata or {}
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
        _answer(line, _reader(reply))
        line["finish_reason"] = reply.finish_reason
        if job.endpoint == "responses":
            line["response_id"] = reply.response_id
        line["usage"] = _tokens(_reader(reply))
    line["attempts"] = outcome.attempts
    line["latency_ms"] = attempt.latency_ms
    if _cached(outcome):
        line["cached"] = True
    if reply.request_id is not None:
        line["request_id"] = reply.request_id
    line["metadata"] = job.metadata or {}
    _details(line, _reader(reply), keep_response)
    if outcome.session is not None:
        line["session"] = outcome.session
    return line


def _cached(outcome: CallOutcome) -> bool:
    """Whether the response cache gave the answer (no HTTP call was made): a call's, or every
    turn's of a session."""
    if outcome.turns:
        return all(_cached(turn) for turn in outcome.turns)
    return outcome.attempt is not None and outcome.attempt.decision == "cached"


def _reader(answer: Reply | dict[str, Any]) -> Callable[[str], Any]:
    """How a line reads an answer's fields by name: a Reply's attributes, a stored answer's
    keys (the cache keeps only the fields that are not None)."""
    return answer.get if type(answer) is dict else answer.__getattribute__


def _answer(entry: dict[str, Any], get: Callable[[str], Any]) -> None:
    """The answer's fields that sit next to its output: a refusal, the tool calls."""
    if (refusal := get("refusal")) is not None:
        entry["refusal"] = refusal
    if (tool_calls := get("tool_calls")) is not None:
        entry["tool_calls"] = tool_calls


def _details(entry: dict[str, Any], get: Callable[[str], Any], keep_response: bool) -> None:
    """The answer's fields that follow the line's metadata: reasoning, logprobs, every choice,
    with ``keep_response`` the body."""
    if reasoning := get("reasoning_content"):
        entry["reasoning_content"] = reasoning
    for name in ("logprobs", "choices"):
        if (value := get(name)) is not None:
            entry[name] = value
    if keep_response and (body := get("body")) is not None:
        entry["response"] = body


def _tokens(get: Callable[[str], Any]) -> dict[str, int | None]:
    """The ``usage`` of one answer: ``input_tokens, output_tokens, cached_input_tokens?,
    reasoning_tokens?, usage_estimated?``."""
    usage = {"input_tokens": get("input_tokens"), "output_tokens": get("output_tokens")}
    for name in ("cached_input_tokens", "reasoning_tokens"):
        if (count := get(name)) is not None:
            usage[name] = count
    if get("usage_estimated"):
        usage["usage_estimated"] = True
    return usage


def _usage(turns: tuple[CallOutcome, ...]) -> dict[str, int]:
    """A session's usage: its turns' summed (a count the server did not give counts 0; the
    cached and reasoning counts only when some turn reported them)."""
    usage = {"input_tokens": 0, "output_tokens": 0}
    for turn in turns:
        for name, value in _tokens(_reader(turn.reply)).items():  # type: ignore[arg-type]
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
    get = _reader(reply)
    entry: dict[str, Any] = {"output": reply.output}
    _answer(entry, get)
    entry["deployment"] = attempt.backend.id
    entry["usage"] = _tokens(get)
    if _cached(turn):
        entry["cached"] = True
    if reply.system_fingerprint is not None:
        entry["system_fingerprint"] = reply.system_fingerprint
    _details(entry, get, keep_response)
    return entry
