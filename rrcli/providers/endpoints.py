"""The OpenAI endpoints besides chat: embeddings, responses, completions, moderations.

Each is one ``EndpointAPI``: its path under the base URL, the field its input travels in, how its
answer becomes a Reply and, for the two that stream (responses, completions), how its events
fold into one. The request body is the call's params, the backend's model and the job's input,
nothing else. A 2xx body that is not an answer of the endpoint (an embeddings reply with a vector
missing, a Responses reply with neither output text nor a function call) raises
``invalid_response`` naming what is wrong, so the job ends as an error with that reason.
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError
from rrcli.providers._http import (
    StreamFold,
    checked_tool_call,
    openai_chunk,
    parse_event_json,
    token_sum,
    usage_detail,
)
from rrcli.providers._sse import SSEEvent
from rrcli.providers.base import Call, Reply, invalid_response, stream_error
from rrcli.registry import count_inputs

__all__ = ["ENDPOINT_APIS", "EndpointAPI", "endpoint_request"]

#: an answer body, the call it answers and the key (masked in an error body) → Reply
Parse = Callable[[dict[str, Any], Call, str | None], Reply]
#: (url, body, parse a plain body, start a stream fold): how one call is sent
Request = tuple[str, dict[str, Any], Callable[[dict[str, Any]], Reply], Callable[[], StreamFold]]


@dataclass(frozen=True, slots=True)
class EndpointAPI:
    """One endpoint: ``POST {base_url}{path}`` with the input in ``field``."""

    path: str
    field: str
    parse: Parse
    fold: Callable[[Call, str | None], StreamFold] | None = None  # None: never streamed
    usage_option: bool = False  # streams report usage only when asked (stream_options)

    def build(self, call: Call, model: str) -> dict[str, Any]:
        body = dict(call.params)
        body["model"] = model
        body[self.field] = call.input
        if call.stream:
            body["stream"] = True
            if self.usage_option:
                options = body.get("stream_options")
                body["stream_options"] = {
                    **(options if isinstance(options, dict) else {}),
                    "include_usage": True,
                }
        else:
            body.pop("stream_options", None)
        return body


def endpoint_request(call: Call, base_url: str, model: str, key: str | None) -> Request:
    """How an OpenAI-compatible backend at ``base_url`` sends a non-chat ``call``."""
    api = ENDPOINT_APIS[call.endpoint]
    if call.stream and api.fold is None:
        raise ProviderError(
            f"/{call.endpoint} has no streamed form", type="invalid_request", transient=False
        )
    fold = api.fold
    return (
        endpoint_url(base_url, api.path),
        api.build(call, model),
        lambda data: api.parse(data, call, key),
        (lambda: fold(call, key)) if fold is not None else _no_stream,
    )


def _no_stream() -> StreamFold:
    raise AssertionError("an unstreamed endpoint's call is never streamed")


# --- embeddings ------------------------------------------------------------------------------


def _embeddings(data: dict[str, Any], call: Call, key: str | None) -> Reply:
    items = data.get("data")
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise invalid_response("no data list of embeddings in the body")
    expected = count_inputs(call.input)
    if len(items) != expected:
        raise invalid_response(f"{len(items)} embeddings for {expected} inputs")
    indexes = [item.get("index", i) for i, item in enumerate(items)]
    if sorted(indexes) != list(range(expected)):
        raise invalid_response(f"embedding indexes {indexes} are not 0 to {expected - 1}")
    ordered = sorted(zip(indexes, items, strict=True), key=lambda pair: pair[0])
    usage = data.get("usage") or {}
    return Reply(
        output="",
        input_tokens=token_sum(usage, "prompt_tokens"),
        response_model=data.get("model"),
        body=data,
        embeddings=[_vector(item.get("embedding"), i) for i, item in ordered],
    )


def _vector(value: object, index: int) -> list[float]:
    """One embedding: a list of numbers as sent, or base64 text of little-endian float32."""
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        vector = array("f")
        try:
            vector.frombytes(base64.b64decode(value, validate=True))
        except (binascii.Error, ValueError):
            raise invalid_response(
                f"embedding {index} is not base64 text of float32 numbers"
            ) from None
        if sys.byteorder == "big":
            vector.byteswap()
        return vector.tolist()
    raise invalid_response(f"embedding {index} is neither a list of numbers nor base64 text")


# --- responses -------------------------------------------------------------------------------


def _responses(data: dict[str, Any], call: Call, key: str | None) -> Reply:
    output = data.get("output")
    if not isinstance(output, list):
        raise invalid_response("no output list in the response body")
    texts: list[str] = []
    refusals: list[str] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[str] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            texts += _parts(item.get("content"), "output_text")
            refusals += _parts(item.get("content"), "refusal", "refusal")
        elif kind == "function_call":
            calls.append(_tool_call(item, data, key))
        elif kind == "reasoning":
            reasoning += _parts(item.get("summary"), "summary_text")
    status = data.get("status")
    reason = (data.get("incomplete_details") or {}).get("reason")
    if not texts and not calls and not refusals:
        why = f" (status {status}{f': {reason}' if reason else ''})" if status else ""
        raise invalid_response(f"the response has no output text{why}")
    finish = "tool_calls" if calls else "stop"
    if status == "incomplete":
        finish = {"max_output_tokens": "length"}.get(reason, reason or "incomplete")
    usage = data.get("usage") or {}
    return Reply(
        output="".join(texts),
        finish_reason=finish,
        input_tokens=token_sum(usage, "input_tokens"),
        output_tokens=token_sum(usage, "output_tokens"),
        response_model=data.get("model"),
        reasoning_content="".join(reasoning) or None,
        body=data,
        tool_calls=calls or None,
        refusal="".join(refusals) or None,
        cached_input_tokens=usage_detail(usage, "input_tokens_details", "cached_tokens"),
        reasoning_tokens=usage_detail(usage, "output_tokens_details", "reasoning_tokens"),
        response_id=data.get("id"),
    )


def _parts(parts: object, kind: str, field: str = "text") -> list[str]:
    """The ``field`` text of the ``kind`` parts of a content list."""
    if not isinstance(parts, list):
        return []
    return [
        p[field]
        for p in parts
        if isinstance(p, dict) and p.get("type") == kind and isinstance(p.get(field), str)
    ]


def _tool_call(item: dict[str, Any], data: dict[str, Any], key: str | None) -> dict[str, Any]:
    """A Responses ``function_call`` item in chat's ``tool_calls`` shape; arguments that are not
    a JSON object make the answer invalid."""
    return checked_tool_call(
        item.get("call_id") or item.get("id"),
        item.get("name"),
        item.get("arguments"),
        f"function_call {item.get('name')!r} has arguments that are not a JSON object",
        data,
        key,
    )


class _ResponsesStream:
    """Folds the Responses API's events: text as ``response.output_text.delta`` comes; the
    answer is the body ``response.completed`` (or ``.incomplete``) carries."""

    __slots__ = ("_call", "_key", "body", "done")

    def __init__(self, call: Call, key: str | None) -> None:
        self._call = call
        self._key = key
        self.body: dict[str, Any] | None = None
        self.done = False

    def add(self, event: SSEEvent) -> str | None:
        data = parse_event_json(event)
        kind = data.get("type")
        if kind == "response.output_text.delta":
            delta = data.get("delta")
            return delta if isinstance(delta, str) else ""
        if kind in ("response.function_call_arguments.delta", "response.reasoning_text.delta"):
            return ""
        if kind in ("response.completed", "response.incomplete"):
            response = data.get("response")
            if not isinstance(response, dict):
                raise invalid_response(f"{kind} carries no response")
            self.body, self.done = response, True
        elif kind == "response.failed":
            response = data.get("response") or {}
            raise stream_error(response.get("error") or {}, self._key, body=event.data)
        elif kind == "error":
            error = {"message": data.get("message"), "type": data.get("code") or "api_error"}
            raise stream_error(error, self._key, body=event.data)
        return None

    def reply(self) -> Reply:
        assert self.body is not None  # done
        return _responses(self.body, self._call, self._key)


# --- completions -----------------------------------------------------------------------------


def _completions(data: dict[str, Any], call: Call, key: str | None) -> Reply:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise invalid_response("no choices in the body")
    ordered = sorted((c for c in choices if isinstance(c, dict)), key=lambda c: c.get("index") or 0)
    if len(ordered) != len(choices) or not all(isinstance(c.get("text"), str) for c in ordered):
        raise invalid_response("a choice has no text")
    usage = data.get("usage") or {}
    return Reply(
        output=ordered[0]["text"],
        finish_reason=ordered[0].get("finish_reason"),
        input_tokens=token_sum(usage, "prompt_tokens"),
        output_tokens=token_sum(usage, "completion_tokens"),
        response_model=data.get("model"),
        request_id=data.get("id"),
        body=data,
        choices=[{"output": c["text"], "finish_reason": c.get("finish_reason")} for c in ordered]
        if len(ordered) > 1
        else None,
    )


class _CompletionsStream:
    """Folds ``text_completion`` chunks, each choice's text by its index; complete at
    ``data: [DONE]``. The body it builds is the plain answer's shape."""

    __slots__ = ("_call", "_key", "done", "finish", "head", "texts", "usage")

    def __init__(self, call: Call, key: str | None) -> None:
        self._call = call
        self._key = key
        self.done = False
        self.texts: dict[int, list[str]] = {}
        self.finish: dict[int, str | None] = {}
        self.usage: dict[str, Any] | None = None
        self.head: dict[str, Any] = {}

    def add(self, event: SSEEvent) -> str | None:
        chunk = openai_chunk(event, self._key)
        if chunk is None:
            self.done = True
            return None
        if not self.head:
            self.head = {k: chunk.get(k) for k in ("id", "object", "created", "model")}
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        piece = None
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index") or 0
            text = choice.get("text")
            if isinstance(text, str) and text:
                self.texts.setdefault(index, []).append(text)
                piece = text if index == 0 else (piece or "")
            if choice.get("finish_reason"):
                self.finish[index] = choice["finish_reason"]
        return piece

    def reply(self) -> Reply:
        indexes = sorted(self.texts.keys() | self.finish.keys()) or [0]
        choices = [
            {
                "index": i,
                "text": "".join(self.texts.get(i, ())),
                "logprobs": None,
                "finish_reason": self.finish.get(i),
            }
            for i in indexes
        ]
        body = {**self.head, "object": "text_completion", "choices": choices, "usage": self.usage}
        return _completions(body, self._call, self._key)


# --- moderations -----------------------------------------------------------------------------


def _moderations(data: dict[str, Any], call: Call, key: str | None) -> Reply:
    results = data.get("results")
    if not isinstance(results, list):
        raise invalid_response("no results list in the moderations body")
    expected = count_inputs(call.input)
    if len(results) != expected:
        raise invalid_response(f"{len(results)} moderation results for {expected} inputs")
    return Reply(
        output="",
        response_model=data.get("model"),
        request_id=data.get("id"),
        body=data,
        moderations=results,
    )


#: every non-chat endpoint, by the name a job gives it
ENDPOINT_APIS: dict[str, EndpointAPI] = {
    "embeddings": EndpointAPI("/embeddings", "input", _embeddings),
    "responses": EndpointAPI("/responses", "input", _responses, _ResponsesStream),
    "completions": EndpointAPI(
        "/completions", "prompt", _completions, _CompletionsStream, usage_option=True
    ),
    "moderations": EndpointAPI("/moderations", "input", _moderations),
}
