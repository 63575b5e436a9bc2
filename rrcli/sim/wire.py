"""How ``rrcli sim`` spells a reply on the wire: the base of every endpoint's dialect, and the
OpenAI family's credentials, errors and rate-limit headers.

Each endpoint is a ``Wire``: ``reply`` builds the reply (a dict: id, model, pieces, usage
counts...) from the request body, ``plain`` its JSON body, and a stream is ``head``, the ``first``
events before the text, ``deltas`` for the pieces ``start:end``, ``tail``, or a mid-stream
``error_event``. A request the endpoint refuses raises ``errors.InvalidSimRequest`` (a 400 in
the API's error shape). The family decides the credential header, the error body and the
rate-limit headers. Pure bytes and dicts: the server applies the behaviour (timing, errors,
caps), this only spells it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson

from rrcli.vocabulary import anthropic_error_type, openai_error_type

__all__ = [
    "AnthropicFamily",
    "OpenAIFamily",
    "Wire",
    "override_headers",
    "sse",
]


def sse(data: object, event: str | None = None) -> bytes:
    """One server-sent event (with its ``event:`` line when named)."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def override_headers(extra: dict[str, str], headers: Any) -> None:
    """Apply ``x-sim-response-headers: {JSON}`` to a response's headers (null removes one)."""
    override = headers.get("x-sim-response-headers")
    if override:
        for name, value in orjson.loads(override).items():
            if value is None:
                extra.pop(name.lower(), None)
            else:
                extra[name.lower()] = str(value)


def _exhausted(spec: str) -> dict[str, float]:
    """``x-sim-ratelimit: requests=500,tokens=250`` → the budgets to report as spent, each with
    its reset in seconds."""
    out: dict[str, float] = {}
    for item in spec.split(","):
        kind, _, ms = item.partition("=")
        if kind.strip() in ("requests", "tokens") and ms.strip():
            out[kind.strip()] = float(ms) / 1000.0
    return out


class Wire:
    """One endpoint's dialect; see the module docstring."""

    request_id_header: ClassVar[str]
    streams: ClassVar[bool] = True  # False: a ``stream`` request gets the plain body
    #: the status and error type of a refused key
    bad_key: ClassVar[tuple[int, str]] = (401, "authentication_error")
    stream_media_type: ClassVar[str] = "text/event-stream"

    def streamed(self, path: str, body: dict[str, Any]) -> bool:
        """Whether the request asks for a stream (its body's ``stream``; Gemini and Bedrock:
        its path)."""
        return body.get("stream") is True

    def refused(
        self, method: str, url: str, headers: Any, raw: bytes, secrets: Any
    ) -> tuple[int, str, str] | None:
        """(status, error type, message) for a request whose credential is none of
        ``secrets``; None when it is one of them."""
        if self.key(headers) in secrets:
            return None
        status, kind = self.bad_key
        return status, kind, "invalid API key"

    def error_headers(self, kind: str) -> dict[str, str]:
        """Headers an error answer of type ``kind`` carries (Bedrock names it in one)."""
        return {}

    def error_response(
        self,
        status: int,
        kind: str | None,
        message: str,
        code: str | None,
        param: str | None,
        headers: dict[str, str] | None,
    ) -> tuple[bytes, dict[str, str] | None]:
        """The error's body and headers (an API may say a wait in its body instead)."""
        kind = kind or self.error_type(status)
        body = self.error_body(status, kind, message, code, param)
        return body, {**self.error_headers(kind), **(headers or {})}

    def error_body(
        self, status: int, kind: str | None, message: str, code: str | None, param: str | None
    ) -> bytes:
        """The API's error document for ``status`` (``kind`` None: the API's type for it)."""
        return orjson.dumps(self.error(kind or self.error_type(status), message, code, param))

    def error_type(self, status: int) -> str:
        raise NotImplementedError

    def error(self, kind: str, message: str, code: str | None, param: str | None) -> dict:
        raise NotImplementedError

    def key(self, headers: Any) -> str | None:
        raise NotImplementedError

    def refusal(self, query: Any) -> tuple[int, str, str | None] | None:
        """(status, message, code) when the request's query is refused (Azure's api-version)."""
        return None

    def limit_headers(self, spec: str) -> dict[str, str]:
        raise NotImplementedError

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        raise NotImplementedError

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def head(self, r: dict[str, Any]) -> bytes:
        return b""

    def first(self, r: dict[str, Any]) -> bytes:
        return b""

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        return b""

    def tail(self, r: dict[str, Any]) -> bytes:
        return b""

    def error_event(self, r: dict[str, Any]) -> bytes:
        return b""


class OpenAIFamily(Wire):
    """What every OpenAI endpoint shares: a Bearer key, ``{"error": {...}}`` bodies, and rate
    limits as ``x-ratelimit-*`` headers with durations."""

    request_id_header = "x-request-id"

    def key(self, headers: Any) -> str | None:
        value = headers.get("authorization", "")
        return value[7:] if value.startswith("Bearer ") else None

    def limit_headers(self, spec: str) -> dict[str, str]:
        """Rate-limit headers saying the budgets in ``spec`` are spent (resets as durations)."""
        out = {}
        for kind, seconds in _exhausted(spec).items():
            out[f"x-ratelimit-remaining-{kind}"] = "0"
            out[f"x-ratelimit-reset-{kind}"] = f"{round(seconds * 1000)}ms"
        return out

    def error_type(self, status: int) -> str:
        # a 429 names the budget that ran out ("requests", "tokens") as its type
        return "requests" if status == 429 else openai_error_type(status)

    def error(self, kind: str, message: str, code: str | None, param: str | None) -> dict:
        return {"error": {"message": message, "type": kind, "param": param, "code": code}}

    def error_event(self, r: dict[str, Any]) -> bytes:
        return sse({"error": {"message": "simulated failure mid-stream", "type": "server_error"}})


class AnthropicFamily(Wire):
    """What Anthropic's API shares: ``x-api-key``, ``{"type": "error", ...}`` bodies, and rate
    limits as ``anthropic-ratelimit-*`` headers with RFC 3339 resets."""

    request_id_header = "request-id"

    def key(self, headers: Any) -> str | None:
        return headers.get("x-api-key")

    def limit_headers(self, spec: str) -> dict[str, str]:
        """Rate-limit headers saying the budgets in ``spec`` are spent (resets in RFC 3339)."""
        out = {}
        for kind, seconds in _exhausted(spec).items():
            when = datetime.fromtimestamp(time.time() + seconds, UTC)
            out[f"anthropic-ratelimit-{kind}-remaining"] = "0"
            out[f"anthropic-ratelimit-{kind}-reset"] = when.isoformat(
                timespec="milliseconds"
            ).replace("+00:00", "Z")
        return out

    def error_type(self, status: int) -> str:
        return anthropic_error_type(None, status)

    def error(self, kind: str, message: str, code: str | None, param: str | None) -> dict:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def error_event(self, r: dict[str, Any]) -> bytes:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return sse(error, "error")
