"""The one door server strings pass to reach records: a provider's key masked in all of them.

Whatever a server says, the secrets it was sent never reach a result, a trace, a log line or
the terminal: ``Redacting`` wraps every provider that sends one (``make_provider``: the key, a
credential in the base_url's query or password, a credential header's value), and masks each
(``config.redaction.redact``, every form) in each string of a ``Reply`` and of a
``ProviderError`` before the runner sees it. A reply is checked at the cost of one JSON encode
of its strings and a substring search per form; only a reply that holds a secret is walked.
A text that was cut before it got here may end in part of a key: a run of eight or more
characters that starts the key is masked too. A secret the provider learns as it runs (the
token a ``credentials.token_command`` prints) it reports to ``learn`` before sending it, and it
is masked from then on like the others. Streamed text echoed as it arrives
(``--prompt --stream``) is held back while its end could be the start of a secret, so a key
split across two chunks is masked whole before anything of it is printed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from operator import attrgetter
from typing import Any

import orjson

from rrcli.config.redaction import MASK, MIN_SECRET, redact, secret_forms
from rrcli.errors import ProviderError
from rrcli.providers.base import Call, Provider, Reply

__all__ = ["HeldEcho", "Redacting", "Secrets", "scrub_error", "scrub_reply", "scrub_text"]

#: a Reply's fields that hold strings from the server, alone or inside its JSON
_FIELDS = (
    "output",
    "finish_reason",
    "response_model",
    "reasoning_content",
    "request_id",
    "refusal",
    "system_fingerprint",
    "response_id",
    "body",
    "continuation",
    "tool_calls",
    "logprobs",
    "choices",
    "moderations",
)
_VALUES = attrgetter(*_FIELDS)
PARTIAL = 8  # the shortest start of a key masked on its own (a cut text's tail)
#: learned secrets kept masked: a token renewed hourly for a month adds no search to each reply
LEARNED_KEPT = 8


class Secrets:
    """One backend's secrets that no record may show: those its profile gives and the newest
    LEARNED_KEPT of those it learned as it ran; ``all`` is a new tuple when one is learned."""

    __slots__ = ("all", "given", "learned")

    def __init__(self, given: Sequence[str]) -> None:
        self.given = tuple(given)
        self.learned: tuple[str, ...] = ()
        self.all = self.given

    def learn(self, secret: str) -> None:
        """Mask ``secret`` too from now on (one too short to be a key is not masked)."""
        if len(secret) >= MIN_SECRET and secret not in self.all:
            self.learned = (*self.learned, secret)[-LEARNED_KEPT:]
            self.all = self.given + self.learned


class Redacting:
    """``provider`` with each of ``secrets`` masked in everything it returns or raises, and each
    secret it learns (a provider with ``report_secrets_to`` is handed ``learn``)."""

    def __init__(self, provider: Provider, secrets: Sequence[str]) -> None:
        self.inner = provider
        self.held = Secrets(secrets)
        self.server_address = provider.server_address
        report = getattr(provider, "report_secrets_to", None)
        if report is not None:
            report(self.held.learn)

    @property
    def secrets(self) -> tuple[str, ...]:
        return self.held.all

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        echo = None if on_text is None else HeldEcho(on_text, self.held)
        try:
            reply = await self.inner.send(call, echo)
        except ProviderError as exc:
            for secret in self.secrets:
                exc = scrub_error(exc, secret)
            raise exc from exc.__cause__
        finally:
            if echo is not None:
                echo.flush()
        for secret in self.secrets:
            reply = scrub_reply(reply, secret)
        return reply

    async def aclose(self) -> None:
        await self.inner.aclose()

    def __getattr__(self, name: str) -> Any:  # the adapter's other attributes (url, backend)
        return getattr(self.inner, name)


class HeldEcho:
    """Streamed text passed on with ``secrets`` masked (those learned while it streams too): the
    end of what arrived is held back while it could be the start of a secret's form, and passed
    on (masked) once the next piece shows it is not, or at ``flush``."""

    __slots__ = ("_forms", "_held", "_out", "_secrets", "_source")

    def __init__(self, out: Callable[[str], None], secrets: Secrets) -> None:
        self._out = out
        self._source = secrets
        self._secrets: tuple[str, ...] = ()
        self._forms: tuple[str, ...] = ()
        self._held = ""

    def __call__(self, piece: str) -> None:
        if self._source.all is not self._secrets:  # a secret learned since the last piece
            self._secrets = self._source.all
            self._forms = tuple(f for secret in self._secrets for f in secret_forms(secret))
        text = self._held + piece
        for secret in self._secrets:
            text = redact(text, secret)
        keep = self._start_of_a_form(text)
        self._held = text[len(text) - keep :] if keep else ""
        if len(text) > keep:
            self._out(text[: len(text) - keep])

    def _start_of_a_form(self, text: str) -> int:
        """The length of the longest end of ``text`` that starts a form of a secret."""
        best = 0
        for form in self._forms:
            for k in range(min(len(form) - 1, len(text)), best, -1):
                if text.endswith(form[:k]):
                    best = k
                    break
        return best

    def flush(self) -> None:
        """Pass on what is held (the stream ended): masked as a cut text is."""
        text, self._held = self._held, ""
        for secret in self._source.all:
            text = scrub_text(text, secret)
        if text:
            self._out(text)


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
