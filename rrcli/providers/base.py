"""The provider contract, and the ONE place where the HTTP client's errors become rrcli's.

A provider turns a ``Call`` (chat messages and parameters) into a ``Reply`` by one HTTP attempt
(or, for ``sim``, by no network at all). It never retries, never routes and never sleeps for
backoff: the runner owns those. It raises only ``rrcli.errors.ProviderError`` subclasses, each
knowing whether it is transient and any delay the server asked for.

CONTRACT (the runner codes against exactly this):

- ``make_provider(backend, api_key, *, retry, seed)`` returns a ``Provider`` for the backend;
  one ``httpx2.AsyncClient`` per backend, explicit timeouts, pool limits >= the backend's cap,
  redirects never followed.
- ``await provider.send(call, on_text=None)`` makes one attempt. With ``call.stream`` it streams
  and calls ``on_text(chunk)`` for each piece of output text as it arrives (for ``--prompt
  --stream``); without it ``on_text`` is never called.
- ``await provider.aclose()`` closes its client.
- A provider that comes by a secret as it runs (a token a command prints) has
  ``report_secrets_to(learn)``, and calls ``learn(secret)`` before it sends the secret: from then
  on it is masked in everything the provider returns or raises (``scrub.Redacting``).

ERRORS are made here and only here: ``translate_transport_error`` turns an httpx2 exception into a
``TransportError``/``TimeoutError_`` (transient), ``error_from_status`` a non-2xx answer into a
``StatusError``/``RedirectError`` with ``transient``, ``rate_limited`` and ``retry_after``
by the retry rules. An error the server answered keeps its body as text (``error_body``: key
masked, ≤2 KB).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from rrcli.config.profile import RetrySettings
from rrcli.config.redaction import redact
from rrcli.errors import (
    InvalidResponseError,
    ProviderError,
    RedirectError,
    StatusError,
    TimeoutError_,
    TransportError,
)
from rrcli.providers.ratelimit import server_delay

__all__ = [
    "ERROR_TYPES",
    "Call",
    "Provider",
    "Reply",
    "error_body",
    "error_from_status",
    "filter_refusal",
    "invalid_response",
    "is_backend_fault",
    "is_context_length_message",
    "redact",
    "timed_out",
    "translate_transport_error",
]


@dataclass(slots=True)
class Call:
    """One request, provider-neutral.

    ``messages`` are chat messages in the job's dialect (``{"role", "content"}``, a leading
    ``system`` message when there is one; an assistant message may carry ``reasoning_content``,
    sent only when the backend has ``reasoning_feedback``). ``params`` are the request
    parameters, the backend's ``params`` under the job's own (the job wins), merged once by the
    caller and without ``stream`` (``stream`` says that): adapters send them as they are (or as
    translated), with the model always the backend's. ``dialect`` is the API whose shape the
    job's messages and params are written in (``"openai"``, or ``"anthropic"`` for a Message
    Batches line): an adapter whose API is the other one translates (``providers.translate``).
    ``endpoint``: one of ``registry.ENDPOINTS``; a non-chat call has no messages and sends
    ``input`` (completions: as the prompt) with its params. ``input_tokens``: the caller's
    estimate of the input (``tokens.estimate_prompt_tokens``), made once; None when not made.
    """

    messages: list[dict[str, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False
    dialect: str = "openai"
    endpoint: str = "chat"
    input: Any = None
    input_tokens: int | None = None


@dataclass(slots=True)
class Reply:
    """One successful attempt. The fields after ``pause_s``: what else the provider said, in
    OpenAI's shape whichever API served it (``vocabulary.tool_call``; ``choices`` only when there
    were several, the fields before them the first's); None when it said nothing of the kind.
    The last three: the other endpoints' answers, as ``providers.endpoints`` reads them."""

    output: str
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    response_model: str | None = None
    reasoning_content: str | None = None
    http_status: int | None = None
    request_id: str | None = None  # the body's id, else the API's request-id header
    ttft_ms: float | None = None  # streamed calls: time to the first chunk carrying text
    body: dict[str, Any] | None = None  # the provider's response body (batch output formats)
    # An Anthropic ``pause_turn``: the assistant message to append to ``messages`` before the
    # runner sends the same call again, on the same backend, to finish the turn.
    continuation: dict[str, Any] | None = None
    # Seconds until the server's rate-limit window resets, when its headers say nothing is left
    # (``x-ratelimit-remaining-requests: 0``...): the runner pauses the backend's gate that long.
    pause_s: float | None = None
    tool_calls: list[dict[str, Any]] | None = None
    refusal: str | None = None
    logprobs: Any = None
    choices: list[dict[str, Any]] | None = None
    cached_input_tokens: int | None = None
    cache_write_tokens: int | None = None  # input written to the prompt cache (Anthropic bills it)
    reasoning_tokens: int | None = None
    system_fingerprint: str | None = None
    embeddings: list[list[float]] | None = None
    moderations: list[Any] | None = None
    response_id: str | None = None
    usage_estimated: bool = False  # the server reported no usage: the counts are rrcli's estimate


class Provider(Protocol):
    """What the runner needs of a provider."""

    #: host[:port] written to traces as ``server_address`` (None for in-process sim)
    server_address: str | None

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply: ...

    async def aclose(self) -> None: ...


# --- the ONE error translation --------------------------------------------------------------

MESSAGE_LIMIT = 300  # characters of the server's error message kept in ours
BODY_LIMIT = 2048  # characters of the server's error body kept in ours (2 KB)
TYPE_LIMIT = 64  # characters of a server's error type kept as ours
_TEXT_BYTES = 4 * MESSAGE_LIMIT + 4096  # bytes of a text body read for its message: a key fits

#: How servers say "the prompt does not fit": OpenAI, Anthropic, vLLM, llama.cpp, Ollama, TGI...
_CONTEXT_WORDINGS = (
    "context_length_exceeded",
    "maximum context length",
    "context length",
    "context window",
    "context size",
    "context limit",
    "exceed_context_size",
    "maximum model length",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "too many input tokens",
)


#: httpx2's exception (by name: loaded at a first transport error) → ours, type, transient
_TRANSPORT_ERRORS: tuple[tuple[str, type[ProviderError], str, bool], ...] = (
    ("ConnectTimeout", TimeoutError_, "connect_timeout", True),
    ("PoolTimeout", TimeoutError_, "pool_timeout", True),
    ("TimeoutException", TimeoutError_, "timeout", True),
    ("ConnectError", TransportError, "connect_error", True),
    ("ProxyError", TransportError, "proxy_error", True),
    ("RemoteProtocolError", TransportError, "remote_protocol_error", True),
    ("ReadError", TransportError, "read_error", True),
    ("WriteError", TransportError, "write_error", True),
    ("CloseError", TransportError, "close_error", True),
    ("NetworkError", TransportError, "network_error", True),
    ("DecodingError", InvalidResponseError, "invalid_response", True),
    ("UnsupportedProtocol", ProviderError, "unsupported_protocol", False),
    ("LocalProtocolError", ProviderError, "local_protocol_error", False),
    ("InvalidURL", ProviderError, "invalid_url", False),
)


#: the error types a failed attempt may have besides ``http_<status>``: rrcli's own, and the
#: APIs' error types a stream's error event may name (a server's other words are not in it)
ERROR_TYPES = frozenset(
    {
        *(type_ for _, _, type_, _ in _TRANSPORT_ERRORS),
        "transport_error",
        "invalid_response",
        "redirect",
        "response_too_large",
        "endpoint_not_served",
        "stream_broken",
        "stream_error",
        "invalid_request",
        "forbidden_address",
        "insufficient_quota",
        "context_length_exceeded",
        "untranslatable",
        "too_many_continuations",
        "cancelled",
        "client_disconnected",
        "closed",
        "overloaded_error",
        "rate_limit_error",
        "api_error",
        "server_error",
        "timeout_error",
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "billing_error",
        "content_filter",
        "token_command",
    }
)


def error_body(body: bytes | str | object, secret: str | None) -> str | None:
    """An error response's body as text for the result's ``error.body``: ``secret`` masked,
    cut to BODY_LIMIT characters (the last one an ellipsis) when longer; None when empty.
    Only the first bytes are decoded, so a huge body costs no more than a small one."""
    if isinstance(body, bytes | bytearray):
        limit = 4 * BODY_LIMIT + 6 * len(secret or "")  # UTF-8: at most 4 bytes a character
        text = body[:limit].decode("utf-8", "replace")
        cut = len(body) > limit
    elif isinstance(body, str):
        text, cut = body, False
    else:
        return None
    if not text:
        return None
    text = redact(text, secret)
    if cut or len(text) > BODY_LIMIT:
        text = text[: BODY_LIMIT - 1] + "…"
    return text


def translate_transport_error(
    exc: Exception, secret: str | None = None, timeout: float | None = None
) -> ProviderError:
    """The rrcli error for an HTTP client's exception; a timeout's names ``timeout`` seconds."""
    import httpx2  # not at the top: a run on in-process providers never loads the HTTP client

    detail = redact(str(exc) or type(exc).__name__, secret)
    if timeout is not None and isinstance(exc, httpx2.TimeoutException):
        detail = _TIMEOUT_DETAIL["timeout"].format(timeout)
    for name, ours, type_, transient in _TRANSPORT_ERRORS:
        if isinstance(exc, getattr(httpx2, name)):
            return ours(f"{type_.replace('_', ' ')}: {detail}", type=type_, transient=transient)
    return TransportError(f"transport error: {detail}", type="transport_error", transient=True)


#: what each deadline of an attempt says when it passes: the limit and the key that sets it
_TIMEOUT_DETAIL = {
    "timeout": "no answer within {:g} s (the backend's timeout) — raise `timeout` in the profile "
    "if the server is slow",
    "stream_idle_timeout": "the stream stalled {:g} s after its text began (the backend's "
    "stream_idle_timeout) — raise `stream_idle_timeout` in the profile if the server pauses longer",
}


def timed_out(seconds: float, key: str = "timeout") -> TimeoutError_:
    """The attempt's deadline passed: ``key`` is the profile key whose limit it was (``timeout``
    for the whole attempt or a stream's first text, ``stream_idle_timeout`` for a stream's gap
    between events that carry output)."""
    detail = _TIMEOUT_DETAIL[key].format(seconds)
    return TimeoutError_(f"timeout: {detail}", type="timeout", transient=True)


def invalid_response(
    reason: str, status: int | None = None, *, body: str | None = None
) -> InvalidResponseError:
    """A 2xx answer that is not a valid response of the API: transient; ``body``: the
    answer (``error_body``'s) when the fault is in its content."""
    return InvalidResponseError(
        f"invalid response: {reason}",
        type="invalid_response",
        transient=True,
        status_code=status,
        body=body,
    )


def is_context_length_message(text: str) -> bool:
    """Whether a server's error text says the prompt is longer than the model's context."""
    lowered = text.lower()
    return any(wording in lowered for wording in _CONTEXT_WORDINGS)


def error_details(body: bytes | Any) -> tuple[str, str, str]:
    """(message, type, code) from an error body in the OpenAI, Anthropic or a plain shape."""
    data = body
    if isinstance(body, bytes | bytearray):
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            # generously more than the message keeps: it is redacted before it is cut
            return body[:_TEXT_BYTES].decode("utf-8", "replace").strip(), "", ""
    if not isinstance(data, dict):
        return "", "", ""
    error = data.get("error", data)
    if isinstance(error, str):
        return error, "", ""
    if not isinstance(error, dict):
        return "", "", ""
    message = error.get("message") or error.get("detail") or data.get("message") or ""
    if not isinstance(message, str):
        message = str(message)
    kind = error.get("type")
    code = error.get("code")
    return message, kind if isinstance(kind, str) else "", code if isinstance(code, str) else ""


def _cut(message: str) -> str:
    """A server's message at most MESSAGE_LIMIT characters (cut after redaction)."""
    return message if len(message) <= MESSAGE_LIMIT else message[: MESSAGE_LIMIT - 1] + "…"


def _transient(by_status: bool, headers: Mapping[str, str]) -> bool:
    """Whether to retry: the server's ``x-should-retry`` header when it says, else the
    status's rule."""
    should_retry = headers.get("x-should-retry")
    return should_retry == "true" if should_retry in ("true", "false") else by_status


def error_from_status(
    status: int,
    headers: Mapping[str, str],
    body: bytes | Any,
    retry: RetrySettings,
    *,
    secret: str | None = None,
    now: float | None = None,
) -> ProviderError:
    """The rrcli error for a non-2xx answer.

    Transient when the status is in ``retry.retry_on_status`` or the error is Anthropic's
    ``overloaded_error``; the server's ``x-should-retry`` header overrides that; a 429 for
    ``insufficient_quota``, a 400 saying the context is too long and a prompt a content
    filter refused (``content_filter``, naming the categories) are never transient.
    An answer about the backend rather than the call (``is_backend_fault``) is
    ``backend_down`` and never transient. ``retry_after`` is the server's Retry-After; without
    one, the reset of a rate-limit budget its headers say is spent (``rate_limit_pause``), as a
    success's headers pause the gate.
    """
    if 300 <= status < 400:
        return _redirect(status, headers, body, secret)
    message, kind, code = error_details(body)
    message = _cut(redact(message, secret))
    text = f"HTTP {status}: {message}" if message else f"HTTP {status}"
    type_ = f"http_{status}"
    overloaded = kind in ("overloaded_error", "rate_limit_error")
    rate_limited = status in (429, 529) or overloaded
    transient = _transient(status in retry.retry_on_status or overloaded, headers)
    if "insufficient_quota" in (kind, code):
        type_, transient, rate_limited = "insufficient_quota", False, False
        text += " — the account is out of credit or quota; add funds or use another key"
    elif status in (400, 413) and is_context_length_message(f"{message} {kind} {code}"):
        type_, transient = "context_length_exceeded", False
    elif code == "content_filter":
        type_, transient = "content_filter", False
        text = f"HTTP {status}: {filter_refusal(_inner_filter(body), 'the prompt')}"
    down = is_backend_fault(status, type_, f"{message} {kind} {code}", body)
    if down:
        transient = False
    retry_after = None
    if transient or rate_limited:
        retry_after = server_delay(headers, now)
    return StatusError(
        text,
        type=type_,
        transient=transient,
        status_code=status,
        retry_after=retry_after,
        rate_limited=rate_limited,
        body=error_body(body, secret),
        backend_down=down,
    )


def filter_refusal(results: object, what: str) -> str:
    """What a content filter refused, naming its categories: ``results`` is Azure's
    ``content_filter_result(s)`` object (category → ``{"filtered", "severity"}``)."""
    named = []
    if isinstance(results, dict):
        for category, verdict in results.items():
            if isinstance(verdict, dict) and verdict.get("filtered") is True:
                severity = verdict.get("severity")
                named.append(f"{category} ({severity})" if isinstance(severity, str) else category)
    said = f"category {', '.join(named)}" if named else "no category named"
    return (
        f"content filter refused {what}: {said} — not retried; change the prompt, or the "
        "deployment's content filter"
    )


def _inner_filter(body: bytes | Any) -> object:
    """Azure's ``error.innererror.content_filter_result`` of an error body, or None."""
    try:
        data = orjson.loads(body) if isinstance(body, bytes | bytearray) else body
    except orjson.JSONDecodeError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    inner = error.get("innererror") if isinstance(error, dict) else None
    return inner.get("content_filter_result") if isinstance(inner, dict) else None


def is_backend_fault(status: int, type_: str, words: str, body: bytes | Any) -> bool:
    """Whether an error answer speaks of the backend, not of the call: a key refused (401) or
    without access (403), an account out of credit (``insufficient_quota``), or a 404 for the
    model or the path. A 404 naming a parameter of the request other than the model
    (``previous_response_id`` not found: a resource of that job) is the call's alone. ``words``:
    the error's message, type and code."""
    if status in (401, 403) or type_ == "insufficient_quota":
        return True
    if status != 404:
        return False
    lowered = words.lower()
    if "model" in lowered:
        return True
    if "previous_response" in lowered or "previous response" in lowered:
        return False
    return _error_param(body) in ("", "model")


def _error_param(body: bytes | Any) -> str:
    """The request parameter an OpenAI-style error body names (``error.param``), or ""."""
    try:
        data = orjson.loads(body) if isinstance(body, bytes | bytearray) else body
    except orjson.JSONDecodeError:
        return ""
    error = data.get("error") if isinstance(data, dict) else None
    param = error.get("param") if isinstance(error, dict) else None
    return param if isinstance(param, str) else ""


def _redirect(
    status: int, headers: Mapping[str, str], body: bytes | Any, secret: str | None
) -> RedirectError:
    """A 3xx is never followed: the key would travel with it to wherever it points."""
    target = redact(headers.get("location") or "(no Location header)", secret)
    return RedirectError(
        f"HTTP {status} redirect to {target} not followed (credentials would travel with "
        "it) — set base_url to the final address",
        type="redirect",
        transient=False,
        status_code=status,
        body=error_body(body, secret),
    )


#: Error types of an ``error`` event inside a 200 stream that another attempt may cure.
_TRANSIENT_EVENT_TYPES = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "server_error", "timeout_error"}
)


def stream_error(
    error: object, secret: str | None = None, *, body: bytes | str | None = None
) -> ProviderError:
    """The rrcli error for an ``error`` event (or an ``error`` object in a 200 body); ``body``:
    the event's data (or the whole body), kept redacted as the error's body."""
    message, kind, code = error_details({"error": error})
    message = redact(message, secret)[:MESSAGE_LIMIT]
    kind = redact(kind or code or "stream_error", secret)[:TYPE_LIMIT]
    return ProviderError(
        f"error event in the stream: {kind}: {message}" if message else f"error event: {kind}",
        type=kind,
        transient=kind in _TRANSIENT_EVENT_TYPES,
        rate_limited=kind in ("overloaded_error", "rate_limit_error"),
        body=error_body(body, secret),
    )
