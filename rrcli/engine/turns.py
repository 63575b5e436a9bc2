"""A job's turns as the API sees them: a reply written back into the history as its assistant
message, the two parts of a turn Anthropic paused (``pause_turn``) joined into one reply, the call
that goes on with such a turn, and the bound on how often one turn may be continued (a server that
pauses forever would otherwise draw calls, and a request body growing with each, without end).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from rrcli.errors import ProviderError
from rrcli.providers.base import Call, Reply
from rrcli.tokens import estimate_call_tokens

__all__ = [
    "assistant_message",
    "bounded",
    "join_paused",
    "paused_call",
    "too_many_continuations",
]


def assistant_message(reply: Reply) -> dict[str, Any]:
    """The reply as the history's assistant message (``Call.messages``' OpenAI shape: its
    refusal and tool calls included; each adapter writes it in its API's words)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.output}
    if reply.refusal:
        message["refusal"] = reply.refusal
    if reply.tool_calls:
        message["tool_calls"] = reply.tool_calls
    if reply.reasoning_content:
        message["reasoning_content"] = reply.reasoning_content
    return message


def join_paused(first: Reply, rest: Reply) -> Reply:
    """A turn continued after Anthropic's pause_turn: one output, the usage of both calls."""

    def add(a: int | None, b: int | None) -> int | None:
        return None if a is None and b is None else (a or 0) + (b or 0)

    body = rest.body
    if first.body is not None and rest.body is not None:  # batch formats write the body
        body = _join_bodies(first.body, rest.body)
    reasoning = rest.reasoning_content
    if first.reasoning_content:
        reasoning = first.reasoning_content + (rest.reasoning_content or "")
    calls = rest.tool_calls
    if first.tool_calls:
        calls = first.tool_calls + (rest.tool_calls or [])
    return replace(
        rest,
        output=first.output + rest.output,
        input_tokens=add(first.input_tokens, rest.input_tokens),
        output_tokens=add(first.output_tokens, rest.output_tokens),
        cached_input_tokens=add(first.cached_input_tokens, rest.cached_input_tokens),
        cache_write_tokens=add(first.cache_write_tokens, rest.cache_write_tokens),
        usage_estimated=first.usage_estimated or rest.usage_estimated,
        reasoning_content=reasoning,
        ttft_ms=first.ttft_ms if rest.ttft_ms is None else rest.ttft_ms,
        body=body,
        tool_calls=calls,
    )


def _join_bodies(first: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
    """One Anthropic message of a paused turn's two: both parts' content blocks, usage summed."""
    joined = dict(rest)
    if isinstance(first.get("content"), list) and isinstance(rest.get("content"), list):
        joined["content"] = first["content"] + rest["content"]
    a, b = first.get("usage"), rest.get("usage")
    if isinstance(a, dict) and isinstance(b, dict):
        joined["usage"] = {
            k: a.get(k, 0) + v if isinstance(v, int) and isinstance(a.get(k, 0), int) else v
            for k, v in b.items()
        }
    return joined


def bounded(
    reply: Reply | None, error: ProviderError | None, continued: int, limit: int
) -> tuple[Reply | None, ProviderError | None, int]:
    """(reply, error, continuations so far) after a call: a paused reply is one continuation
    more, and past ``limit`` (``[retry] max_continuations``) the error that ends the turn
    instead of the reply."""
    if reply is None or reply.continuation is None:
        return reply, error, continued
    continued += 1
    if continued <= limit:
        return reply, None, continued
    return None, too_many_continuations(limit, reply.http_status), continued


def too_many_continuations(limit: int, status: int | None) -> ProviderError:
    """The error of a turn paused once more after ``limit`` continuations: final, since the
    same server would pause the same turn again."""
    return ProviderError(
        f"the server paused the turn (pause_turn) again after {limit} continuations, the most "
        "`max_continuations` allows — raise [retry] max_continuations in the profile if the "
        "turn needs more",
        type="too_many_continuations",
        transient=False,
        status_code=status,
    )


def paused_call(call: Call, reply: Reply, job_input: Any) -> tuple[Call, int]:
    """The call that goes on with an Anthropic paused turn (``reply.continuation`` appended),
    and its estimate, for the input it has grown to."""
    call = replace(call, messages=[*call.messages, reply.continuation], input_tokens=None)
    return call, estimate_call_tokens(call.messages, call.params, job_input)
