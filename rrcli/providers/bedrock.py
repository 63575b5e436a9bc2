"""The ``bedrock`` provider: Amazon Bedrock's Converse API (``POST
{base_url}/model/{modelId}/converse``, ``/converse-stream`` when streamed), signed with SigV4.

The credentials are AWS's standard chain, resolved by botocore (the ``bedrock`` extra, imported
when a bedrock backend is made): the profile named in ``credentials.profile``, else the
environment (``AWS_ACCESS_KEY_ID``...), the shared files, SSO, a role (web identity, ECS,
instance metadata). They are resolved at the first call, off the event loop (a role's lookup
is network I/O), and again when botocore says they are about to expire. Each request is signed
by botocore's ``SigV4Auth`` for service ``bedrock`` in the backend's ``region``; the secret
never leaves the process (only the signature travels); a session token travels in
``X-Amz-Security-Token``; both are reported (``report_secrets_to``) and masked in everything
the provider returns or raises.

The adapter speaks the ``anthropic`` dialect: an OpenAI-shaped job is translated by the one
table (``translate``), then spelled as Converse (``converse``). Usage counts
``inputTokens`` with the cache's reads and writes (as Anthropic's do), reads also as
``cached_input_tokens``. A stream is AWS event-stream frames (``eventstream``) folded into the
message a plain answer would have been. Errors are the one translation's (``base``), named by
Bedrock's ``x-amzn-ErrorType``: ``ThrottlingException`` and ``ModelNotReadyException`` (429),
``ModelTimeoutException`` (408) and ``ServiceUnavailableException`` (503) are retried,
``AccessDeniedException`` and ``UnrecognizedClientException`` (403) take the backend down,
``ValidationException`` (400) is the request's fault.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import httpx2
import orjson

from rrcli.config.profile import Backend, RetrySettings
from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError, StatusError
from rrcli.providers._http import HTTPProvider, checked_tool_call, invalid_answer, token_sum
from rrcli.providers._to_anthropic import answer_name
from rrcli.providers.base import (
    Call,
    Reply,
    error_body,
    error_from_status,
    invalid_response,
    redact,
    stream_error,
)
from rrcli.providers.converse import finish_reason, to_converse
from rrcli.providers.eventstream import Frame, FrameParser
from rrcli.providers.translate import to_anthropic
from rrcli.registry import ANTHROPIC_MAX_TOKENS

__all__ = ["EXTRA_HINT", "BedrockProvider", "aws_error_type"]

EXTRA_HINT = "pip install 'rrcli[bedrock]'"
_SERVICE = "bedrock"
_INPUT_COUNTERS = ("inputTokens", "cacheReadInputTokens", "cacheWriteInputTokens")
#: a stream's exception frame (``:exception-type``) → the error type it is traced as
_STREAM_EXCEPTIONS = {
    "throttlingException": "rate_limit_error",
    "serviceUnavailableException": "overloaded_error",
    "internalServerException": "api_error",
    "modelStreamErrorException": "api_error",
    "modelTimeoutException": "timeout_error",
    "validationException": "invalid_request_error",
}
_CREDENTIAL_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a profile in credentials.profile, "
    "or run where a role provides them"
)


def _unheard(secret: str) -> None:
    """No one to tell (a provider made without ``make_provider``'s masking)."""


def _botocore() -> Any:
    """botocore's session, auth and request modules (the ``bedrock`` extra)."""
    try:
        import botocore.auth
        import botocore.awsrequest
        import botocore.session
    except ImportError:
        raise ProviderError(
            f"bedrock backends sign their requests with botocore, which is not installed — "
            f"{EXTRA_HINT}",
            type="authentication_error",
            transient=False,
            backend_down=True,
        ) from None
    return botocore


def aws_error_type(headers: Mapping[str, str], body: bytes) -> str:
    """The AWS exception an error answer names (``ThrottlingException``), from the
    ``x-amzn-ErrorType`` header (``Name:namespace``), else the body's ``__type``; "" when
    neither says."""
    kind = headers.get("x-amzn-errortype", "")
    if not kind:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            data = None
        found = data.get("__type") if isinstance(data, dict) else None
        kind = found if isinstance(found, str) else ""
    return kind.partition(":")[0].rpartition("#")[2][:64]


class BedrockProvider(HTTPProvider):
    """SigV4-signed Converse calls; event-stream frames when streaming."""

    path = "/converse"  # the model's own path is set per backend
    stream_media_type = "application/vnd.amazon.eventstream"

    def __init__(
        self,
        backend: Backend,
        api_key: str | None,
        *,
        retry: RetrySettings,
        seed: int | None = None,
        **options: Any,
    ) -> None:
        model = quote(backend.model, safe="")
        self.path = f"/model/{model}/converse"  # type: ignore[misc]
        super().__init__(backend, None, retry=retry, seed=seed, **options)
        self._stream_url = httpx2.URL(endpoint_url(backend.base_url, f"{self.path}-stream"))
        self._region = backend.region or ""
        self._credentials: Any = None  # botocore's, resolved at the first call
        self._frozen: Any = None
        self._resolving = asyncio.Lock()  # the first calls wait for one lookup, not one each
        self._learn: Callable[[str], None] = _unheard

    def chat_url(self, call: Call) -> httpx2.URL:
        return self._stream_url if call.stream else self._chat_url

    async def prepare(self, request: httpx2.Request) -> httpx2.Request:
        """``request`` signed: SigV4 over its method, URL, host, body, content type and the
        backend's own headers (AWS wants every ``x-amz-*`` header a request carries signed)."""
        botocore = _botocore()
        frozen = await self._current_credentials(botocore)
        headers = {**self.backend.headers, "content-type": request.headers["content-type"]}
        signed = botocore.awsrequest.AWSRequest(
            method="POST", url=str(request.url), data=request.content, headers=headers
        )
        botocore.auth.SigV4Auth(frozen, _SERVICE, self._region).add_auth(signed)
        for name in ("Authorization", "X-Amz-Date", "X-Amz-Security-Token"):
            value = signed.headers.get(name)
            if value is not None:
                request.headers[name] = value
        return request

    async def _current_credentials(self, botocore: Any) -> Any:
        """The credentials to sign with: resolved once, off the event loop, and refreshed
        there when botocore says they are about to expire."""
        refresh = getattr(self._credentials, "refresh_needed", None)
        if self._frozen is not None and (refresh is None or not refresh()):
            return self._frozen
        async with self._resolving:
            if self._credentials is None:
                self._credentials = await asyncio.to_thread(self._resolve, botocore)
            frozen = await asyncio.to_thread(self._credentials.get_frozen_credentials)
            # masked in everything from now on: the session token travels with each request
            # (a server could echo it); the secret key never does, but is no less secret
            for secret in (frozen.token, frozen.secret_key):
                if secret:
                    self._learn(secret)
            self._key = frozen.token or frozen.secret_key
            self._frozen = frozen
        return self._frozen

    def report_secrets_to(self, learn: Callable[[str], None]) -> None:
        """Tell ``learn`` the AWS secrets once resolved, before a request carries them."""
        self._learn = learn

    def _resolve(self, botocore: Any) -> Any:
        profile = self.backend.credentials.profile
        try:
            found = botocore.session.Session(profile=profile).get_credentials()
        except botocore.exceptions.BotoCoreError as exc:
            raise self._no_credentials(str(exc)) from None
        if found is None:
            raise self._no_credentials("none found")
        return found

    def _no_credentials(self, why: str) -> ProviderError:
        return ProviderError(
            f"no AWS credentials for backend {self.backend.id!r} ({why}) — {_CREDENTIAL_HINT}",
            type="authentication_error",
            transient=False,
            backend_down=True,
        )

    def _status_error(self, response: httpx2.Response, content: bytes) -> ProviderError:
        """The one translation's error, its message naming Bedrock's exception."""
        error = error_from_status(
            response.status_code, response.headers, content, self._retry, secret=self._key
        )
        kind = aws_error_type(response.headers, content)
        if not kind or not isinstance(error, StatusError):
            return error
        head, _, rest = error.message.partition(": ")
        message = f"{head}: {kind}: {rest}" if rest else f"{head}: {kind}"
        if error.backend_down and response.status_code == 403:
            message += f" — check the AWS credentials of backend {self.backend.id!r}"
        return StatusError(
            message,
            type=error.type,
            transient=error.transient,
            status_code=error.status_code,
            retry_after=error.retry_after,
            rate_limited=error.rate_limited,
            body=error.body,
            backend_down=error.backend_down,
        )

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        reply = await super().send(call, on_text)
        name = answer_name(call.params) if call.dialect != "anthropic" else None
        return _answer_from_tool(reply, name) if name else reply

    def build_body(self, call: Call) -> dict[str, Any]:
        if call.dialect != "anthropic":
            body = to_anthropic(call.messages, call.params)
        else:
            body = dict(call.params)
            system = []
            messages = []
            for message in call.messages:
                if message.get("role") == "system" and not messages:
                    system.append(message.get("content"))
                else:
                    messages.append(message)
            if system:
                body["system"] = system[0] if len(system) == 1 else _joined(system)
            body["messages"] = messages
        body.setdefault("max_tokens", ANTHROPIC_MAX_TOKENS)
        return to_converse(body)

    def parse_body(self, data: dict[str, Any]) -> Reply:
        message = (data.get("output") or {}).get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            raise invalid_answer("no output.message.content in the body", data, self._key)
        return _reply(content, data.get("stopReason"), data.get("usage") or {}, data, self._key)

    def new_parser(self) -> FrameParser:
        return FrameParser()

    def new_stream(self) -> _ConverseStream:
        return _ConverseStream(self._key)


def _joined(system: list[Any]) -> list[dict[str, Any]]:
    """Several leading system messages as one list of text blocks."""
    blocks: list[dict[str, Any]] = []
    for content in system:
        if isinstance(content, list):
            blocks.extend(b for b in content if isinstance(b, dict))
        else:
            blocks.append({"type": "text", "text": str(content)})
    return blocks


def _answer_from_tool(reply: Reply, name: str) -> Reply:
    """An OpenAI-shaped call with a json_schema ``response_format`` (sent as a forced tool):
    that tool's input as the output JSON text, as OpenAI gives it."""
    calls = reply.tool_calls or []
    answers = [c for c in calls if (c.get("function") or {}).get("name") == name]
    if not answers:
        return reply
    reply.output = answers[0]["function"]["arguments"]
    reply.finish_reason = "stop"
    reply.tool_calls = [c for c in calls if c not in answers] or None
    return reply


def _reply(
    content: list[Any], stop_reason: object, usage: Mapping[str, Any], body: Any, key: str | None
) -> Reply:
    """A Converse message (as received, or folded from a stream) → Reply."""
    if not content:
        raise invalid_answer("the message has no content blocks", body, key)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] | None = None
    for block in content:
        if not isinstance(block, dict):
            continue
        if "text" in block:
            texts.append(str(block["text"]))
        elif isinstance(use := block.get("toolUse"), dict):
            calls = calls or []
            raw = use.get("input", {})
            raw = raw if isinstance(raw, str) else orjson.dumps(raw).decode()
            fault = f"toolUse block {len(calls)}'s input is not a JSON object"
            call_id, name = use.get("toolUseId"), use.get("name")
            calls.append(checked_tool_call(call_id, name, raw, fault, body, key))
        elif isinstance(reasoning := block.get("reasoningContent"), dict):
            text = (reasoning.get("reasoningText") or {}).get("text")
            if isinstance(text, str):
                thinking.append(text)
    cached, written = usage.get("cacheReadInputTokens"), usage.get("cacheWriteInputTokens")
    return Reply(
        output="".join(texts),
        finish_reason=finish_reason(stop_reason),
        input_tokens=token_sum(usage, *_INPUT_COUNTERS),
        output_tokens=token_sum(usage, "outputTokens"),
        reasoning_content="".join(thinking) or None,
        body=body,
        tool_calls=calls,
        cached_input_tokens=cached if isinstance(cached, int) else None,
        cache_write_tokens=written if isinstance(written, int) else None,
    )


class _ConverseStream:
    """Folds ``messageStart`` … ``messageStop``, ``metadata`` into the Converse message."""

    __slots__ = ("_key", "blocks", "done", "metadata", "stop_reason")

    def __init__(self, key: str | None) -> None:
        self._key = key
        self.done = False
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stop_reason: str | None = None
        self.metadata: dict[str, Any] = {}

    def add(self, frame: Frame) -> str | None:
        data = self._payload(frame)
        if frame.headers.get(":message-type") == "exception":
            kind = frame.headers.get(":exception-type", "")
            error = {
                "type": _STREAM_EXCEPTIONS.get(kind, "stream_error"),
                "message": f"{kind}: {data.get('message', '')}",
            }
            raise stream_error(error, self._key, body=frame.payload.decode("utf-8", "replace"))
        kind = frame.headers.get(":event-type")
        index = data.get("contentBlockIndex", 0)
        if kind == "contentBlockDelta":
            return self._delta(index, data.get("delta") or {})
        if kind == "contentBlockStart":
            start = data.get("start") or {}
            if isinstance(start.get("toolUse"), dict):
                self.blocks[index] = {"toolUse": {**start["toolUse"], "input": ""}}
        elif kind == "messageStop":
            self.stop_reason = data.get("stopReason")
            self.done = True
        elif kind == "metadata":
            self.metadata = data
        return None

    def _payload(self, frame: Frame) -> dict[str, Any]:
        try:
            data = orjson.loads(frame.payload or b"{}")
        except orjson.JSONDecodeError:
            shown = redact(frame.payload[:80].decode("utf-8", "replace"), self._key)
            raise invalid_response(f"a stream event is not JSON: {shown!r}") from None
        if not isinstance(data, dict):
            raise invalid_response("a stream event is not a JSON object")
        return data

    def _delta(self, index: int, delta: dict[str, Any]) -> str | None:
        if "text" in delta:
            block = self.blocks.setdefault(index, {"text": ""})
            text = str(delta["text"])
            block["text"] = block.get("text", "") + text
            return text or None
        if isinstance(use := delta.get("toolUse"), dict):
            block = self.blocks.setdefault(index, {"toolUse": {"input": ""}})
            piece = str(use.get("input", ""))
            block["toolUse"]["input"] += piece
            return "" if piece else None
        if isinstance(reasoning := delta.get("reasoningContent"), dict):
            block = self.blocks.setdefault(index, {"reasoningContent": {"reasoningText": {}}})
            text = block["reasoningContent"].setdefault("reasoningText", {})
            if "text" in reasoning:
                text["text"] = text.get("text", "") + str(reasoning["text"])
                return ""
            if "signature" in reasoning:
                text["signature"] = reasoning["signature"]
        return None

    def reply(self) -> Reply:
        content = [self.blocks[i] for i in sorted(self.blocks)]
        for block in content:
            use = block.get("toolUse")
            if isinstance(use, dict) and isinstance(use.get("input"), str):
                use["input"] = _tool_input(use["input"], self._key)
        body = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": self.stop_reason,
            **self.metadata,
        }
        return _reply(content, self.stop_reason, self.metadata.get("usage") or {}, body, self._key)


def _tool_input(text: str, key: str | None) -> Any:
    """A toolUse block's input from the JSON pieces its deltas carried."""
    try:
        return orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        raise invalid_response(
            f"a toolUse block's input is not JSON: {redact(text, key)[:80]!r}",
            body=error_body(text, key),
        ) from None
