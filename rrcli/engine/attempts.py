"""One attempt of a call: sent and its reply's usage made whole, and what follows it
(``decide``: ok, retry, failover, error, cancelled)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from rrcli.engine.echo import Echo
from rrcli.errors import Cancelled, ProviderError
from rrcli.providers.base import Call, Provider, Reply
from rrcli.records.attempt import Decision
from rrcli.routing.costs import NO_OUTPUT
from rrcli.tokens import estimate_value_tokens, output_cap

if TYPE_CHECKING:
    pass

__all__ = ["MOVES", "decide", "estimated_usage", "sent"]


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
