"""The ONE error translation (providers/base.py) and the adapters' body parsing.

Status and transport translation are pure functions, tested as a table; body parsing uses
``httpx2.MockTransport`` with canned bodies (parsing only: the wire is tested against the sim
server in test_providers_http.py).
"""

from __future__ import annotations

import asyncio
import email.utils

import httpx2
import orjson
import pytest

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import RedirectError, StatusError, TimeoutError_, TransportError
from rrcli.providers.anthropic import AnthropicProvider
from rrcli.providers.base import (
    Call,
    error_from_status,
    translate_transport_error,
)
from rrcli.providers.openai import OpenAIProvider
from rrcli.providers.ratelimit import retry_after_seconds

RETRY = RetrySettings()
KEY = "sk-secret-key-123456"


def body(message: str = "", type: str = "", code: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type, "code": code}})


@pytest.mark.parametrize(
    ("status", "headers", "payload", "expected"),
    [
        # (type, transient, rate_limited, retry_after)
        (500, {}, body("boom"), ("http_500", True, False, None)),
        (503, {"retry-after": "7"}, b"", ("http_503", True, False, 7.0)),
        (
            429,
            {"retry-after-ms": "250", "retry-after": "9"},
            body("slow"),
            ("http_429", True, True, 0.25),
        ),
        (
            529,
            {"retry-after": "2"},
            orjson.dumps(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            ),
            ("http_529", True, True, 2.0),
        ),
        (
            429,
            {},
            body("You exceeded your current quota", "insufficient_quota", "insufficient_quota"),
            ("insufficient_quota", False, False, None),
        ),
        (401, {}, body("bad key", "authentication_error"), ("http_401", False, False, None)),
        (403, {}, body("no", "permission_error"), ("http_403", False, False, None)),
        (404, {}, body("no model", "not_found_error"), ("http_404", False, False, None)),
        (400, {}, body("bad param", "invalid_request_error"), ("http_400", False, False, None)),
        (500, {"x-should-retry": "false"}, b"", ("http_500", False, False, None)),
        (
            400,
            {"x-should-retry": "true", "retry-after": "1"},
            body("odd"),
            ("http_400", True, False, 1.0),
        ),
        (
            429,
            {"x-should-retry": "true"},
            body("", "insufficient_quota"),
            ("insufficient_quota", False, False, None),
        ),
        (
            400,
            {"x-should-retry": "true"},
            body("This model's maximum context length is 8192 tokens"),
            ("context_length_exceeded", False, False, None),
        ),
    ],
)
def test_status_translation_table(status, headers, payload, expected) -> None:
    """Each status, header and error body maps to the type, retryability, rate-limit flag and
    delay that SPEC §7 gives it."""
    error = error_from_status(status, httpx2.Headers(headers), payload, RETRY)
    assert isinstance(error, StatusError)
    assert expected == (error.type, error.transient, error.rate_limited, error.retry_after)
    assert status == error.status_code


def openai_error(message: str, code: str | None = None, param: str | None = None) -> bytes:
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return orjson.dumps({"error": error})


@pytest.mark.parametrize(
    ("status", "headers", "payload", "down"),
    [
        (401, {}, body("Incorrect API key provided", "invalid_request_error"), True),
        (401, {"x-should-retry": "true"}, b"", True),
        (403, {}, body("Country, region, or territory not supported"), True),
        (429, {}, body("You exceeded your current quota", "insufficient_quota"), True),
        (404, {}, openai_error("The model `gpt-9` does not exist", "model_not_found"), True),
        (404, {}, orjson.dumps({"type": "error", "error": {"type": "not_found_error",
                                                           "message": "model: claude-9"}}), True),
        (404, {}, orjson.dumps({"error": 'model "llama9" not found, try pulling it first'}), True),
        (404, {}, openai_error("Invalid URL (POST /v1/chat/completion)"), True),
        (404, {}, orjson.dumps({"detail": "Not Found"}), True),
        (404, {}, b"404 page not found", True),
        (404, {}, openai_error("Previous response with id 'resp_1' not found.",
                               "previous_response_not_found", "previous_response_id"), False),
        (404, {}, openai_error("No such thing", None, "previous_response_id"), False),
        (429, {}, body("Rate limit reached", "rate_limit_error"), False),
        (400, {}, body("bad param", "invalid_request_error"), False),
        (500, {}, body("boom"), False),
    ],
)  # fmt: skip
def test_answers_about_the_backend_take_it_down(status, headers, payload, down) -> None:
    """A key refused (401), no access (403), an account out of quota, or a 404 for the model or
    the path says the backend can serve no call (``backend_down``, never transient); a 404
    naming a parameter of the job (a previous response not found), a rate limit, a 400 or a
    500 is about the call alone."""
    error = error_from_status(status, httpx2.Headers(headers), payload, RETRY)
    assert (down, False) == (error.backend_down, error.transient and down)


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
        "context_length_exceeded",
        "prompt is too long: 210000 tokens > 200000 maximum",
        "the request exceeds the available context size, try increasing it",
        "The decoder prompt (length 9000) is longer than the maximum model length of 8192.",
        "Input validation error: too many tokens",
        "input length and `max_tokens` exceed context limit",
    ],
)
def test_context_length_wordings_are_never_transient(message: str) -> None:
    """A 400 saying the prompt does not fit, in OpenAI's, Anthropic's, vLLM's, llama.cpp's or
    TGI's words, is ``context_length_exceeded`` and not retried, even if 400 were retryable."""
    retry = RetrySettings(retry_on_status=frozenset({400}))
    error = error_from_status(400, {}, body(message, "invalid_request_error"), retry)
    assert ("context_length_exceeded", False) == (error.type, error.transient)


def test_retry_on_status_decides_what_is_transient() -> None:
    """A status is transient exactly when the profile lists it in retry_on_status."""
    retry = RetrySettings(retry_on_status=frozenset({418}))
    assert (True, False) == (
        error_from_status(418, {}, b"", retry).transient,
        error_from_status(500, {}, b"", retry).transient,
    )


def test_redirect_names_its_target_and_is_not_transient() -> None:
    """A 3xx is a RedirectError naming the Location, never retried."""
    error = error_from_status(308, {"location": "https://elsewhere.example/v1"}, b"", RETRY)
    assert isinstance(error, RedirectError)
    assert (False, "redirect") == (error.transient, error.type)
    assert "https://elsewhere.example/v1" in error.message


def test_retry_after_as_an_http_date() -> None:
    """``Retry-After`` may be an HTTP date: the delay is the time until then."""
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 30, usegmt=True)
    assert 30.0 == retry_after_seconds({"retry-after": date}, now=now)
    assert 0.0 == retry_after_seconds({"retry-after": email.utils.formatdate(now - 5)}, now=now)
    assert None is retry_after_seconds({"retry-after": "soon"}, now=now)


def test_error_messages_carry_the_server_message_truncated_but_never_the_key() -> None:
    """The server's message is kept (cut to a few hundred characters); a key echoed back by
    the server is masked."""
    long = f"invalid key {KEY} " + "x" * 1000
    error = error_from_status(401, {}, body(long), RETRY, secret=KEY)
    assert KEY not in error.message
    assert "invalid key ***" in error.message
    assert len(error.message) < 400


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (httpx2.ConnectError("refused"), (TransportError, "connect_error", True)),
        (httpx2.ConnectTimeout("slow"), (TimeoutError_, "connect_timeout", True)),
        (httpx2.ReadTimeout("slow"), (TimeoutError_, "timeout", True)),
        (httpx2.WriteTimeout("slow"), (TimeoutError_, "timeout", True)),
        (httpx2.PoolTimeout("busy"), (TimeoutError_, "pool_timeout", True)),
        (
            httpx2.RemoteProtocolError("peer closed"),
            (TransportError, "remote_protocol_error", True),
        ),
        (httpx2.ReadError("reset"), (TransportError, "read_error", True)),
        (httpx2.UnsupportedProtocol("ftp"), (Exception, "unsupported_protocol", False)),
    ],
)
def test_transport_translation_table(exc: Exception, expected: tuple) -> None:
    """Each httpx2 exception becomes one rrcli error class, type and retryability."""
    error = translate_transport_error(exc)
    klass, type_, transient = expected
    assert isinstance(error, klass)
    assert (type_, transient) == (error.type, error.transient)


def send_canned(provider: str, payload: dict, call: Call, **backend: object):
    """One send through the real adapter with a canned JSON answer; returns (reply, request)."""
    seen = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json=payload, headers={"x-request-id": "req-1"})

    adapter = {"openai": OpenAIProvider, "anthropic": AnthropicProvider}[provider]
    b = Backend(id="b", provider=provider, **backend)
    p = adapter(b, KEY, retry=RETRY, transport=httpx2.MockTransport(handler))

    async def go():
        try:
            return await p.send(call)
        finally:
            await p.aclose()

    return asyncio.run(go()), seen[0]


def test_openai_parsing_reads_reasoning_usage_and_request_id() -> None:
    """vLLM's ``reasoning`` becomes reasoning_content; usage maps to input/output tokens; the
    request id is the body's ``id`` even when an ``x-request-id`` header is sent too."""
    payload = {
        "id": "chatcmpl-9",
        "model": "served-model",
        "choices": [{"message": {"content": "4", "reasoning": "2+2"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 1},
    }
    reply, _ = send_canned("openai", payload, Call([{"role": "user", "content": "2+2?"}]))
    assert ("4", "2+2", 12, 1, "stop", "served-model", "chatcmpl-9") == (
        reply.output,
        reply.reasoning_content,
        reply.input_tokens,
        reply.output_tokens,
        reply.finish_reason,
        reply.response_model,
        reply.request_id,
    )


def test_openai_request_body_strips_reasoning_unless_fed_back() -> None:
    """An assistant message's reasoning_content is sent back only with reasoning_feedback; the
    call's params (already merged over the backend's) are sent as they are, never merged again
    with the backend's, and the model is always the backend's."""
    payload = {"choices": [{"message": {"content": "ok"}}]}
    history = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b", "reasoning_content": "think"},
        {"role": "user", "content": "c"},
    ]
    call = Call(history, params={"temperature": 1, "top_p": 0.5, "model": "wrong"})
    params = {"temperature": 0, "seed": 7}
    _, request = send_canned("openai", payload, call, model="m", params=params)
    sent = orjson.loads(request.content)
    assert ("m", 1, 0.5) == (sent["model"], sent["temperature"], sent["top_p"])
    assert "seed" not in sent
    assert "reasoning_content" not in sent["messages"][1]
    _, request = send_canned("openai", payload, call, reasoning_feedback=True)
    assert "think" == orjson.loads(request.content)["messages"][1]["reasoning_content"]


def test_anthropic_parsing_counts_cache_tokens_and_maps_stop_reasons() -> None:
    """input_tokens adds the cache counters; text blocks join; thinking becomes reasoning;
    ``max_tokens`` maps to ``length``."""
    payload = {
        "id": "msg_1",
        "model": "claude",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Hel"},
            {"type": "text", "text": "lo"},
        ],
        "stop_reason": "max_tokens",
        "usage": {
            "input_tokens": 5,
            "cache_creation_input_tokens": 10,
            "cache_read_input_tokens": 20,
            "output_tokens": 3,
        },
    }
    call = Call([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}])
    reply, request = send_canned("anthropic", payload, call, base_url="https://api.anthropic.com")
    assert ("Hello", "hmm", 35, 3, "length") == (
        reply.output,
        reply.reasoning_content,
        reply.input_tokens,
        reply.output_tokens,
        reply.finish_reason,
    )
    sent = orjson.loads(request.content)
    assert ("Be brief.", 1024, [{"role": "user", "content": "hi"}]) == (
        sent["system"],
        sent["max_tokens"],
        sent["messages"],
    )
    assert (KEY, "2023-06-01", None) == (
        request.headers.get("x-api-key"),
        request.headers.get("anthropic-version"),
        request.headers.get("authorization"),
    )


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "refusal"),
    ],
)
def test_anthropic_stop_reason_mapping(stop: str, finish: str) -> None:
    """end_turn→stop, max_tokens→length, tool_use→tool_calls, others as they are."""
    payload = {"content": [{"type": "text", "text": "x"}], "stop_reason": stop, "usage": {}}
    reply, _ = send_canned("anthropic", payload, Call([{"role": "user", "content": "hi"}]))
    assert finish == reply.finish_reason


NOW = 1_700_000_000.0
IN_2S = "2023-11-14T22:13:22+00:00"  # NOW + 2 s, as Anthropic writes its resets


@pytest.mark.parametrize(
    ("status", "headers", "expected"),
    [
        (429, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"}, 1.5),
        (429, {"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "6m0s"}, 360.0),
        (
            429,
            {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "250ms",
             "x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2s"},
            2.0,
        ),
        (429, {"anthropic-ratelimit-requests-remaining": "0",
               "anthropic-ratelimit-requests-reset": IN_2S}, 2.0),
        (529, {"anthropic-ratelimit-tokens-remaining": "0",
               "anthropic-ratelimit-tokens-reset": IN_2S}, 2.0),
        (429, {"retry-after": "3", "x-ratelimit-remaining-requests": "0",
               "x-ratelimit-reset-requests": "20s"}, 3.0),
        (429, {"retry-after-ms": "120", "x-ratelimit-remaining-requests": "0",
               "x-ratelimit-reset-requests": "20s"}, 0.12),
        (429, {"x-ratelimit-remaining-requests": "5", "x-ratelimit-reset-requests": "20s"}, None),
        (429, {"x-ratelimit-reset-requests": "20s"}, None),
        (401, {"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s"}, None),
    ],
    ids=[
        "openai-requests", "openai-tokens", "latest-spent-budget", "anthropic-requests",
        "anthropic-529", "retry-after-wins", "retry-after-ms-wins", "budget-left",
        "no-remaining-header", "not-retried",
    ],
)  # fmt: skip
def test_rate_limit_reset_headers_give_the_delay_when_retry_after_is_absent(
    status, headers, expected
) -> None:
    """A 429/529 without Retry-After whose rate-limit headers say a budget is spent (remaining
    0) asks for the time until that budget resets (the latest, if several are spent); a
    Retry-After still wins, a budget with some left says nothing, and an error that is never
    retried carries no delay."""
    error = error_from_status(status, httpx2.Headers(headers), body("slow down"), RETRY, now=NOW)
    assert expected == error.retry_after
