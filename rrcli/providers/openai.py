"""The ``openai`` provider: any OpenAI-compatible server, by base URL.

OpenAI itself, Azure-style gateways, vLLM, llama.cpp, Ollama, DeepSeek: one adapter (as ``llm``
treats them). Reasoning text is read from ``reasoning_content`` (DeepSeek) or ``reasoning``
(vLLM) and kept as ``reasoning_content``; it is sent back in a session's history only when the
backend has ``reasoning_feedback``. A Message Batches line is translated
(``providers.translate``); ``cache_control`` never reaches these servers. Everything else the
answer says is kept on the Reply: tool calls (their arguments checked to be a JSON object),
refusal, logprobs, every choice of an ``n`` > 1 answer, cached and reasoning token counts,
``system_fingerprint``. A stream is folded into the body a plain answer would have been, then
read the same way. Its other endpoints (embeddings, responses, completions, moderations) are
``providers.endpoints``. The request fields a host does not take (its backend's
``drop_params``: the preset's list, or the profile's) are dropped from every chat body here,
the one place a body is made.
"""

from __future__ import annotations

from typing import Any

from rrcli.providers._http import (
    HTTPProvider,
    NewStream,
    Parse,
    checked_tool_call,
    invalid_answer,
    openai_chunk,
    token_sum,
    usage_detail,
)
from rrcli.providers._sse import SSEEvent
from rrcli.providers.base import (
    Call,
    Reply,
    invalid_response,
)
from rrcli.providers.endpoints import endpoint_request
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
        drops = self.backend.drop_params
        for name in drops:
            body.pop(name, None)
        if call.stream and "stream_options" in drops:
            body["stream"] = True  # a host that refuses stream_options reports usage unasked
        elif call.stream:
            body["stream"] = True
            options = body.get("stream_options")
            options = dict(options) if isinstance(options, dict) else {}
            options["include_usage"] = True
            body["stream_options"] = options
        else:
            body.pop("stream_options", None)
        return body

    def parse_body(self, data: dict[str, Any]) -> Reply:
        return _parse(data, self._key)

    def new_stream(self) -> _OpenAIStream:
        return _OpenAIStream(self._key)

    def endpoint_request(self, call: Call) -> tuple[str, dict[str, Any], Parse, NewStream]:
        """Embeddings, responses, completions and moderations: ``providers.endpoints``."""
        return endpoint_request(call, self._base_url, self.backend.model, self._key)


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


def _parse(data: dict[str, Any], key: str | None) -> Reply:
    """A ``chat.completion`` body (as received, or folded from a stream) → Reply. The first
    choice is the reply; with several, ``choices`` has each. What the body lacks stays None."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise invalid_response("no choices in the body")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise invalid_response("choices[0] has no message")
    usage = data.get("usage") or {}
    calls = message.get("tool_calls")
    return Reply(
        output=_text(message, 0, data, key),
        finish_reason=choice.get("finish_reason"),
        input_tokens=token_sum(usage, "prompt_tokens"),
        output_tokens=token_sum(usage, "completion_tokens"),
        response_model=data.get("model"),
        reasoning_content=message.get("reasoning_content") or message.get("reasoning") or None,
        request_id=data.get("id"),
        body=data,
        tool_calls=_tool_calls(calls, 0, data, key) if calls else None,
        refusal=message.get("refusal") or None,
        logprobs=choice.get("logprobs"),
        choices=_choices(choices, data, key) if len(choices) > 1 else None,
        cached_input_tokens=usage_detail(usage, "prompt_tokens_details", "cached_tokens"),
        reasoning_tokens=usage_detail(usage, "completion_tokens_details", "reasoning_tokens"),
        system_fingerprint=data.get("system_fingerprint"),
    )


def _choices(choices: list[Any], data: dict[str, Any], key: str | None) -> list[dict[str, Any]]:
    """Each choice of an ``n`` > 1 answer as a result's ``choices`` entry."""
    entries = []
    for number, choice in enumerate(choices):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise invalid_response(f"choices[{number}] has no message")
        calls = message.get("tool_calls")
        entry: dict[str, Any] = {
            "output": _text(message, number, data, key),
            "finish_reason": choice.get("finish_reason"),
            "tool_calls": _tool_calls(calls, number, data, key) if calls else None,
        }
        if message.get("refusal"):
            entry["refusal"] = message["refusal"]
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if reasoning:
            entry["reasoning_content"] = reasoning
        if choice.get("logprobs") is not None:
            entry["logprobs"] = choice["logprobs"]
        entries.append(entry)
    return entries


def _tool_calls(
    calls: object, number: int, data: dict[str, Any], key: str | None
) -> list[dict[str, Any]]:
    """A message's tool calls in the result's shape: function calls with exactly ``id``,
    ``type`` and ``function: {name, arguments}`` (arguments a JSON object's text; empty or
    absent arguments are ``{}``, an object is written as compact JSON text); a call of another
    type (a custom tool's) kept as it came. Arguments that are not a JSON object make the
    answer invalid, the body kept in the error."""
    where = f"choices[{number}].message.tool_calls"
    if not isinstance(calls, list):
        raise invalid_response(f"{where} is not a list")
    out = []
    for i, call in enumerate(calls):
        if isinstance(call, dict) and call.get("type", "function") != "function":
            out.append(call)
            continue
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise invalid_response(f"{where}[{i}] has no function")
        out.append(
            checked_tool_call(
                call.get("id"),
                function.get("name"),
                function.get("arguments"),
                f"{where}[{i}].function.arguments is not a JSON object",
                data,
                key,
            )
        )
    return out


#: what a message may carry instead of content (a null content is an answer with one of them)
_NOT_TEXT = ("tool_calls", "function_call", "refusal", "audio", "reasoning_content", "reasoning")


def _text(message: dict[str, Any], number: int, data: dict[str, Any], key: str | None) -> str:
    """Message content as text: a string, a list of text parts, or None beside tool calls (or
    a refusal, audio, reasoning). A message with none of them (``{}``, a null content alone)
    is no answer: invalid, the body kept in the error, never an ok result with no output."""
    content = message.get("content")
    if content is None:
        if not any(message.get(name) for name in _NOT_TEXT):
            raise invalid_answer(
                f"choices[{number}].message has no content and no tool calls", data, key
            )
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    raise invalid_response(f"choices[{number}].message.content is neither text nor parts")


class _OpenAIStream:
    """Folds ``chat.completion.chunk`` events into the ``chat.completion`` body they describe,
    read as a plain body is (so a streamed reply equals the plain one); complete at ``data:
    [DONE]``. Per choice, by its ``index``: content, reasoning and refusal text joined, tool
    call fragments joined by their own ``index`` (id, type and name from the first fragment
    carrying them, arguments concatenated), logprobs lists concatenated."""

    __slots__ = (
        "_key",
        "choices",
        "created",
        "done",
        "fingerprint",
        "id",
        "model",
        "tier",
        "usage",
    )

    def __init__(self, key: str | None) -> None:
        self._key = key
        self.done = False
        self.choices: dict[int, _ChoiceFold] = {}
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None
        self.id: str | None = None
        self.created: int | None = None
        self.fingerprint: str | None = None
        self.tier: str | None = None

    def add(self, event: SSEEvent) -> str | None:
        """The event's output text for the first choice ("" when it carried only other
        generated text: reasoning, a refusal, tool call arguments, another choice's text)."""
        chunk = openai_chunk(event, self._key)
        if chunk is None:
            self.done = True
            return None
        if self.id is None:  # the first chunk's: the response's
            self.id = chunk.get("id")
            self.created = chunk.get("created")
        self.model = chunk.get("model") or self.model
        self.fingerprint = chunk.get("system_fingerprint") or self.fingerprint
        self.tier = chunk.get("service_tier") or self.tier
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        piece = None
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            fold = self.choices.get(index)
            if fold is None:
                fold = self.choices[index] = _ChoiceFold()
            text = fold.add(choice)
            if text is not None and (index == 0 or piece is None):
                piece = text if index == 0 else ""
        return piece

    def body(self) -> dict[str, Any]:
        """The ``chat.completion`` body the chunks fold into."""
        body: dict[str, Any] = {"id": self.id, "object": "chat.completion"}
        if self.created is not None:
            body["created"] = self.created
        body["model"] = self.model
        folds = self.choices or {0: _ChoiceFold()}
        body["choices"] = [folds[i].choice(i) for i in sorted(folds)]
        body["usage"] = self.usage
        if self.tier is not None:
            body["service_tier"] = self.tier
        if self.fingerprint is not None:
            body["system_fingerprint"] = self.fingerprint
        return body

    def reply(self) -> Reply:
        return _parse(self.body(), self._key)


class _ChoiceFold:
    """One choice's deltas."""

    __slots__ = (
        "calls",
        "content",
        "filtered",
        "finish_reason",
        "logprobs",
        "reasoning",
        "refusal",
    )

    def __init__(self) -> None:
        self.filtered: Any = None  # Azure's content_filter_results, as its finish chunk says
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.logprobs: dict[str, Any] | None = None
        self.finish_reason: str | None = None

    def add(self, choice: dict[str, Any]) -> str | None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
            self.filtered = choice.get("content_filter_results", self.filtered)
        if choice.get("logprobs"):
            self._logprobs(choice["logprobs"])
        delta = choice.get("delta")
        if not delta:
            return None
        piece = None
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if reasoning:
            self.reasoning.append(reasoning)
            piece = ""
        content = delta.get("content")
        if content:
            self.content.append(content)
            piece = content
        if delta.get("refusal"):
            self.refusal.append(delta["refusal"])
            piece = piece or ""
        if delta.get("tool_calls"):
            self._calls(delta["tool_calls"])
            piece = piece or ""
        return piece

    def _calls(self, fragments: object) -> None:
        if not isinstance(fragments, list):
            raise invalid_response("a chunk's delta.tool_calls is not a list")
        for fragment in fragments:
            if not isinstance(fragment, dict):
                continue
            index = fragment.get("index")
            if not isinstance(index, int):  # no index: a new call when it has an id
                index = len(self.calls) if fragment.get("id") or not self.calls else max(self.calls)
            call = self.calls.get(index)
            if call is None:
                call = self.calls[index] = {"id": None, "type": None, "name": None, "arguments": []}
            function = fragment.get("function") or {}
            for field, value in (
                ("id", fragment.get("id")),
                ("type", fragment.get("type")),
                ("name", function.get("name")),
            ):
                if call[field] is None and value:
                    call[field] = value
            if function.get("arguments"):
                call["arguments"].append(function["arguments"])

    def _logprobs(self, logprobs: object) -> None:
        if not isinstance(logprobs, dict):
            return
        if self.logprobs is None:
            self.logprobs = {}
        for name, value in logprobs.items():
            held = self.logprobs.get(name)
            if isinstance(value, list):
                if isinstance(held, list):
                    held.extend(value)
                else:
                    self.logprobs[name] = list(value)
            elif name not in self.logprobs:
                self.logprobs[name] = value

    def choice(self, index: int) -> dict[str, Any]:
        """The choice as a plain body has it."""
        content = "".join(self.content) if self.content else None
        if content is None and self.finish_reason and not (self.calls or self.refusal):
            content = ""  # a finished answer with no text, as a plain body writes it
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "refusal": "".join(self.refusal) if self.refusal else None,
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": call["type"] or "function",
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for call in (self.calls[i] for i in sorted(self.calls))
            ]
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        folded = {
            "index": index,
            "message": message,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
        }
        if self.filtered is not None:
            folded["content_filter_results"] = self.filtered
        return folded
