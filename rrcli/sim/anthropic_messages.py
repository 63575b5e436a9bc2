"""Anthropic Messages as ``rrcli sim`` answers them: ``/v1/messages``, plain and streamed.

Content is a ``thinking`` block (with its signature) when the request enables ``thinking`` or the
``reasoning`` mode is on, then a ``text`` block or a ``tool_use`` block (``stop_reason``
``tool_use``). Usage counts ``cache_read_input_tokens`` (half the input in ``cache`` mode) apart
from ``input_tokens``. A stream is ``message_start``, ``ping``, each block's
``content_block_start``, deltas (``thinking_delta`` and ``signature_delta``, ``text_delta``, a
tool's ``input_json_delta`` fragments), ``content_block_stop``, ``message_delta`` (stop reason,
output tokens) and ``message_stop``.
"""

from __future__ import annotations

from typing import Any

from rrcli.sim.replies import chat_reply
from rrcli.sim.wire import AnthropicFamily, sse
from rrcli.vocabulary import anthropic_stop_reason

__all__ = ["AnthropicWire"]

_SIGNATURE = "sim-signature"


def _event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, kind)


class AnthropicWire(AnthropicFamily):
    """The Messages wire format."""

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        r = chat_reply(sim, body, modes, anthropic=True)
        r["id"] = sim.next_id("msg_sim")
        return r

    def _usage(self, r: dict[str, Any], output: int) -> dict[str, int]:
        total = r["input"]
        cached = r["cached"]
        return {
            "input_tokens": total - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        }

    def _content(self, r: dict[str, Any]) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if r["reasoning"]:
            blocks.append({"type": "thinking", "thinking": r["reasoning"], "signature": _SIGNATURE})
        tool = r["tool"]
        if tool is not None:
            blocks.append({"type": "tool_use", "id": tool["id"], "name": tool["name"]})
            # cut by max_tokens, the input is not whole: the stream's partial JSON stops there
            blocks[-1]["input"] = tool["input"] if r["finish"] != "length" else {}
        else:
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
            "usage": self._usage(r, r["output"]),
        }

    def head(self, r: dict[str, Any]) -> bytes:
        message = {**self.plain(r), "content": [], "stop_reason": None}
        message["usage"] = self._usage(r, 1)
        return _event("message_start", message=message) + _event("ping")

    def first(self, r: dict[str, Any]) -> bytes:
        out = b""
        if r["reasoning"]:
            block = {"type": "thinking", "thinking": "", "signature": ""}
            out += _event("content_block_start", index=0, content_block=block)
            delta: dict[str, Any] = {"type": "thinking_delta", "thinking": r["reasoning"]}
            out += _event("content_block_delta", index=0, delta=delta)
            delta = {"type": "signature_delta", "signature": _SIGNATURE}
            out += _event("content_block_delta", index=0, delta=delta)
            out += _event("content_block_stop", index=0)
        tool = r["tool"]
        if tool is not None:
            block = {"type": "tool_use", "id": tool["id"], "name": tool["name"], "input": {}}
        else:
            block = {"type": "text", "text": ""}
        return out + _event("content_block_start", index=r["text_index"], content_block=block)

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        index, pieces = r["text_index"], r["pieces"][start:end]
        if r["tool"] is not None:
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
        else:
            deltas = [{"type": "text_delta", "text": p} for p in pieces]
        return b"".join(_event("content_block_delta", index=index, delta=d) for d in deltas)

    def tail(self, r: dict[str, Any]) -> bytes:
        delta = {"stop_reason": anthropic_stop_reason(r["finish"]), "stop_sequence": None}
        return (
            _event("content_block_stop", index=r["text_index"])
            + _event("message_delta", delta=delta, usage={"output_tokens": r["output"]})
            + _event("message_stop")
        )
