"""The wire formats ``rrcli sim`` speaks: OpenAI chat completions and Anthropic Messages.

Each API is a small dialect over one reply (a dict the server builds: id, model, pieces, finish,
input tokens, reasoning...): its credential header, its error bodies and rate-limit headers, the
plain JSON body, and the SSE events of a stream (``head``, the ``first`` events before the text,
``deltas``, ``tail``, a mid-stream ``error_event``). Pure bytes and dicts: the server applies the
behaviour, this only spells it.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson

from rrcli.providers.vocabulary import (
    anthropic_error_type,
    anthropic_stop_reason,
    openai_error_type,
)

__all__ = ["AnthropicWire", "OpenAIWire", "Wire", "override_headers"]


def sse(data: object, event: str | None = None) -> bytes:
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
    """One API's dialect; see the module docstring."""

    request_id_header: ClassVar[str]

    def error_body(self, status: int, kind: str | None, message: str, code: str | None) -> bytes:
        """The API's error document for ``status`` (``kind`` None: the API's type for it)."""
        return orjson.dumps(self.error(kind or self.error_type(status), message, code))

    def error_type(self, status: int) -> str:
        raise NotImplementedError

    def error(self, kind: str, message: str, code: str | None) -> dict[str, Any]:
        raise NotImplementedError


class OpenAIWire(Wire):
    """The chat-completions wire format."""

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

    def error(self, kind: str, message: str, code: str | None) -> dict[str, Any]:
        return {"error": {"message": message, "type": kind, "param": None, "code": code}}

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": "".join(r["pieces"])}
        if r["reasoning"]:
            message["reasoning_content"] = r["reasoning"]
        return {
            "id": r["id"],
            "object": "chat.completion",
            "created": int(time.time()),
            "model": r["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": r["finish"]}],
            "usage": _openai_usage(r),
        }

    def head(self, r: dict[str, Any]) -> bytes:
        return sse(self._chunk(r, {"role": "assistant", "content": ""}, None))

    def first(self, r: dict[str, Any]) -> bytes:
        if not r["reasoning"]:
            return b""
        return sse(self._chunk(r, {"reasoning_content": r["reasoning"]}, None))

    def deltas(self, r: dict[str, Any], pieces: tuple[str, ...]) -> bytes:
        prefix = b"data: " + orjson.dumps(self._chunk(r, {"content": ""}, None))
        cut = prefix.index(b'"content":""') + len(b'"content":')
        before, after = prefix[:cut], prefix[cut + 2 :] + b"\n\n"
        return b"".join(before + orjson.dumps(p) + after for p in pieces)

    def tail(self, r: dict[str, Any]) -> bytes:
        out = sse(self._chunk(r, {}, r["finish"]))
        options = r["body"].get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage_chunk = self._chunk(r, {}, None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = _openai_usage(r)
            out += sse(usage_chunk)
        return out + b"data: [DONE]\n\n"

    def error_event(self) -> bytes:
        return sse({"error": {"message": "simulated failure mid-stream", "type": "server_error"}})

    def _chunk(self, r: dict[str, Any], delta: dict[str, Any], finish: str | None) -> dict:
        return {
            "id": r["id"],
            "object": "chat.completion.chunk",
            "model": r["model"],
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }


def _openai_usage(r: dict[str, Any]) -> dict[str, int]:
    n = len(r["pieces"])
    return {"prompt_tokens": r["input"], "completion_tokens": n, "total_tokens": r["input"] + n}


class AnthropicWire(Wire):
    """The Messages wire format."""

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

    def error(self, kind: str, message: str, code: str | None) -> dict[str, Any]:
        return {"type": "error", "error": {"type": kind, "message": message}}

    def _usage(self, r: dict[str, Any], output: int) -> dict[str, int]:
        total = r["input"]
        cached = total // 2 if r["cache"] else 0
        return {
            "input_tokens": total - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        }

    def _content(self, r: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if r["reasoning"]:
            blocks.append({"type": "thinking", "thinking": r["reasoning"], "signature": "sim"})
        blocks.append({"type": "text", "text": "".join(r["pieces"])})
        return blocks

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": r["id"],
            "type": "message",
            "role": "assistant",
            "model": r["model"],
            "content": self._content(r),
            "stop_reason": anthropic_stop_reason(r["finish"]),
            "stop_sequence": None,
            "usage": self._usage(r, len(r["pieces"])),
        }

    def head(self, r: dict[str, Any]) -> bytes:
        message = {**self.plain(r), "content": [], "stop_reason": None}
        message["usage"] = self._usage(r, 1)
        return sse({"type": "message_start", "message": message}, "message_start") + sse(
            {"type": "ping"}, "ping"
        )

    def first(self, r: dict[str, Any]) -> bytes:
        out = b""
        if r["reasoning"]:
            out += sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                },
                "content_block_start",
            )
            delta = {"type": "thinking_delta", "thinking": r["reasoning"]}
            out += sse(
                {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
            )
            delta = {"type": "signature_delta", "signature": "sim"}
            out += sse(
                {"type": "content_block_delta", "index": 0, "delta": delta}, "content_block_delta"
            )
            out += sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        block = {
            "type": "content_block_start",
            "index": r["text_index"],
            "content_block": {"type": "text", "text": ""},
        }
        return out + sse(block, "content_block_start")

    def deltas(self, r: dict[str, Any], pieces: tuple[str, ...]) -> bytes:
        index = r["text_index"]
        return b"".join(
            sse(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": p},
                },
                "content_block_delta",
            )
            for p in pieces
        )

    def tail(self, r: dict[str, Any]) -> bytes:
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": anthropic_stop_reason(r["finish"]), "stop_sequence": None},
        }
        delta["usage"] = {"output_tokens": len(r["pieces"])}
        return (
            sse({"type": "content_block_stop", "index": r["text_index"]}, "content_block_stop")
            + sse(delta, "message_delta")
            + sse({"type": "message_stop"}, "message_stop")
        )

    def error_event(self) -> bytes:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return sse(error, "error")
