"""A job's turns as the API sees them: one call sent (its text echoed as it streams, for
``--prompt --stream``), a reply written back into the history as its assistant message, the two
parts of a turn Anthropic paused (``pause_turn``) joined into one reply, and the bound on how
often one turn may be continued (a server that pauses forever would otherwise draw calls, and a
request body growing with each, without end).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from rrcli.errors import BackendDown, ProviderError
from rrcli.providers.base import Call, Provider, Reply
from rrcli.records.attempt import Decision
from rrcli.routing.costs import NO_OUTPUT
from rrcli.tokens import estimate_call_tokens, estimate_value_tokens, output_cap

if TYPE_CHECKING:
    from rrcli.routing.lease import Lease
    from rrcli.routing.router import Router

__all__ = [
    "MOVES",
    "REQUEST_TEXT",
    "Cancelled",
    "Echo",
    "assistant_message",
    "bounded",
    "decide",
    "echo_for",
    "estimated_usage",
    "join_paused",
    "paused_call",
    "refused",
    "sent",
    "too_many_continuations",
]


class Echo:
    """--prompt --stream: text printed as it arrives; once any was, the call is never retried."""

    __slots__ = ("_out", "printed")

    def __init__(self, out: Callable[[str], None]) -> None:
        self._out = out
        self.printed = False

    def __call__(self, text: str) -> None:
        self.printed = True
        self._out(text)


#: the text callback of a job a program submitted (``Engine.submit``), set for the task that
#: awaits it (no parameter through every call): called with the deployment and each piece
REQUEST_TEXT: ContextVar[Callable[[str, str], None] | None] = ContextVar("rrcli_text", default=None)


def echo_for(stream: bool, on_text: Callable[[str], None] | None, deployment: str) -> Echo | None:
    """Where a streamed attempt's text goes: --prompt --stream's ``on_text``, else the
    submitted job's callback, told ``deployment``; None for a plain call or no reader."""
    if not stream:
        return None
    if on_text is not None:
        return Echo(on_text)
    request = REQUEST_TEXT.get()
    return None if request is None else Echo(partial(request, deployment))


class Cancelled(ProviderError):
    """A call cancelled while it was sent (its client left, a second Ctrl-C): its attempt is
    traced ``cancelled``, then ``cancel`` is raised again. ``type`` is the reason the canceller
    gave (``Task.cancel(msg)``, such as ``client_disconnected``), else ``cancelled``."""

    def __init__(self, cancel: asyncio.CancelledError) -> None:
        given = cancel.args[0] if cancel.args else None
        reason = given if type(given) is str and given else "cancelled"
        super().__init__(f"the call was cancelled: {reason}", type=reason, transient=False)
        self.cancel = cancel


async def sent(
    provider: Provider, call: Call, echo: Echo | None, estimate: int
) -> tuple[Reply | None, ProviderError | None, float]:
    """(the reply, or the error the call ended with; when it ended, monotonic). A reply whose
    server reported no usage carries an estimate of it (``estimated_usage``), so rates, costs
    and budgets still count it; ``estimate``: the call's tokens (``estimate_call_tokens``). A
    cancellation is returned as a ``Cancelled`` error, for the caller to trace and raise."""
    try:
        reply, error = await provider.send(call, echo), None
    except ProviderError as exc:
        return None, exc, time.monotonic()
    except asyncio.CancelledError as exc:
        return None, Cancelled(exc), time.monotonic()
    if reply.input_tokens is None and reply.output_tokens is None:
        reply = estimated_usage(reply, call, estimate)
    return reply, error, time.monotonic()


def estimated_usage(reply: Reply, call: Call, estimate: int) -> Reply:
    """``reply`` with the usage its server did not report estimated, marked ``usage_estimated``:
    the input as ``estimate`` counted it, the output from its text and tool calls."""
    given = max(1, estimate - (output_cap(call.params) or 0))
    if call.endpoint in NO_OUTPUT:
        return replace(reply, input_tokens=given, usage_estimated=True)
    made: list[Any] = [reply.output, reply.reasoning_content or "", reply.tool_calls or []]
    output = estimate_value_tokens(made)
    return replace(reply, input_tokens=given, output_tokens=output, usage_estimated=True)


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


#: a call's last decisions here after which it is routed again (its backend down, failover)
MOVES = ("failover", "retry")


def decide(error: ProviderError | None, backoff: float | None, failover: bool) -> Decision:
    """What follows an attempt: ``failover`` when the backend went down with it, or when this
    backend's budget is spent on a transient error and another backend may take the call."""
    if error is None:
        return "ok"
    if isinstance(error, Cancelled):
        return "cancelled"
    if backoff is not None:
        return "retry"
    return "failover" if error.backend_down or (failover and error.transient) else "error"


def paused_call(call: Call, reply: Reply, job_input: Any) -> tuple[Call, int]:
    """The call that goes on with an Anthropic paused turn (``reply.continuation`` appended),
    and its estimate, for the input it has grown to."""
    call = replace(call, messages=[*call.messages, reply.continuation], input_tokens=None)
    return call, estimate_call_tokens(call.messages, call.params, job_input)


def refused(router: Router, lease: Lease, estimate: int, call: Call) -> Awaitable[bool | None]:
    """The router's admission of an attempt, awaited: true when, while a retry waited for it,
    its backend left the pool. A lease holding its slot awaits the router's step itself (only a
    slot taken again can find its backend gone): no coroutine between."""
    if lease.held:
        return router.admit(lease, estimate, call)
    return _readmitted(router, lease, estimate, call)


async def _readmitted(router: Router, lease: Lease, estimate: int, call: Call) -> bool:
    try:
        await router.admit(lease, estimate, call)
    except BackendDown:
        return True
    return False
