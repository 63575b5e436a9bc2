"""Anthropic's ``/v1/messages/count_tokens`` through ``rrcli serve``: asked of the request's
Anthropic backends, else estimated.

The first Anthropic backend of the request's pool (up, not excluded) that answers a count gives
it, for its own model; counting is free at Anthropic, so it passes no gate and is not traced.
Where none counts (no such backend, or a server that does not serve the path), the answer is
rrcli's own estimate, the one rate limits and budgets reserve by: about four characters a token
and four tokens a message, the ``system`` text and the ``tools`` counted as their text.
"""

from __future__ import annotations

from typing import Any

from rrcli.errors import ProviderError
from rrcli.pool.pool import Pool
from rrcli.providers.anthropic import AnthropicProvider
from rrcli.tokens import estimate_input_tokens, estimate_value_tokens

__all__ = ["count_tokens", "estimate"]


def estimate(body: dict[str, Any]) -> int | None:
    """rrcli's estimate of a Messages request's input tokens; None when ``messages`` is not a
    list of objects."""
    messages = body.get("messages")
    if type(messages) is not list or not all(type(m) is dict for m in messages):
        return None
    tokens = estimate_input_tokens(messages)
    for part in (body.get("system"), body.get("tools")):
        if part:
            tokens += estimate_value_tokens(part)
    return tokens


async def count_tokens(
    pool: Pool, exclude: frozenset[str], body: dict[str, Any]
) -> tuple[int, str | None] | None:
    """(the count, the deployment that gave it, None for the estimate); None when the request
    has no list of messages to count."""
    guess = estimate(body)
    if guess is None:
        return None
    engine = pool.engine
    for deployment in engine.status().deployments:
        provider = engine.providers[deployment.id]
        if not isinstance(provider, AnthropicProvider) or deployment.state == "down":
            continue
        if deployment.id in exclude:
            continue
        try:
            return await provider.count_tokens(body), deployment.id
        except ProviderError:
            continue
    return guess, None
