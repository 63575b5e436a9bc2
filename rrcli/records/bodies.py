"""The response bodies of the batch output formats and of ``rrcli serve``: a whole
``chat.completion`` (openai-batch) or ``message`` (anthropic-batch) for each successful job,
whichever API served it, streamed or not.

A body of the format's own API (the provider's, as received or as its stream folded) is written
as it is when it has every field the official SDKs require, and otherwise completed: a missing
``id``, ``created``, ``model``, a choice's ``index`` or ``role``, a usage total are filled in,
nothing present is changed. A job served by the other API (or the simulated provider) gets a body
built from its reply (``providers.base.Reply``, or a result line read as one: ``LineAnswer``),
which holds everything the provider said in OpenAI's shape: text, tool calls (as ``tool_use``
blocks for Anthropic), refusal, reasoning (a ``thinking`` block), logprobs, every choice, cached
and reasoning token counts, the system fingerprint. Finish reasons are put in each API's words
by ``rrcli.vocabulary``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from rrcli.vocabulary import anthropic_stop_reason, openai_finish_reason

__all__ = ["Answer", "LineAnswer", "anthropic_body", "openai_body"]

_OPENAI_HEAD = (("id", str), ("created", int), ("model", str))


class Answer(Protocol):
    """What a body is built from: a ``Reply``'s fields (``body`` the provider's own answer)."""

    @property
    def output(self) -> str: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def input_tokens(self) -> int | None: ...
    @property
    def output_tokens(self) -> int | None: ...
    @property
    def cached_input_tokens(self) -> int | None: ...
    @property
    def reasoning_tokens(self) -> int | None: ...
    @property
    def reasoning_content(self) -> str | None: ...
    @property
    def tool_calls(self) -> list[dict[str, Any]] | None: ...
    @property
    def refusal(self) -> str | None: ...
    @property
    def logprobs(self) -> Any: ...
    @property
    def choices(self) -> list[dict[str, Any]] | None: ...
    @property
    def system_fingerprint(self) -> str | None: ...
    @property
    def body(self) -> dict[str, Any] | None: ...


class LineAnswer:
    """An ok result line read as an ``Answer`` (the batch formats write from the line; a
    session's line has its summed usage and its last turn's answer), ``body`` the provider's."""

    __slots__ = (
        "body",
        "cached_input_tokens",
        "choices",
        "finish_reason",
        "input_tokens",
        "logprobs",
        "output",
        "output_tokens",
        "reasoning_content",
        "reasoning_tokens",
        "refusal",
        "system_fingerprint",
        "tool_calls",
    )

    def __init__(self, line: dict[str, Any], body: Any) -> None:
        usage = line.get("usage") or {}
        self.output = line.get("output")
        self.finish_reason = line.get("finish_reason")
        self.input_tokens = usage.get("input_tokens")
        self.output_tokens = usage.get("output_tokens")
        self.cached_input_tokens = usage.get("cached_input_tokens")
        self.reasoning_tokens = usage.get("reasoning_tokens")
        self.reasoning_content = line.get("reasoning_content")
        self.tool_calls = line.get("tool_calls")
        self.refusal = line.get("refusal")
        self.logprobs = line.get("logprobs")
        self.choices = line.get("choices")
        self.system_fingerprint = line.get("system_fingerprint")
        self.body = body


def openai_body(reply: Answer, model: str | None, clock: Callable[[], float]) -> dict[str, Any]:
    """The ``chat.completion`` of an ok call that answered ``reply`` on ``model``; ``clock``
    (epoch seconds) dates a body that has no ``created``."""
    body = reply.body
    if type(body) is not dict or "choices" not in body:
        return _chat_completion(reply, model, clock)
    if _whole_openai(body):
        return body
    body = dict(body)
    if type(body.get("id")) is not str:
        body["id"] = _fresh_id("chatcmpl-")
    body["object"] = "chat.completion"
    if type(body.get("created")) is not int:
        body["created"] = int(clock())
    if type(body.get("model")) is not str:
        body["model"] = model or ""
    body["choices"] = [_whole_choice(c, i, reply) for i, c in enumerate(body["choices"] or ())]
    if body.get("usage") is not None:
        body["usage"] = _whole_usage(body["usage"], reply)
    return body


def anthropic_body(reply: Answer, model: str | None) -> dict[str, Any]:
    """The ``message`` of an ok call that answered ``reply`` on ``model``."""
    body = reply.body
    if type(body) is not dict or body.get("type") != "message":
        return _message(reply, model)
    usage = body.get("usage")
    head = type(body.get("id")) is str and type(body.get("model")) is str
    counted = type(usage) is dict and all(
        type(usage.get(name)) is int for name in ("input_tokens", "output_tokens")
    )
    if head and counted and body.get("role") == "assistant" and type(body.get("content")) is list:
        return body
    body = dict(body)
    if type(body.get("id")) is not str:
        body["id"] = _fresh_id("msg_")
    body["role"] = "assistant"
    if type(body.get("model")) is not str:
        body["model"] = model or ""
    if type(body.get("content")) is not list:
        body["content"] = []
    if not counted:
        body["usage"] = {
            **(usage if type(usage) is dict else {}),
            "input_tokens": reply.input_tokens or 0,
            "output_tokens": reply.output_tokens or 0,
        }
    return body


def _fresh_id(prefix: str) -> str:
    return prefix + os.urandom(12).hex()


def _whole_openai(body: dict[str, Any]) -> bool:
    """Whether a chat.completion body has every field the SDK's type requires."""
    if body.get("object") != "chat.completion":
        return False
    if not all(type(body.get(name)) is kind for name, kind in _OPENAI_HEAD):
        return False
    choices = body["choices"]
    if type(choices) is not list:
        return False
    for choice in choices:
        if type(choice) is not dict or type(choice.get("index")) is not int:
            return False
        message = choice.get("message")
        if type(message) is not dict or message.get("role") != "assistant":
            return False
        if choice.get("finish_reason") is None:
            return False
    usage = body.get("usage")
    return usage is None or (
        type(usage) is dict
        and all(type(usage.get(n)) is int for n in ("prompt_tokens", "completion_tokens"))
        and type(usage.get("total_tokens")) is int
    )


def _whole_choice(choice: Any, index: int, reply: Answer) -> dict[str, Any]:
    choice = dict(choice) if type(choice) is dict else {}
    if type(choice.get("index")) is not int:
        choice["index"] = index
    message = choice.get("message")
    choice["message"] = {**(message if type(message) is dict else {}), "role": "assistant"}
    if choice.get("finish_reason") is None:
        choice["finish_reason"] = openai_finish_reason(reply.finish_reason or "stop")
    return choice


def _whole_usage(usage: Any, reply: Answer) -> dict[str, Any]:
    usage = dict(usage) if type(usage) is dict else {}
    if type(usage.get("prompt_tokens")) is not int:
        usage["prompt_tokens"] = reply.input_tokens or 0
    if type(usage.get("completion_tokens")) is not int:
        usage["completion_tokens"] = reply.output_tokens or 0
    if type(usage.get("total_tokens")) is not int:
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    return usage


def _chat_completion(
    reply: Answer, model: str | None, clock: Callable[[], float]
) -> dict[str, Any]:
    """An OpenAI ``chat.completion`` object carrying everything the reply says."""
    prompt_tokens = reply.input_tokens or 0
    completion_tokens = reply.output_tokens or 0
    counts: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if reply.cached_input_tokens is not None:
        counts["prompt_tokens_details"] = {"cached_tokens": reply.cached_input_tokens}
    if reply.reasoning_tokens is not None:
        counts["completion_tokens_details"] = {"reasoning_tokens": reply.reasoning_tokens}
    choices = reply.choices or [_first_choice(reply)]
    body = {
        "id": _fresh_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(clock()),
        "model": model,
        "choices": [_openai_choice(i, c) for i, c in enumerate(choices)],
        "usage": counts,
    }
    if reply.system_fingerprint is not None:
        body["system_fingerprint"] = reply.system_fingerprint
    return body


def _first_choice(reply: Answer) -> dict[str, Any]:
    """The reply's answer as one of its ``choices`` is written (a result line's fields)."""
    return {
        "output": reply.output,
        "tool_calls": reply.tool_calls,
        "reasoning_content": reply.reasoning_content or None,
        "refusal": reply.refusal,
        "logprobs": reply.logprobs,
        "finish_reason": reply.finish_reason,
    }


def _openai_choice(index: int, answer: dict[str, Any]) -> dict[str, Any]:
    """One of a reply's ``choices`` (a result line's fields) as a chat.completion choice."""
    calls = answer.get("tool_calls")
    output = answer.get("output")
    message: dict[str, Any] = {
        "role": "assistant",
        "content": None if calls and not output else output,
    }
    if answer.get("reasoning_content") is not None:
        message["reasoning_content"] = answer["reasoning_content"]
    message["refusal"] = answer.get("refusal")
    if calls:
        message["tool_calls"] = calls
    return {
        "index": index,
        "message": message,
        "logprobs": answer.get("logprobs"),
        "finish_reason": openai_finish_reason(answer.get("finish_reason") or "stop"),
    }


def _message(reply: Answer, model: str | None) -> dict[str, Any]:
    """An Anthropic ``message`` object carrying everything the reply says (the first choice's
    answer when there were several: a message has one)."""
    cached = reply.cached_input_tokens
    counts: dict[str, Any] = {
        "input_tokens": (reply.input_tokens or 0) - (cached or 0),
        "output_tokens": reply.output_tokens or 0,
    }
    if cached is not None:  # Anthropic counts cache reads apart from input_tokens
        counts["cache_read_input_tokens"] = cached
    return {
        "id": _fresh_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _blocks(reply),
        "stop_reason": anthropic_stop_reason(reply.finish_reason or "end_turn"),
        "stop_sequence": None,
        "usage": counts,
    }


def _blocks(reply: Answer) -> list[dict[str, Any]]:
    """The content blocks of a reply: thinking, text, then a tool_use block for each function
    tool call (its arguments as the input object)."""
    blocks: list[dict[str, Any]] = []
    if reply.reasoning_content:
        blocks.append({"type": "thinking", "thinking": reply.reasoning_content, "signature": ""})
    calls = [c for c in reply.tool_calls or () if c.get("type") == "function"]
    if reply.output or not calls:
        blocks.append({"type": "text", "text": reply.output or ""})
    for call in calls:
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id"),
                "name": function.get("name"),
                "input": _input(function.get("arguments")),
            }
        )
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    """A tool call's arguments (a JSON object's text) as a tool_use block's input object."""
    try:
        value = orjson.loads(arguments or "{}")
    except (orjson.JSONDecodeError, TypeError):
        return {}
    return value if type(value) is dict else {}
