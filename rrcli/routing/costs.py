"""What an attempt may cost before it is sent, and what it is charged once it ended.

``attempt_ceiling`` is the worst case a budget reserves: input at its bound (one token a
character, each image, audio or file part at its documented maximum, tool definitions
included), plus the output cap (the largest any spelling sets, the one the body carries)
times the answers it can be billed (``answers``). ``attempt_cost`` is the charge: the reply's
usage when the server reported it; nothing for an attempt no provider bills (the
request never reached it, or it answered an error status); and for an attempt whose usage is
unknown (no usage in the reply, a stream cut after tokens came, a timeout while it generated)
its reservation, so the spend a budget counts is never below what was billed. All amounts are
USD; prices are USD per million tokens, an input token reserved at the dearer of the input
and cache-write prices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from rrcli.config.models import MEDIA
from rrcli.config.profile import Price
from rrcli.records.dollars import usd
from rrcli.tokens import UNCAPPED_OUTPUT, MediaTokens, input_bound, output_cap

if TYPE_CHECKING:
    from rrcli.errors import ProviderError
    from rrcli.providers.base import Call, Reply
    from rrcli.records.attempt import Attempt

__all__ = [
    "NO_OUTPUT",
    "UNPRICED",
    "Charge",
    "answers",
    "attempt_ceiling",
    "attempt_cost",
    "billed_nothing",
    "choices",
    "over_limit",
    "reply_cost",
]

NO_OUTPUT = frozenset({"embeddings", "moderations"})  # endpoints whose answers have no tokens

#: (USD charged or None when the backend is unpriced, whether the charge is an estimate)
Charge = tuple[float | None, bool]
UNPRICED: Charge = (None, False)  # the charge of an attempt on an unpriced backend

#: error types of an attempt that never reached the provider, so nothing was generated
_UNSENT = frozenset(
    {
        "connect_timeout",
        "pool_timeout",
        "connect_error",
        "proxy_error",
        "unsupported_protocol",
        "local_protocol_error",
        "invalid_url",
        "untranslatable",
        "redirect",
    }
)


def choices(params: Mapping[str, Any]) -> int:
    """How many answers a request asks for: ``n`` (any numeric spelling: 2, 2.0, "2") times
    ``best_of`` (completions generate that many and bill them all); at least 1."""
    if "n" not in params and "best_of" not in params:
        return 1
    return _count(params.get("n")) * _count(params.get("best_of"))


def answers(call: Call) -> int:
    """How many answers ``call`` can be billed: its ``choices`` for each of its prompts (a
    completions request's ``prompt`` may be a list of them, each answered)."""
    count = choices(call.params) if call.params else 1
    prompt = call.input
    listed = call.endpoint == "completions" and type(prompt) is list and prompt
    if listed and not all(type(token) is int for token in prompt):  # a list of prompts
        count *= len(prompt)
    return count


_MOST_ANSWERS = 1 << 32  # a count of answers no request gets: read as that many


def _count(value: object) -> int:
    """A count of answers as a backend may read it (rounded up), at least 1; a value that is
    no number is 1 (a backend refuses it)."""
    if type(value) is bool or value is None:
        return 1
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return 1
    if number != number or number < 1:
        return 1
    return _MOST_ANSWERS if number >= _MOST_ANSWERS else math.ceil(number)


def attempt_ceiling(
    price: Price, call: Call, cap: int | None = None, media: MediaTokens = MEDIA
) -> float:
    """USD: the most one attempt of ``call`` may cost at ``price``: its input at its bound
    (``tokens.input_bound``, each image, file or audio part at ``media``) at ``input_most``,
    and its output cap (``cap`` when the request sets none, else ``tokens.UNCAPPED_OUTPUT``)
    times the answers it asks for."""
    given = input_bound(call.messages, call.params, call.input, media)
    if call.endpoint in NO_OUTPUT:
        out = 0
    else:
        out = (output_cap(call.params) or cap or UNCAPPED_OUTPUT) * answers(call)
    return (given * input_most(price) + out * price.output) / 1e6


def input_most(price: Price) -> float:
    """USD per million: the most an input token may cost at ``price``: a prompt-cache write
    can cost more than a plain read (Anthropic's are 1.25 times the input price)."""
    write = price.cache_write
    return price.input if write is None or write <= price.input else write


def input_ceiling(price: Price, call: Call, media: MediaTokens = MEDIA) -> float:
    """USD: the most the input of one attempt of ``call`` may cost at ``price``."""
    return input_bound(call.messages, call.params, call.input, media) * input_most(price) / 1e6


def over_limit(
    price: Price, call: Call, limit: float, media: MediaTokens, backend: str, left: bool = False
) -> str:
    """What is wrong and the fix, for a call whose worst case at ``price`` (``attempt_ceiling``)
    is more than the whole ``limit`` (``left``: more than the ``limit`` left of the budget):
    its input's share and its output's, and the largest output cap that would fit when the
    input alone does."""
    given = input_bound(call.messages, call.params, call.input, media)
    spend_in = given * input_most(price) / 1e6
    spend_out = attempt_ceiling(price, call, None, media) - spend_in
    head = (
        f"its worst case on backend {backend} is ${usd(spend_in + spend_out, 4)} (input "
        f"${usd(spend_in, 4)}: at most {given:,} tokens, a token a character and each image, "
        f"audio or file at its most; output ${usd(spend_out, 4)} at its cap), more than the "
        + (f"${usd(limit, 4)} left of the budget" if left else f"whole budget of ${usd(limit, 4)}")
        + (", so it is not sent" if left else ", so it is never sent")
    )
    room = (limit - spend_in) * 1e6 / (price.output * answers(call)) if price.output else 0
    fix = f"lower its max_tokens to {int(room):,} or less"
    if spend_in >= limit or room < 1:
        fix = "shorten its input"
    return f"{head}: {fix}, or raise the budget"


def reply_cost(price: Price, reply: Reply) -> float | None:
    """USD a reply's usage cost at ``price``: the input read from the prompt cache at
    ``cached_input``, the input written to it at ``cache_write`` (each the input price when
    unset), the rest at the input and output prices; None when it reports no usage."""
    if reply.input_tokens is None and reply.output_tokens is None:
        return None
    used_in, used_out = reply.input_tokens or 0, reply.output_tokens or 0
    cached = min(reply.cached_input_tokens or 0, used_in)
    written = min(reply.cache_write_tokens or 0, used_in - cached)
    fresh = (used_in - cached - written) * price.input + used_out * price.output
    read_price = price.input if price.cached_input is None else price.cached_input
    write_price = price.input if price.cache_write is None else price.cache_write
    return (fresh + cached * read_price + written * write_price) / 1e6


def billed_nothing(error: ProviderError | None) -> bool:
    """Whether a failed attempt cost nothing: it never reached the provider, or the provider
    answered an error status (no provider bills a refused request)."""
    if error is None:
        return False
    status = error.status_code
    return error.type in _UNSENT or (status is not None and not 200 <= status < 300)


def attempt_cost(price: Price | None, attempt: Attempt, reserved: float | None) -> Charge:
    """What ``attempt`` is charged at ``price`` (see the module docstring); ``reserved``: the
    USD its budget set aside for it (None without a budget: an unknown usage then costs its
    estimate)."""
    if price is None:
        return UNPRICED
    reply = attempt.reply
    if reply is not None and not reply.usage_estimated:
        cost = reply_cost(price, reply)
        if cost is not None:
            return cost, False
    elif reply is None and billed_nothing(attempt.error):
        return 0.0, False
    if reserved is not None:
        return reserved, True
    if reply is not None and (cost := reply_cost(price, reply)) is not None:
        return cost, True
    return attempt.estimate * max(price.input, price.output) / 1e6, True
