"""OpenAI's Responses API as ``rrcli sim`` answers it: ``/v1/responses``, plain and streamed.

The reply is the chat reply (``rrcli.sim.replies``) to the request read as a chat: ``input`` (a
string, or items: messages, ``function_call`` and ``function_call_output``), ``instructions`` as
a system message, ``tools`` (``{"type": "function", "name", "parameters"}``) and
``tool_choice``, ``text.format`` as the response format, ``max_output_tokens``. Its output is a
``message`` item with one ``output_text`` part, or a ``function_call`` item, after a
``reasoning`` item in ``reasoning`` mode. Status ``completed``, or ``incomplete``
(``max_output_tokens``) when the token limit cut it; an empty output in ``empty-output`` mode.

The server remembers the ids of the responses it created (the last 100,000): a
``previous_response_id`` it does not know answers 400 ``previous_response_not_found``, as
OpenAI answers for a response of another account.

A stream is ``response.created``, ``response.in_progress``, ``response.output_item.added`` (and
``response.content_part.added``), the deltas (``response.output_text.delta`` or
``response.function_call_arguments.delta``), their ``.done`` events, ``response.output_item.done``
and ``response.completed`` (``response.incomplete``), each event with its ``sequence_number``.
"""

from __future__ import annotations

import time
from typing import Any

from rrcli.errors import InvalidSimRequest
from rrcli.sim.replies import chat_reply
from rrcli.sim.wire import OpenAIFamily, sse

__all__ = ["ResponseIds", "ResponsesWire"]


class ResponseIds:
    """The ids of the last ``limit`` responses this server created."""

    __slots__ = ("_ids", "limit")

    def __init__(self, limit: int = 100_000) -> None:
        self._ids: dict[str, None] = {}
        self.limit = limit

    def add(self, response_id: str) -> None:
        self._ids[response_id] = None
        if len(self._ids) > self.limit:
            del self._ids[next(iter(self._ids))]

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._ids


def _as_chat(body: dict[str, Any]) -> dict[str, Any]:
    """A Responses request as the chat request the reply is built from."""
    given = body.get("input")
    if isinstance(given, str) and given:
        items: list[Any] = [{"role": "user", "content": given}]
    elif isinstance(given, list) and given:
        items = list(given)
    else:
        raise InvalidSimRequest(
            "Missing required parameter: 'input'.", "input", "missing_required_parameter"
        )
    if isinstance(body.get("instructions"), str):
        items.insert(0, {"role": "system", "content": body["instructions"]})
    text = body.get("text")
    reasoning = body.get("reasoning")
    return {
        "messages": items,
        "model": body.get("model"),
        "tools": body.get("tools"),
        "tool_choice": body.get("tool_choice"),
        "max_tokens": body.get("max_output_tokens"),
        "response_format": text.get("format") if isinstance(text, dict) else None,
        "reasoning_effort": reasoning.get("effort") if isinstance(reasoning, dict) else None,
    }


class ResponsesWire(OpenAIFamily):
    """The Responses wire format."""

    def reply(self, sim: Any, body: dict[str, Any], modes: str) -> dict[str, Any]:
        previous = body.get("previous_response_id")
        if previous is not None and previous not in sim.responses:
            raise InvalidSimRequest(
                f"Previous response with id '{previous}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        r = chat_reply(sim, _as_chat(body), modes, anthropic=False)
        prefix = f"resp_sim{sim.tag}"  # unique across servers, as OpenAI's across accounts
        r["id"] = sim.next_id(prefix)
        sim.responses.add(r["id"])
        number = r["id"].removeprefix(prefix)
        r.update(request=body, created=int(time.time()), seq=0)
        r["item"] = ("fc_sim" if r["tool"] is not None else "msg_sim") + number
        r["reasoning_item"] = "rs_sim" + number
        r["index"] = 1 if r["reasoning"] else 0  # the output index of the answer
        if "empty-output" in modes:
            r["length"], r["empty"] = 0, True
        return r

    def plain(self, r: dict[str, Any]) -> dict[str, Any]:
        done = "completed" if r["finish"] != "length" else "incomplete"
        if r.get("empty"):
            return self._response(r, done, [])
        return self._response(r, done, [*self._reasoning(r), self._item(r, done, True)])

    def _response(self, r: dict[str, Any], status: str, output: list[Any]) -> dict[str, Any]:
        req = r["request"]
        total, out = r["input"], r["output"]
        usage = {
            "input_tokens": total,
            "input_tokens_details": {
                "cached_tokens": total // 2 if r["cache"] else 0,
                "cache_write_tokens": 0,
            },
            "output_tokens": out,
            "output_tokens_details": {"reasoning_tokens": r["reasoning_tokens"]},
            "total_tokens": total + out,
        }
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {
            "id": r["id"],
            "object": "response",
            "created_at": r["created"],
            "status": status,
            "error": None,
            "incomplete_details": incomplete,
            "instructions": req.get("instructions"),
            "max_output_tokens": req.get("max_output_tokens"),
            "model": r["model"],
            "output": output,
            "parallel_tool_calls": req.get("parallel_tool_calls", True),
            "previous_response_id": req.get("previous_response_id"),
            "temperature": req.get("temperature", 1.0),
            "text": req.get("text", {"format": {"type": "text"}}),
            "tool_choice": req.get("tool_choice", "auto"),
            "tools": req.get("tools", []),
            "top_p": req.get("top_p", 1.0),
            "truncation": "disabled",
            "metadata": req.get("metadata", {}),
            "usage": usage if status != "in_progress" else None,
        }

    def _reasoning(self, r: dict[str, Any]) -> list[dict[str, Any]]:
        if not r["reasoning"]:
            return []
        summary = [{"type": "summary_text", "text": r["reasoning"]}]
        return [{"type": "reasoning", "id": r["reasoning_item"], "summary": summary}]

    def _item(self, r: dict[str, Any], status: str, whole: bool) -> dict[str, Any]:
        """The answer's output item (``whole`` False: as it opens, before any text)."""
        text = "".join(r["pieces"]) if whole else ""
        tool = r["tool"]
        if tool is not None:
            return {
                "type": "function_call",
                "id": r["item"],
                "call_id": tool["id"],
                "name": tool["name"],
                "arguments": text,
                "status": status,
            }
        content = [_part(text)] if whole else []
        return {
            "type": "message",
            "id": r["item"],
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _event(self, r: dict[str, Any], kind: str, **fields: Any) -> bytes:
        seq = r["seq"]
        r["seq"] = seq + 1
        return sse({"type": kind, **fields, "sequence_number": seq}, kind)

    def head(self, r: dict[str, Any]) -> bytes:
        opening = self._response(r, "in_progress", [])
        out = self._event(r, "response.created", response=opening)
        out += self._event(r, "response.in_progress", response=opening)
        if r.get("empty"):
            return out
        for item in self._reasoning(r):
            out += self._event(r, "response.output_item.added", output_index=0, item=item)
            out += self._event(r, "response.output_item.done", output_index=0, item=item)
        item = self._item(r, "in_progress", False)
        out += self._event(r, "response.output_item.added", output_index=r["index"], item=item)
        if r["tool"] is None:
            out += self._event(r, "response.content_part.added", part=_part(""), **self._at(r))
        return out

    def _at(self, r: dict[str, Any]) -> dict[str, Any]:
        return {"item_id": r["item"], "output_index": r["index"], "content_index": 0}

    def deltas(self, r: dict[str, Any], start: int, end: int) -> bytes:
        if r["tool"] is not None:
            at = {"item_id": r["item"], "output_index": r["index"]}
            kind = "response.function_call_arguments.delta"
            return b"".join(self._event(r, kind, delta=p, **at) for p in r["pieces"][start:end])
        kind, at = "response.output_text.delta", self._at(r)
        return b"".join(
            self._event(r, kind, delta=p, logprobs=[], **at) for p in r["pieces"][start:end]
        )

    def tail(self, r: dict[str, Any]) -> bytes:
        whole = self.plain(r)
        if r.get("empty"):
            return self._event(r, "response.completed", response=whole)
        item, text = whole["output"][-1], "".join(r["pieces"])
        if r["tool"] is not None:
            at = {"item_id": r["item"], "output_index": r["index"]}
            out = self._event(r, "response.function_call_arguments.done", arguments=text, **at)
        else:
            out = self._event(r, "response.output_text.done", text=text, logprobs=[], **self._at(r))
            out += self._event(r, "response.content_part.done", part=_part(text), **self._at(r))
        out += self._event(r, "response.output_item.done", output_index=r["index"], item=item)
        kind = "response.completed" if whole["status"] == "completed" else "response.incomplete"
        return out + self._event(r, kind, response=whole)

    def error_event(self, r: dict[str, Any]) -> bytes:
        message = "simulated failure mid-stream"
        return self._event(r, "error", code="server_error", message=message, param=None)


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
