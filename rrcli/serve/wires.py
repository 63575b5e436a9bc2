"""The two client APIs ``rrcli serve`` speaks: how an answer, a stream and an error are
written back in the client's own shape (a request becomes its job in ``records.jobs.request_job``).

Whole answers are built from the call's reply (``records.bodies``): the backend's own body when
it speaks the client's API, else one made from the reply's fields. A stream is written from the
text as it arrives, then the reply's end (tool calls, finish reason, usage) once the call is over.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import orjson

from rrcli.records.bodies import anthropic_body, openai_body
from rrcli.vocabulary import (
    anthropic_error_type,
    anthropic_stop_reason,
    openai_error_type,
    openai_finish_reason,
)

if TYPE_CHECKING:
    from rrcli.providers.base import Reply
    from rrcli.records.attempt import CallOutcome

__all__ = ["ANTHROPIC", "OPENAI", "AnthropicWire", "OpenAIWire", "Wire"]

_DONE = b"data: [DONE]\n\n"


def _fresh(prefix: str) -> str:
    return prefix + os.urandom(12).hex()


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = b"" if event is None else b"event: " + event.encode() + b"\n"
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


class Wire:
    """What both APIs share: the name of the API, its error body, its answers."""

    name = ""

    def error(self, status: int, message: str, kind: str | None = None) -> bytes:
        raise NotImplementedError

    def answer(self, outcome: CallOutcome) -> dict[str, Any]:
        raise NotImplementedError

    def stream_head(self, model: str, params: dict[str, Any]) -> dict[str, Any]:
        """What every event of one stream repeats; ``params``: the request's, which may ask
        for more than the text (OpenAI's ``stream_options``)."""
        raise NotImplementedError

    def stream_text(self, head: dict[str, Any], text: str, first: bool) -> bytes:
        raise NotImplementedError

    def stream_end(self, head: dict[str, Any], reply: Reply, first: bool) -> bytes:
        raise NotImplementedError

    def stream_error(self, status: int, message: str) -> bytes:
        raise NotImplementedError


class OpenAIWire(Wire):
    """OpenAI's chat completions, embeddings, responses, completions and moderations."""

    name = "openai"

    def error(self, status: int, message: str, kind: str | None = None) -> bytes:
        quota = kind == "insufficient_quota"  # OpenAI's type and code for it alike
        kind_of = kind if quota else openai_error_type(status)
        error = {"message": message, "type": kind_of, "param": None, "code": kind}
        return orjson.dumps({"error": error})

    def answer(self, outcome: CallOutcome) -> dict[str, Any]:
        """The whole answer of an ok call: the backend's body when it is one of this API's
        for the endpoint, else one built from the reply."""
        reply, attempt = outcome.reply, outcome.attempt
        assert reply is not None and attempt is not None
        endpoint, model = outcome.job.endpoint, attempt.backend.model
        if endpoint == "chat":
            return openai_body(reply, model, time.time)
        body = reply.body
        if type(body) is dict and body.get("object") in _OBJECTS[endpoint]:
            return body
        return _BUILT[endpoint](reply, model)

    # -- a streamed chat completion -------------------------------------------------------------

    def stream_head(self, model: str, params: dict[str, Any]) -> dict[str, Any]:
        """The chunks' shared fields, and whether the client asked for the usage chunk (which
        has no choices: a client that did not ask reads ``chunk.choices[0]`` of every chunk)."""
        options = params.get("stream_options")
        frame = {
            "id": _fresh("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
        }
        return {"frame": frame, "usage": type(options) is dict and options.get("include_usage")}

    def stream_text(self, head: dict[str, Any], text: str, first: bool) -> bytes:
        delta: dict[str, Any] = {"content": text}
        if first:
            delta = {"role": "assistant", **delta}
        return self._chunk(head, 0, delta, None)

    def stream_end(self, head: dict[str, Any], reply: Reply, first: bool) -> bytes:
        """The last chunks: what the text did not carry, the finish reason, each further
        choice whole (the text relayed as it came is the first choice's), usage when asked,
        [DONE]."""
        choices = reply.choices or [
            {
                "output": reply.output,
                "tool_calls": reply.tool_calls,
                "finish_reason": reply.finish_reason,
            }
        ]
        end = b""
        for index, choice in enumerate(choices):
            started = index > 0 or first  # the first choice's role went with its first text
            delta: dict[str, Any] = {"role": "assistant"} if started else {}
            if started and choice.get("output"):
                delta["content"] = choice["output"]
            calls = choice.get("tool_calls")
            if calls:
                delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
            reason = openai_finish_reason(choice.get("finish_reason") or "stop")
            end += self._chunk(head, index, delta, reason)
        if head["usage"]:
            end += _sse({**head["frame"], "choices": [], "usage": _usage(reply)})
        return end + _DONE

    def stream_error(self, status: int, message: str) -> bytes:
        return b"data: " + self.error(status, message) + b"\n\n"

    def _chunk(
        self, head: dict[str, Any], index: int, delta: dict[str, Any], reason: str | None
    ) -> bytes:
        choice = {"index": index, "delta": delta, "finish_reason": reason}
        return _sse({**head["frame"], "choices": [choice]})


class AnthropicWire(Wire):
    """Anthropic's Messages API."""

    name = "anthropic"

    def error(self, status: int, message: str, kind: str | None = None) -> bytes:
        error = {"type": anthropic_error_type(kind, status), "message": message}
        return orjson.dumps({"type": "error", "error": error})

    def answer(self, outcome: CallOutcome) -> dict[str, Any]:
        reply, attempt = outcome.reply, outcome.attempt
        assert reply is not None and attempt is not None
        return anthropic_body(reply, attempt.backend.model)

    # -- a streamed message --------------------------------------------------------------------

    def stream_head(self, model: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"id": _fresh("msg_"), "model": model}

    def stream_text(self, head: dict[str, Any], text: str, first: bool) -> bytes:
        out = self._start(head) + self._text_start() if first else b""
        delta = {"type": "text_delta", "text": text}
        return out + _event({"type": "content_block_delta", "index": 0, "delta": delta})

    def stream_end(self, head: dict[str, Any], reply: Reply, first: bool) -> bytes:
        """The text block closed, each tool call a tool_use block, the stop reason, usage."""
        out = self._start(head) if first else b""
        index = 0
        if first and reply.output:
            out += self._text_start()
            delta = {"type": "text_delta", "text": reply.output}
            out += _event({"type": "content_block_delta", "index": 0, "delta": delta})
        if not first or reply.output:
            out += _event({"type": "content_block_stop", "index": 0})
            index = 1
        for i, call in enumerate(reply.tool_calls or (), index):
            out += _tool_use(i, call)
        reason = anthropic_stop_reason(reply.finish_reason or "stop")
        message_delta = {
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": None},
            "usage": {
                "input_tokens": reply.input_tokens or 0,
                "output_tokens": reply.output_tokens or 0,
            },
        }
        return out + _event(message_delta) + _event({"type": "message_stop"})

    def stream_error(self, status: int, message: str) -> bytes:
        error = orjson.loads(self.error(status, message))
        return _event(error)

    def _start(self, head: dict[str, Any]) -> bytes:
        message = {
            "id": head["id"],
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": head["model"],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return _event({"type": "message_start", "message": message})

    def _text_start(self) -> bytes:
        block = {"type": "text", "text": ""}
        return _event({"type": "content_block_start", "index": 0, "content_block": block})


def _event(data: dict[str, Any]) -> bytes:
    return _sse(data, data["type"])


def _tool_use(index: int, call: dict[str, Any]) -> bytes:
    function = call.get("function") or {}
    block = {"type": "tool_use", "id": call.get("id"), "name": function.get("name"), "input": {}}
    delta = {"type": "input_json_delta", "partial_json": function.get("arguments") or "{}"}
    return (
        _event({"type": "content_block_start", "index": index, "content_block": block})
        + _event({"type": "content_block_delta", "index": index, "delta": delta})
        + _event({"type": "content_block_stop", "index": index})
    )


def _usage(reply: Reply) -> dict[str, int]:
    given, made = reply.input_tokens or 0, reply.output_tokens or 0
    return {"prompt_tokens": given, "completion_tokens": made, "total_tokens": given + made}


def _embeddings(reply: Reply, model: str) -> dict[str, Any]:
    data = [
        {"object": "embedding", "index": i, "embedding": vector}
        for i, vector in enumerate(reply.embeddings or ())
    ]
    tokens = reply.input_tokens or 0
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


def _response(reply: Reply, model: str) -> dict[str, Any]:
    text = {"type": "output_text", "text": reply.output or "", "annotations": []}
    item = {
        "type": "message",
        "id": _fresh("msg_"),
        "status": "completed",
        "role": "assistant",
        "content": [text],
    }
    given, made = reply.input_tokens or 0, reply.output_tokens or 0
    return {
        "id": reply.response_id or _fresh("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": [item],
        "usage": {"input_tokens": given, "output_tokens": made, "total_tokens": given + made},
    }


def _completion(reply: Reply, model: str) -> dict[str, Any]:
    choice = {
        "index": 0,
        "text": reply.output or "",
        "finish_reason": reply.finish_reason or "stop",
        "logprobs": None,
    }
    return {
        "id": _fresh("cmpl-"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": _usage(reply),
    }


def _moderation(reply: Reply, model: str) -> dict[str, Any]:
    return {"id": _fresh("modr-"), "model": model, "results": reply.moderations}


_OBJECTS = {
    "embeddings": ("list",),
    "responses": ("response",),
    "completions": ("text_completion",),
    "moderations": (None,),
}
_BUILT = {
    "embeddings": _embeddings,
    "responses": _response,
    "completions": _completion,
    "moderations": _moderation,
}

OPENAI, ANTHROPIC = OpenAIWire(), AnthropicWire()
