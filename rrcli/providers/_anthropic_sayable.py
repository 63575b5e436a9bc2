"""What an Anthropic Messages request can say of an OpenAI-shaped one: ``EXPRESSIBLE``, for
each chat completions field the Messages API lacks or restricts, whether a value can be said
there; ``unsayable``, where the messages themselves say what it cannot. ``translate`` asks both
before a job is routed to an Anthropic backend, so ``_to_anthropic`` never meets such a job.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

__all__ = [
    "EXPRESSIBLE",
    "file_source",
    "image_source",
    "schema_format",
    "unsayable",
]

_DATA_URL = re.compile(r"data:([^;,]+);base64,(.*)", re.DOTALL)
#: the files a document block takes as base64 data
_DOCUMENTS = frozenset({"application/pdf"})


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
    text), a part with no Anthropic block (audio, a file that is no base64 PDF, an image whose
    data: URL is not base64), a ``function_call``, a tool call that is no function call (a
    custom tool's). A job that says one of these goes to a backend whose API has it."""
    found = []
    for i, message in enumerate(messages):
        if message.get("name") is not None:
            found.append(f"messages[{i}].name")
        if message.get("role") == "user" and _blank(message.get("content")):
            found.append(f"messages[{i}].content")
        if message.get("function_call") is not None:
            found.append(f"messages[{i}].function_call")
        content = message.get("content")
        for j, part in enumerate(content if isinstance(content, list) else ()):
            if not _part_sayable(part):
                found.append(f"messages[{i}].content[{j}]")
        calls = message.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            found.append(f"messages[{i}].tool_calls")
        for j, call in enumerate(calls if isinstance(calls, list) else ()):
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                found.append(f"messages[{i}].tool_calls[{j}]")
    return tuple(found)


def _part_sayable(part: Any) -> bool:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "image_url":
        return image_source(part) is not None
    if kind == "file":
        return file_source(part) is not None
    return kind != "input_audio"


def image_source(part: dict[str, Any]) -> dict[str, Any] | None:
    """An image_url part's image as an image block's source; None for no URL or a data: URL
    that is not base64."""
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        return None
    if not url.startswith("data:"):
        return {"type": "url", "url": url}
    match = _DATA_URL.fullmatch(url)
    return None if match is None else {"type": "base64", "media_type": match[1], "data": match[2]}


def file_source(part: dict[str, Any]) -> dict[str, Any] | None:
    """A file part's file as a document block's source: a PDF given as base64 data (a file id
    names a file of OpenAI's, which Anthropic cannot read); None otherwise."""
    file = part.get("file")
    data = file.get("file_data") if isinstance(file, dict) else None
    match = _DATA_URL.fullmatch(data) if isinstance(data, str) else None
    if match is None or match[1] not in _DOCUMENTS:
        return None
    return {"type": "base64", "media_type": match[1], "data": match[2]}


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
