"""OpenAI chat completions as ``rrcli sim`` answers them: ``/v1/chat/completions``, plain and
streamed.

A body has every choice (``n``), each a text, a JSON document or ``tool_calls`` (content null,
finish ``tool_calls``), with ``logprobs`` when asked, and usage with ``prompt_tokens_details``
and ``completion_tokens_details``, ``system_fingerprint`` and ``created``. A stream opens each
choice with its role (and a tool call's id and name, arguments empty), then content or argument
fragments by choice index (each with its logprobs), one finish chunk a choice, the usage chunk
when ``stream_options.include_usage`` asks, and ``[DONE]``. A reply of one text choice without
logprobs (the benchmarks' case) is spelled from one prepared chunk: one JSON encode a stream.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from rrcli.sim.replies import chat_reply
from rrcli.sim.wire import OpenAIFamily, sse

__all__ = ["FINGERPRINT", "OpenAIChatWire", "openai_usage"]

FINGERPRINT = "fp_rrcli_sim"


def openai_usage(r: dict[str, Any]) -> dict[str, Any]:
    """Chat and completions usage: output counts every choice and the reasoning; cached input
    is what the prefix cache held (half the input in ``cache`` mode)."""
    total, output = r["input"], r["output"]
    return {
        "prompt_tokens": total,
        "completion_tokens": output,
        "total_tokens": total + output,
        "prompt_tokens_details": {
            "cached_tokens": r["cached"],
            "audio_tokens": 0,
        },
        "completion_tokens_details": {
            "reasoning_tokens": r["reasoning_tokens"],
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }


class OpenAIChatWire(OpenAIFamily):
    """The chat-completions wire format."""

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        r = chat_reply(sim, body, modes, anthropic=False)
        r["id"] = sim.next_id("chatcmpl-sim")
        r["created"] = int(time.time())
        return r

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": r["id"],
            "object": "chat.completion",
            "created": r["created"],
            "model": r["model"],
            "choices": [self._choice(r, c) for c in r["choices"]],
            "usage": openai_usage(r),
            "system_fingerprint": FINGERPRINT,
            "service_tier": "default",
        }

    def _choice(self, r: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
        text = "".join(c["pieces"])
        message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
        if c["tool"] is not None:
            message["content"] = None
            message["tool_calls"] = [_call(c["tool"], text)]
        if r["reasoning"]:
            message["reasoning_content"] = r["reasoning"]
        lp = {"content": c["logprobs"], "refusal": None} if c["logprobs"] is not None else None
        finish = c["finish"]
        return {"index": c["index"], "message": message, "logprobs": lp, "finish_reason": finish}

    def head(self, r: dict[str, Any]) -> bytes:
        out = []
        for c in r["choices"]:
            delta: dict[str, Any] = {"role": "assistant", "content": ""}
            if c["tool"] is not None:
                delta["content"] = None
                delta["tool_calls"] = [{"index": 0, **_call(c["tool"], "")}]
            out.append(sse(self._chunk(r, c["index"], delta, None)))
        return b"".join(out)

    def first(self, r: dict[str, Any]) -> bytes:
        if not r["reasoning"]:
            return b""
        delta = {"reasoning_content": r["reasoning"]}
        return b"".join(sse(self._chunk(r, c["index"], delta, None)) for c in r["choices"])

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        if r["simple"]:
            return _text_deltas(r, self._chunk(r, 0, {"content": ""}, None), start, end)
        out = []
        for position in range(start, end):
            for c in r["choices"]:
                if position < len(c["pieces"]):
                    out.append(sse(self._piece(r, c, position)))
        return b"".join(out)

    def _piece(self, r: dict[str, Any], c: dict[str, Any], position: int) -> dict[str, Any]:
        piece = c["pieces"][position]
        if c["tool"] is not None:
            delta: dict[str, Any] = {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}
        else:
            delta = {"content": piece}
        chunk = self._chunk(r, c["index"], delta, None)
        if c["logprobs"] is not None:
            chunk["choices"][0]["logprobs"] = {
                "content": c["logprobs"][position : position + 1],
                "refusal": None,
            }
        return chunk

    def tail(self, r: dict[str, Any]) -> bytes:
        out = b"".join(sse(self._chunk(r, c["index"], {}, c["finish"])) for c in r["choices"])
        options = r["body"].get("stream_options")
        if isinstance(options, dict) and options.get("include_usage"):
            usage_chunk = self._chunk(r, 0, {}, None)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = openai_usage(r)
            out += sse(usage_chunk)
        return out + b"data: [DONE]\n\n"

    def _chunk(self, r: dict[str, Any], index: int, delta: dict, finish: str | None) -> dict:
        return {
            "id": r["id"],
            "object": "chat.completion.chunk",
            "created": r["created"],
            "model": r["model"],
            "system_fingerprint": FINGERPRINT,
            "choices": [
                {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
            ],
        }


def _call(tool: dict[str, Any], arguments: str) -> dict[str, Any]:
    return {
        "id": tool["id"],
        "type": "function",
        "function": {"name": tool["name"], "arguments": arguments},
    }


def _text_deltas(r: dict[str, Any], chunk: dict[str, Any], start: int, end: int) -> bytes:
    """The content chunks of pieces ``start:end`` from one encoded chunk: the piece is spliced
    where the empty content stands (one JSON encode for the group, not one a piece)."""
    prefix = b"data: " + orjson.dumps(chunk)
    cut = prefix.index(b'"content":""') + len(b'"content":')
    before, after = prefix[:cut], prefix[cut + 2 :] + b"\n\n"
    return b"".join(before + orjson.dumps(p) + after for p in r["pieces"][start:end])
