"""The one door server strings pass to reach records: a provider's key masked in all of them.

Whatever a server says, the key it was sent never reaches a result, a trace, a log line or the
terminal: ``Redacting`` wraps every provider that sends a key (``make_provider``), and masks the
key (``config.redaction.redact``, every form) in each string of a ``Reply`` and of a
``ProviderError`` before the runner sees it. A reply is checked at the cost of one JSON encode
of its strings and a substring search per form; only a reply that holds the key is walked.
A text that was cut before it got here may end in part of a key: a run of eight or more
characters that starts the key is masked too.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from operator import attrgetter
from typing import Any

import orjson

from rrcli.config.redaction import MASK, redact, secret_forms
from rrcli.errors import ProviderError
from rrcli.providers.base import Call, Provider, Reply

__all__ = ["Redacting", "scrub_error", "scrub_reply", "scrub_text"]

#: a Reply's fields that hold strings from the server, alone or inside its JSON
_FIELDS = (
    "output", "finish_reason", "response_model", "reasoning_content", "request_id", "refusal",
    "system_fingerprint", "response_id", "body", "continuation", "tool_calls", "logprobs",
    "choices", "moderations",
)  # fmt: skip
_VALUES = attrgetter(*_FIELDS)
PARTIAL = 8  # the shortest start of a key masked on its own (a cut text's tail)


class Redacting:
    """``provider`` with ``secret`` masked in everything it returns or raises."""

    def __init__(self, provider: Provider, secret: str) -> None:
        self.inner = provider
        self.secret = secret
        self.server_address = provider.server_address

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        echo = None if on_text is None else _masked_echo(on_text, self.secret)
        try:
            reply = await self.inner.send(call, echo)
        except ProviderError as exc:
            raise scrub_error(exc, self.secret) from exc.__cause__
        return scrub_reply(reply, self.secret)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:  # the adapter's other attributes (url, backend)
        return getattr(self.inner, name)


def _masked_echo(on_text: Callable[[str], None], secret: str) -> Callable[[str], None]:
    forms = secret_forms(secret)

    def echo(piece: str) -> None:
        on_text(redact(piece, secret) if any(f in piece for f in forms) else piece)

    return echo


def scrub_text(text: str, secret: str) -> str:
    """``text`` with ``secret`` masked, and any run of PARTIAL or more characters that starts
    it (what a cut left of a key)."""
    text = redact(text, secret)
    head = secret[:PARTIAL]
    if len(secret) < PARTIAL or head not in text:
        return text
    out, start = [], 0
    while (found := text.find(head, start)) >= 0:
        end = found + PARTIAL
        while end < len(text) and end - found < len(secret) and text[end] == secret[end - found]:
            end += 1
        out += [text[start:found], MASK]
        start = end
    return "".join([*out, text[start:]])


def scrub_error(exc: ProviderError, secret: str) -> ProviderError:
    """``exc`` with ``secret`` masked in its message, type and body."""
    exc.message = scrub_text(exc.message, secret)
    exc.args = (exc.message,)
    exc.type = scrub_text(exc.type, secret)
    if exc.body is not None:
        exc.body = scrub_text(exc.body, secret)
    return exc


def scrub_reply(reply: Reply, secret: str) -> Reply:
    """``reply`` with ``secret`` masked in every string it holds, nested ones too: one JSON
    encode of them all and a search per form; only a reply that holds the key is walked."""
    forms = _encoded_forms(secret)
    if not forms:
        return reply
    values = _VALUES(reply)
    try:
        blob = orjson.dumps(values)
    except (TypeError, orjson.JSONEncodeError):
        blob = b""  # not plain JSON: walk it
    for form in forms:
        if not blob or form in blob:
            for name, value in zip(_FIELDS, values, strict=True):
                setattr(reply, name, _walk(value, secret))
            break
    return reply


@lru_cache(maxsize=256)
def _encoded_forms(secret: str) -> tuple[bytes, ...]:
    """The forms of ``secret`` as they appear in orjson's encoding of a string holding them."""
    return tuple({orjson.dumps(form)[1:-1] for form in secret_forms(secret)})


def _walk(value: Any, secret: str) -> Any:
    """``value`` (JSON-like) with ``secret`` masked in every string, keys of objects too."""
    if isinstance(value, str):
        return redact(value, secret)
    if isinstance(value, dict):
        return {_walk(k, secret): _walk(v, secret) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_walk(v, secret) for v in value]
    return value
