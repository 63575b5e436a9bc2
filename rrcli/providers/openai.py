"""The ``openai`` provider: any OpenAI-compatible chat-completions server, by base URL.

OpenAI itself, Azure-style gateways, vLLM, llama.cpp, Ollama, DeepSeek: one adapter (as ``llm``
treats them). Reasoning text is read from ``reasoning_content`` (DeepSeek) or ``reasoning``
(vLLM) and kept as ``reasoning_content``; it is sent back in a session's history only when the
backend has ``reasoning_feedback``. A Message Batches line is translated
(``providers.translate``); ``cache_control`` never reaches these servers.
"""

from __future__ import annotations

from typing import Any

from rrcli.providers._http import HTTPProvider, parse_event_json, token_sum
from rrcli.providers._sse import SSEEvent
from rrcli.providers.base import Call, Reply, invalid_response, stream_error
from rrcli.providers.translate import to_openai

__all__ = ["OpenAIProvider"]


class OpenAIProvider(HTTPProvider):
    """``POST {base_url}/chat/completions`` with ``Authorization: Bearer KEY``."""

    path = "/chat/completions"

    def auth_value(self, api_key: str) -> str:
        return f"Bearer {api_key}"

    def build_body(self, call: Call) -> dict[str, Any]:
        if call.dialect == "anthropic":  # a Message Batches line: providers.translate
            body = to_openai(call.messages, call.params)
            messages = body.pop("messages")
        else:
            body = dict(call.params)
            messages = call.messages
        body["model"] = self.backend.model
        feedback = self.backend.reasoning_feedback
        body["messages"] = [_as_sent(m, feedback) for m in messages]
        if call.stream:
            body["stream"] = True
            options = body.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            options["include_usage"] = True
            body["stream_options"] = options
        else:
            body.pop("stream_options", None)
        return body

    def parse_body(self, data: dict[str, Any]) -> Reply:
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise invalid_response("no choices in the body")
        choice = choices[0]
        message = choice.get("message")
        if not isinstance(message, dict):
            raise invalid_response("choices[0] has no message")
        usage = data.get("usage") or {}
        return Reply(
            output=_text(message.get("content")),
            finish_reason=choice.get("finish_reason"),
            input_tokens=token_sum(usage, "prompt_tokens"),
            output_tokens=token_sum(usage, "completion_tokens"),
            response_model=data.get("model"),
            reasoning_content=message.get("reasoning_content") or message.get("reasoning") or None,
            request_id=data.get("id"),
            body=data,
        )

    def new_stream(self) -> _OpenAIStream:
        return _OpenAIStream(self._key)


def _as_sent(message: dict[str, Any], feedback: bool) -> dict[str, Any]:
    """A history message as this API takes it: reasoning_content only with reasoning_feedback;
    no cache_control on its parts (an Anthropic hint an OpenAI-shaped job may carry for the
    Anthropic backends of a mixed pool). The message itself when nothing is removed."""
    content = message.get("content")
    cached = type(content) is list and any(
        type(p) is dict and "cache_control" in p for p in content
    )
    if not cached and (feedback or "reasoning_content" not in message):
        return message
    sent = {k: v for k, v in message.items() if feedback or k != "reasoning_content"}
    if cached:
        sent["content"] = [
            {k: v for k, v in p.items() if k != "cache_control"} if type(p) is dict else p
            for p in content
        ]
    return sent


def _text(content: object) -> str:
    """Message content as text: a string, None (tool calls only), or a list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise invalid_response("choices[0].message.content is neither text nor parts")


class _OpenAIStream:
    """Folds ``chat.completion.chunk`` events; complete at ``data: [DONE]``."""

    __slots__ = ("_key", "done", "finish_reason", "id", "model", "output", "reasoning", "usage")

    def __init__(self, key: str | None) -> None:
        self._key = key
        self.done = False
        self.output: list[str] = []
        self.reasoning: list[str] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.model: str | None = None
        self.id: str | None = None

    def add(self, event: SSEEvent) -> str | None:
        if event.data == "[DONE]":
            self.done = True
            return None
        chunk = parse_event_json(event)
        if chunk.get("error"):
            raise stream_error(chunk["error"], self._key, body=event.data)
        self.model = chunk.get("model") or self.model
        self.id = self.id or chunk.get("id")  # the first chunk's: the response's id
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return None
        choice = choices[0]
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        piece = None
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.reasoning.append(reasoning)
            piece = ""
        content = delta.get("content")
        if content:
            self.output.append(content)
            piece = content
        return piece

    def reply(self) -> Reply:
        output = "".join(self.output)
        reasoning = "".join(self.reasoning) or None
        message: dict[str, Any] = {"role": "assistant", "content": output}
        if reasoning:
            message["reasoning_content"] = reasoning
        body = {
            "id": self.id,
            "object": "chat.completion",
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage or None,
        }
        return Reply(
            output=output,
            finish_reason=self.finish_reason,
            input_tokens=token_sum(self.usage, "prompt_tokens"),
            output_tokens=token_sum(self.usage, "completion_tokens"),
            response_model=self.model,
            reasoning_content=reasoning,
            request_id=self.id,
            body=body,
        )
