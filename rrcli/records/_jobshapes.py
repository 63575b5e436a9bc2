"""The five shapes a jobs line may take (SPEC §3), each checked and turned into chat messages.

``prompt`` (+ ``system``), ``messages``, ``session`` (``turns`` + ``system``) are rrcli's own;
``openai_batch`` (OpenAI Batch input lines) and ``anthropic_batch`` (Anthropic Message Batches
request lines) are the two batch APIs' files, read as they are. Every fault is a ``LineError``
whose message says what is wrong and how to fix it; ``records.jobs`` turns it into an
InvalidJob. ``model`` is always dropped: the routed backend's model is sent.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["BUILDERS", "LineError", "check_sendable", "raw_id", "shape", "type_name"]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
_COMMON = ("id", "custom_id", "session", "metadata")
_ALLOWED = {
    "prompt": frozenset({*_COMMON, "prompt", "system", "params"}),
    "messages": frozenset({*_COMMON, "messages", "system", "params"}),
    "session": frozenset({*_COMMON, "turns", "system", "params"}),
    "openai_batch": frozenset({*_COMMON, "method", "url", "body"}),
    "anthropic_batch": frozenset({*_COMMON, "params"}),
}
_SHAPE_KEYS = ("prompt", "messages", "turns", "body")
_OPENAI_BATCH_URL = "/v1/chat/completions"
_EMPTY: tuple[Any, ...] = ()
_MISSING = object()
_INT_RANGE = range(-(1 << 63), 1 << 64)  # the integers JSON encoders and APIs take

Parts = tuple[tuple[dict[str, Any], ...], tuple[str, ...], dict[str, Any], bool | None]


class LineError(Exception):
    """A line's fault; the message names the field and the fix."""


def type_name(value: object) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), type(value).__name__)


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


def _check_messages(messages: object, where: str) -> tuple[dict[str, Any], ...]:
    if type(messages) is not list:
        raise LineError(f"{where} must be an array of messages, got {type_name(messages)}")
    if not messages:
        raise LineError(f"{where} is empty — give at least one message")
    for i, m in enumerate(messages):
        if type(m) is not dict:
            raise LineError(f"{where}[{i}] must be an object with role and content")
        role = m.get("role")
        if role not in _ROLES:
            accepted = ", ".join(sorted(_ROLES))
            got = _json(role) if role is not None else "nothing"
            raise LineError(f"{where}[{i}].role must be one of {accepted}, got {got}")
        content = m.get("content", _MISSING)
        if type(content) not in (str, list) and not (content is None and role == "assistant"):
            got = "nothing" if content is _MISSING else type_name(content)
            raise LineError(
                f"{where}[{i}].content must be a string or an array of content parts, got {got}"
            )
    return tuple(messages)


def _check_params(params: object, where: str) -> dict[str, Any]:
    if params is None:
        return {}
    if type(params) is not dict:
        raise LineError(f"{where} must be an object, got {type_name(params)}")
    return params


def _pop_stream(params: dict[str, Any], where: str) -> bool | None:
    params.pop("model", None)  # the routed backend's model is sent
    if "stream" not in params:
        return None
    stream = params.pop("stream")
    if type(stream) is not bool:
        raise LineError(f"{where}.stream must be true or false, got {type_name(stream)}")
    return stream


def _system_message(system: object, where: str) -> tuple[dict[str, Any], ...]:
    if system is None:
        return _EMPTY
    if type(system) is str:
        return ({"role": "system", "content": system},)
    if type(system) is list and all(
        type(b) is dict and b.get("type") == "text" and type(b.get("text")) is str for b in system
    ):
        return ({"role": "system", "content": "\n".join(b["text"] for b in system)},)
    raise LineError(f"{where} must be a string, got {type_name(system)}")


def shape(obj: dict[str, Any]) -> str:
    """Which of the five shapes a line is (or a LineError naming why none fits)."""
    if "prompt" in obj:
        kind = "prompt"
    elif "messages" in obj:
        kind = "messages"
    elif "turns" in obj:
        kind = "session"
    elif "body" in obj or "url" in obj or "method" in obj:
        kind = "openai_batch"
    elif "params" in obj and "custom_id" in obj:
        kind = "anthropic_batch"
    else:
        raise LineError(
            "none of the job shapes — give prompt, messages or turns, or an OpenAI Batch "
            "line (custom_id, method, url, body) or an Anthropic Message Batches line "
            "(custom_id, params)"
        )
    allowed = _ALLOWED[kind]
    if not obj.keys() <= allowed:
        both = [k for k in _SHAPE_KEYS if k in obj]
        if len(both) > 1:
            raise LineError(f"has both {both[0]} and {both[1]} — use one shape a line")
        # Eval files carry their own fields ("answer", "category"): those are ignored. A key
        # that looks like a misspelt one of ours ("sytem") would silently change the request,
        # so it is refused with the fix.
        for extra in sorted(obj.keys() - allowed):
            hint = difflib.get_close_matches(extra, sorted(allowed), n=1, cutoff=0.8)
            if hint:
                raise LineError(
                    f"unknown key {_json(extra)} for a {kind} job (did you mean "
                    f'"{hint[0]}"? put fields of your own under metadata)'
                )
    return kind


def _prompt(obj: dict[str, Any]) -> Parts:
    prompt = obj["prompt"]
    if type(prompt) is not str:
        raise LineError(f"prompt must be a string, got {type_name(prompt)}")
    system = _system_message(obj.get("system"), "system")
    params = _check_params(obj.get("params"), "params")
    return (
        (*system, {"role": "user", "content": prompt}),
        _EMPTY,
        params,
        _pop_stream(params, "params"),
    )


def _messages(obj: dict[str, Any]) -> Parts:
    messages = _check_messages(obj["messages"], "messages")
    system = _system_message(obj.get("system"), "system")
    if system:
        if messages[0]["role"] == "system":
            raise LineError("has system and a leading system message — keep one")
        messages = system + messages
    params = _check_params(obj.get("params"), "params")
    return messages, _EMPTY, params, _pop_stream(params, "params")


def _session(obj: dict[str, Any]) -> Parts:
    turns = obj["turns"]
    if type(turns) is not list or not turns or any(type(t) is not str for t in turns):
        raise LineError("turns must be a non-empty array of strings (the user's turns)")
    params = _check_params(obj.get("params"), "params")
    system = _system_message(obj.get("system"), "system")
    return system, tuple(turns), params, _pop_stream(params, "params")


def _openai_batch(obj: dict[str, Any]) -> Parts:
    url = obj.get("url")
    if url != _OPENAI_BATCH_URL:
        raise LineError(
            f"url {_json(url)} is not supported — rrcli sends chat completions only: "
            f'"url": "{_OPENAI_BATCH_URL}"'
        )
    if obj.get("method", "POST") != "POST":
        raise LineError(f'method {_json(obj["method"])} — only "POST" is accepted')
    body = obj.get("body")
    if type(body) is not dict:
        raise LineError(
            f"body must be an object (the chat completion request), got {type_name(body)}"
        )
    if "messages" not in body:
        raise LineError("body.messages is missing")
    messages = _check_messages(body.pop("messages"), "body.messages")
    return messages, _EMPTY, body, _pop_stream(body, "body")


def _anthropic_batch(obj: dict[str, Any]) -> Parts:
    params = _check_params(obj["params"], "params")
    if "messages" not in params:
        raise LineError("params.messages is missing")
    messages = _check_messages(params.pop("messages"), "params.messages")
    system = _system_message(params.pop("system", None), "params.system")
    return system + messages, _EMPTY, params, _pop_stream(params, "params")


#: each shape's builder: a line's (messages, turns, params, stream)
BUILDERS: dict[str, Callable[[dict[str, Any]], Parts]] = {
    "prompt": _prompt,
    "messages": _messages,
    "session": _session,
    "openai_batch": _openai_batch,
    "anthropic_batch": _anthropic_batch,
}


def raw_id(obj: dict[str, Any]) -> tuple[object, str | None]:
    """(id as written or None, its key) — LineError for a wrong type."""
    name = "id"
    if "id" in obj:
        if "custom_id" in obj:
            raise LineError("has both id and custom_id — keep one")
        raw = obj["id"]
    elif "custom_id" in obj:
        raw, name = obj["custom_id"], "custom_id"
    else:
        return None, None
    if type(raw) is int:
        if raw not in _INT_RANGE:
            raise LineError(f"{name} {raw} does not fit in 64 bits — write it as a string")
        return raw, str(raw)
    if type(raw) is not str:
        raise LineError(f"{name} must be a string or an integer, got {type_name(raw)}")
    if not raw:
        raise LineError(f"{name} is empty — give the job a name or leave {name} out")
    if raw.startswith("line-") and raw[5:].isdigit():
        raise LineError(f'{name} "{raw}" is reserved for lines without an id — choose another')
    return raw, raw


def check_sendable(value: object, where: str) -> None:
    """LineError when ``value`` (what a request carries) holds an integer beyond 64 bits: no
    API takes one, and sending it changed would be worse than saying so."""
    if type(value) is int:
        if value not in _INT_RANGE:
            raise LineError(f"{where}: {value} does not fit in 64 bits — write it as a string")
    elif type(value) is dict:
        for key, item in value.items():
            check_sendable(item, f"{where}.{key}")
    elif type(value) in (list, tuple):
        for i, item in enumerate(value):
            check_sendable(item, f"{where}[{i}]")
