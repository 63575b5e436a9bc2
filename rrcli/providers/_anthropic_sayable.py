"""What an Anthropic Messages request can say of an OpenAI-shaped one: ``EXPRESSIBLE``, for
each chat completions field the Messages API lacks or restricts, whether a value can be said
there; ``unsayable``, where the messages themselves say what it cannot. ``translate`` asks both
before a job is routed to an Anthropic backend, so ``_to_anthropic`` never meets such a job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["EXPRESSIBLE", "schema_format", "unsayable"]


def _always(value: object) -> bool:
    return True


def _function_tools(tools: object) -> bool:
    """OpenAI's function tools (or Anthropic's own); not its custom (grammar) tools, nor a
    ``strict`` function (Anthropic's tools have no guarantee that the input fits the schema)."""
    return isinstance(tools, list) and all(
        isinstance(t, dict)
        and (t.get("type") == "function" or "custom" not in t)
        and not _strict(t.get("function"))
        for t in tools
    )


def _strict(spec: object) -> bool:
    return isinstance(spec, dict) and bool(spec.get("strict"))


def schema_format(value: object) -> bool:
    """text, or a json_schema one that is not ``strict`` (the answer tool's input is not held
    to the schema)."""
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "json_schema":
        spec = value.get("json_schema")
        return isinstance(spec, dict) and not _strict(spec)
    return kind == "text"


def _stop_sayable(value: object) -> bool:
    """Anthropic refuses a stop sequence that is empty or only whitespace (``"\n"``)."""
    stops = [value] if isinstance(value, str) else value
    return isinstance(stops, list) and all(isinstance(s, str) and s.strip() for s in stops)


#: chat completions field → whether the Messages API can express its value. A json_object
#: response_format is refused: its nearest form, a forced tool with an open schema, is often
#: called with an empty input, so the job would get ``{}`` in silence; a json_schema one can be.
EXPRESSIBLE: dict[str, Callable[[Any], bool]] = {
    "n": lambda v: v == 1,
    "logprobs": lambda v: v is False,
    "top_logprobs": lambda v: v == 0,
    "frequency_penalty": lambda v: v == 0,
    "presence_penalty": lambda v: v == 0,
    "logit_bias": lambda v: v == {},
    "store": lambda v: v is False,
    "modalities": lambda v: v == ["text"],
    "seed": lambda v: False,
    "temperature": lambda v: isinstance(v, int | float) and v <= 1,  # Anthropic's range is 0-1
    "response_format": schema_format,
    "tools": _function_tools,
    "metadata": lambda v: isinstance(v, dict) and v.keys() <= {"user_id"},
    "service_tier": lambda v: v in ("auto", "default"),
    "stop": _stop_sayable,
    **dict.fromkeys(
        [
            "max_tokens",
            "max_completion_tokens",
            "top_p",
            "tool_choice",
            "parallel_tool_calls",
            "user",
            "safety_identifier",
        ],
        _always,
    ),
}


def unsayable(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """Where OpenAI-shaped ``messages`` say what a Messages request cannot: a participant's
    ``name``, a user message with no text (Anthropic refuses empty content, and whitespace-only
    text)."""
    found = []
    for i, message in enumerate(messages):
        if message.get("name") is not None:
            found.append(f"messages[{i}].name")
        if message.get("role") == "user" and _blank(message.get("content")):
            found.append(f"messages[{i}].content")
    return tuple(found)


def _blank(content: Any) -> bool:
    """Content that is empty or only whitespace, or has a text part that is."""
    if isinstance(content, str):
        return not content.strip()
    if isinstance(content, list):
        return not content or any(
            isinstance(p, dict) and p.get("type") == "text" and not str(p.get("text")).strip()
            for p in content
        )
    return content is None
