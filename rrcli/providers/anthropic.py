"""The ``anthropic`` provider: the Messages API (``POST {base_url}/v1/messages``).

Differences from the OpenAI shape handled here: an OpenAI-shaped job is translated
(``providers.translate``; a json_schema answer is read back from its forced tool), the system
prompt is its own field, ``max_tokens`` is required (1024 by default), output is the text blocks
joined, thinking blocks become ``reasoning_content``, ``tool_use`` blocks become OpenAI-shaped
tool calls, input tokens include the cache's (cache reads are also ``cached_input_tokens``), stop
reasons are mapped to OpenAI's finish reasons, and a ``pause_turn`` stop hands the runner a
``continuation`` to send back. A stream is folded into the message a plain answer would have
been (text, thinking and signature deltas, tool input JSON pieces, the stop reason, stop
sequence and usage of ``message_delta``), then read the same way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import httpx2
import orjson

from rrcli.config.urls import endpoint_url
from rrcli.providers._http import HTTPProvider, invalid_answer, parse_event_json, token_sum
from rrcli.providers._sse import SSEEvent
from rrcli.providers.base import (
    Call,
    Reply,
    error_body,
    invalid_response,
    redact,
    stream_error,
    timed_out,
    translate_transport_error,
)
from rrcli.providers.translate import answer_from_forced_tool, to_anthropic
from rrcli.registry import ANTHROPIC_MAX_TOKENS
from rrcli.vocabulary import finish_reason_from_anthropic, tool_call

__all__ = ["ANTHROPIC_VERSION", "DEFAULT_MAX_TOKENS", "AnthropicProvider"]

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = ANTHROPIC_MAX_TOKENS
_INPUT_COUNTERS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class AnthropicProvider(HTTPProvider):
    """``x-api-key`` and ``anthropic-version`` headers; SSE events by name when streaming."""

    path = "/v1/messages"
    api_headers: ClassVar[Mapping[str, str]] = {"anthropic-version": ANTHROPIC_VERSION}

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        reply = await super().send(call, on_text)
        if call.dialect != "anthropic" and "response_format" in call.params:
            return answer_from_forced_tool(reply, call)
        return reply

    async def count_tokens(self, body: Mapping[str, Any]) -> int:
        """The server's count of a Messages request's input tokens (``POST
        /v1/messages/count_tokens``, for this backend's model), within the backend's timeout;
        ProviderError when it gives none (a server that does not count answers 404)."""
        url = endpoint_url(self._base_url, "/v1/messages/count_tokens")
        content = orjson.dumps({**body, "model": self.backend.model})
        request = self._client.build_request("POST", url, content=content)
        try:
            async with asyncio.timeout(self.backend.timeout):
                response, content = await self._send_plain(request)
        except TimeoutError:
            raise timed_out(self.backend.timeout) from None
        except httpx2.HTTPError as exc:
            raise translate_transport_error(exc, self._key, self.backend.timeout) from exc
        try:
            tokens = orjson.loads(content).get("input_tokens")
        except (orjson.JSONDecodeError, AttributeError):
            tokens = None
        if type(tokens) is not int or tokens < 0:
            raise invalid_response("no input_tokens in the count", response.status_code)
        return tokens

    def build_body(self, call: Call) -> dict[str, Any]:
        if call.dialect != "anthropic":
            return self._translated(call)
        body = dict(call.params)
        body["model"] = self.backend.model
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        system: list[str] = []
        messages = []
        for message in call.messages:
            if message.get("role") == "system" and not messages:
                system.append(_text_of(message.get("content")))
            elif "reasoning_content" in message:
                messages.append({k: v for k, v in message.items() if k != "reasoning_content"})
            else:
                messages.append(message)
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = messages
        if call.stream:
            body["stream"] = True
        return body

    def _translated(self, call: Call) -> dict[str, Any]:
        """An OpenAI-shaped call's body (``providers.translate``); reasoning text is never sent
        back: a thinking block needs the signature only Anthropic's own replies carry."""
        translated = to_anthropic(call.messages, call.params)
        messages = translated.pop("messages")
        system = translated.pop("system", None)
        body = {**translated, "model": self.backend.model}
        body.setdefault("max_tokens", DEFAULT_MAX_TOKENS)
        if system is not None:
            body["system"] = system
        body["messages"] = messages
        if call.stream:
            body["stream"] = True
        return body

    def parse_body(self, data: dict[str, Any]) -> Reply:
        content = data.get("content")
        if not isinstance(content, list):
            raise invalid_answer("no content blocks in the body", data, self._key)
        return _reply(content, data.get("stop_reason"), data.get("usage") or {}, data, self._key)

    def new_stream(self) -> _AnthropicStream:
        return _AnthropicStream(self._key)


def _text_of(content: object) -> str:
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


def _reply(
    content: list[Any],
    stop_reason: str | None,
    usage: dict[str, Any],
    body: dict[str, Any],
    key: str | None,
) -> Reply:
    """A message (as received, or folded from a stream) → Reply: text blocks joined, thinking
    blocks as ``reasoning_content``, ``tool_use`` blocks as OpenAI-shaped tool calls (the input
    as compact JSON text), cache reads as ``cached_input_tokens``, cache writes as
    ``cache_write_tokens``. A message with no block at
    all is no answer (invalid, never an ok result with no output)."""
    if not content:
        raise invalid_answer("the message has no content blocks", body, key)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] | None = None
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            thinking.append(block.get("thinking", ""))
        elif kind == "tool_use":
            calls = calls or []
            calls.append(_tool_call(block, len(calls)))
    cached, written = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
    return Reply(
        output="".join(texts),
        finish_reason=finish_reason_from_anthropic(stop_reason),
        input_tokens=token_sum(usage, *_INPUT_COUNTERS),
        output_tokens=token_sum(usage, "output_tokens"),
        response_model=body.get("model"),
        reasoning_content="".join(thinking) or None,
        request_id=body.get("id"),
        body=body,
        continuation=(
            {"role": "assistant", "content": content} if stop_reason == "pause_turn" else None
        ),
        tool_calls=calls,
        cached_input_tokens=cached if isinstance(cached, int) else None,
        cache_write_tokens=written if isinstance(written, int) else None,
    )


def _tool_call(block: dict[str, Any], number: int) -> dict[str, Any]:
    """A ``tool_use`` block as a tool call; its ``input`` must be an object."""
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise invalid_response(f"tool_use block {number}'s input is not a JSON object")
    return tool_call(block.get("id"), block.get("name"), orjson.dumps(arguments).decode())


class _AnthropicStream:
    """Folds ``message_start`` … ``message_stop`` into the message they describe."""

    __slots__ = ("_key", "blocks", "done", "message", "stop_reason", "stop_sequence", "usage")

    def __init__(self, key: str | None) -> None:
        self._key = key
        self.done = False
        self.message: dict[str, Any] = {}
        self.blocks: dict[int, dict[str, Any]] = {}
        self.stop_reason: str | None = None
        self.stop_sequence: str | None = None
        self.usage: dict[str, Any] = {}

    def add(self, event: SSEEvent) -> str | None:
        name = event.event
        if name == "ping":
            return None
        data = parse_event_json(event)
        kind = data.get("type", name)
        if kind == "content_block_delta":
            return self._delta(data.get("index", 0), data.get("delta") or {})
        if kind == "message_start":
            self.message = data.get("message") or {}
            self._usage(self.message.get("usage"))
        elif kind == "content_block_start":
            self.blocks[data.get("index", len(self.blocks))] = dict(data.get("content_block") or {})
        elif kind == "content_block_stop":
            block = self.blocks.get(data.get("index", -1))
            if block is not None and "partial_json" in block:
                self._close(block)
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            self.stop_reason = delta.get("stop_reason") or self.stop_reason
            self.stop_sequence = delta.get("stop_sequence") or self.stop_sequence
            self._usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise stream_error(data.get("error"), self._key, body=event.data)
        return None

    def _delta(self, index: int, delta: dict[str, Any]) -> str | None:
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text", "")
            block["text"] = block.get("text", "") + text
            return text or None
        if kind == "thinking_delta":
            thinking = delta.get("thinking", "")
            block["thinking"] = block.get("thinking", "") + thinking
            return "" if thinking else None
        if kind == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
        elif kind == "input_json_delta":
            partial = delta.get("partial_json", "")
            block["partial_json"] = block.get("partial_json", "") + partial
            return "" if partial else None
        return None

    def _close(self, block: dict[str, Any]) -> None:
        """A tool_use block whose input arrived in pieces: the input they join into."""
        text = block.pop("partial_json") or "{}"
        try:
            block["input"] = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise invalid_response(
                f"a tool_use block's input is not JSON: {redact(text, self._key)[:80]!r}",
                body=error_body(text, self._key),
            ) from None

    def _usage(self, usage: object) -> None:
        if isinstance(usage, dict):
            self.usage.update((k, v) for k, v in usage.items() if v is not None)

    def reply(self) -> Reply:
        content = [self.blocks[i] for i in sorted(self.blocks)]
        for block in content:
            if "partial_json" in block:  # a block the stream never closed
                self._close(block)
        body = {
            **self.message,
            "content": content,
            "stop_reason": self.stop_reason,
            "stop_sequence": self.stop_sequence,
            "usage": self.usage,
        }
        return _reply(content, self.stop_reason, self.usage, body, self._key)
