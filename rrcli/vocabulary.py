"""The words the two chat APIs use for the same things, and the one table between them.

A result's ``finish_reason`` is in OpenAI's words where Anthropic's stop reason has an exact
equal (``end_turn`` → ``stop``, ``max_tokens`` → ``length``, ``tool_use`` → ``tool_calls``) and
in Anthropic's own words where it has none (``stop_sequence``, ``refusal``, ``pause_turn``): the
anthropic adapter maps with ``finish_reason_from_anthropic``. The batch output formats turn a
result's finish reason and error into each API's words with the other functions here.

A tool call is written in OpenAI's shape whichever API (or endpoint) made it (``tool_call``), its
arguments a JSON object's text (``tool_arguments``).

Pure data and functions importing nothing of rrcli's: the results writer, the providers and the
simulator read it without loading the HTTP client.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "anthropic_error_status",
    "anthropic_error_type",
    "anthropic_stop_reason",
    "finish_reason_from_anthropic",
    "openai_error_type",
    "openai_finish_reason",
    "tool_arguments",
    "tool_call",
]

#: Anthropic stop reason → OpenAI finish reason, where the two mean the same thing
_SAME = {"end_turn": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
#: any finish reason a result carries → the nearest OpenAI one (OpenAI's own pass unchanged)
_TO_OPENAI = {**_SAME, "stop_sequence": "stop", "refusal": "content_filter", "pause_turn": "stop"}
#: any finish reason a result carries → the nearest Anthropic one (Anthropic's pass unchanged)
_TO_ANTHROPIC = {
    **{openai: anthropic for anthropic, openai in _SAME.items()},
    "function_call": "tool_use",
    "content_filter": "refusal",
}
#: HTTP status → Anthropic error type (a Message Batches ``errored`` result)
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: HTTP status → OpenAI error type (an error body in Batch output); others are server_error
_OPENAI_ERRORS = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "invalid_request_error",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}


def finish_reason_from_anthropic(stop_reason: str | None) -> str | None:
    """The result's finish reason for an Anthropic ``stop_reason`` (None stays None)."""
    return _SAME.get(stop_reason, stop_reason) if stop_reason else None


def openai_finish_reason(reason: str) -> str:
    """A result's finish reason in OpenAI's words (``refusal`` → ``content_filter``...)."""
    return _TO_OPENAI.get(reason, reason)


def anthropic_stop_reason(reason: str) -> str:
    """A result's finish reason in Anthropic's words (``stop`` → ``end_turn``...)."""
    return _TO_ANTHROPIC.get(reason, reason)


def openai_error_type(status_code: int | None) -> str:
    """The OpenAI error type for a failure the server answered with ``status_code``."""
    return _OPENAI_ERRORS.get(status_code or 0, "server_error")


def anthropic_error_status(error_type: str) -> int:
    """The HTTP status an Anthropic error type stands for (a batch's ``errored`` result has
    only its type); 500 for ``api_error`` and any type not known."""
    for status, kind in _ANTHROPIC_ERRORS.items():
        if kind == error_type:
            return status
    return 500


def anthropic_error_type(error_type: str | None, status_code: int | None) -> str:
    """The Anthropic error type for a result's error (its rrcli ``type`` and ``status_code``):
    an Anthropic type kept as it is, a timeout or an invalid job in Anthropic's words, else the
    type of its status, else ``api_error``."""
    kind = error_type or ""
    if kind in _ANTHROPIC_ERRORS.values() or kind == "api_error":
        return kind
    if kind == "invalid_job":
        return "invalid_request_error"
    if kind == "timeout":
        return "timeout_error"
    if kind == "insufficient_quota":  # an account out of money: Anthropic's billing error
        return "billing_error"
    return _ANTHROPIC_ERRORS.get(status_code or 0, "api_error")


def tool_call(call_id: object, name: object, arguments: str) -> dict[str, Any]:
    """A tool call as results carry it: ``arguments`` is a JSON object's text."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def tool_arguments(value: object) -> str | None:
    """A function call's arguments as a JSON object's text, None when they are not one (empty
    or absent arguments are ``{}``, an object is written as compact JSON text)."""
    if isinstance(value, str):
        if not value.strip():
            return "{}"
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(parsed, dict) else None
    if isinstance(value, dict):
        return orjson.dumps(value).decode()
    return "{}" if value is None else None
