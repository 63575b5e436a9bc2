"""The shapes a jobs line may take, each checked and turned into its request parts.

Chat: ``prompt`` (+ ``system``), ``messages``, ``session`` (``turns`` + ``system``) are rrcli's
own; ``openai_batch`` (OpenAI Batch input lines) and ``anthropic_batch`` (Anthropic Message
Batches request lines) are the two batch APIs' files, read as they are. The other endpoints
(``"endpoint": "embeddings" | "responses" | "completions" | "moderations"``, or an OpenAI Batch
line's ``url``) carry their ``input`` (completions: ``prompt``) instead of messages. Every fault
is a ``LineError`` whose message says what is wrong and how to fix it; ``records.jobs`` turns it
into an InvalidJob. ``model`` is always dropped: the routed backend's model is sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from rrcli.diagnostic import closest
from rrcli.errors import LineError
from rrcli.registry import BATCH_URLS, ENDPOINTS, UNSTREAMED

__all__ = [
    "BUILDERS",
    "INPUT_FIELDS",
    "anthropic_request",
    "check_sendable",
    "openai_request",
    "raw_id",
    "shape",
    "type_name",
]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# OpenAI's request types let an assistant message leave its content out or null (beside
# tool_calls, a refusal or audio: an agent's history dumped with exclude_none has no content
# key) and a function message's content be null; every other message says something.
_MAY_BE_EMPTY = frozenset({"assistant", "function"})
_COMMON = ("id", "custom_id", "session", "metadata")
#: what each non-chat endpoint's job carries in place of messages (OpenAI's own field name)
INPUT_FIELDS = {
    "embeddings": "input",
    "responses": "input",
    "completions": "prompt",
    "moderations": "input",
}
_ALLOWED = {
    "prompt": frozenset({*_COMMON, "endpoint", "prompt", "system", "params"}),
    "messages": frozenset({*_COMMON, "endpoint", "messages", "system", "params"}),
    "session": frozenset({*_COMMON, "endpoint", "turns", "system", "params"}),
    "openai_batch": frozenset({*_COMMON, "method", "url", "body"}),
    "anthropic_batch": frozenset({*_COMMON, "params"}),
    **{e: frozenset({*_COMMON, "endpoint", f, "params"}) for e, f in INPUT_FIELDS.items()},
}
_KNOWN = frozenset().union(*_ALLOWED.values())  # every key a line of any shape may hold
# Eval files carry their own fields ("answer", "category"), so only a key much like one of ours
# reads as a misspelling of it (every key of a profile is ours: there the bar is lower).
_CLOSE = 0.8
_SHAPE_KEYS = ("prompt", "messages", "turns", "body")
_OTHER_SHAPES = ("prompt", "messages", "turns", "system", "input", "body", "url", "method")
_EMPTY: tuple[Any, ...] = ()
_MISSING = object()
_INT_RANGE = range(-(1 << 63), 1 << 64)  # the integers JSON encoders and APIs take

#: a line's (messages, turns, params, stream, endpoint, input): a chat job's input is None, a
#: non-chat job's messages and turns are empty
Parts = tuple[tuple[dict[str, Any], ...], tuple[str, ...], dict[str, Any], bool | None, str, Any]


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
        if type(content) in (str, list):
            continue
        if (content is None or content is _MISSING) and role in _MAY_BE_EMPTY:
            continue
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
    """Which shape a line is: a chat shape, or the non-chat endpoint it names (or a LineError
    naming why none fits)."""
    endpoint = obj.get("endpoint", "chat")
    if endpoint != "chat":
        kind = _endpoint_shape(obj, endpoint)
    elif "prompt" in obj:
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
        for key in sorted(obj.keys() - _KNOWN):
            hint = closest(key, _KNOWN, cutoff=_CLOSE)
            if hint is not None:
                raise LineError(f"unknown key {_json(key)} (did you mean {_json(hint)}?)")
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
            hint = closest(extra, allowed, cutoff=_CLOSE)
            if hint is not None:
                raise LineError(
                    f"unknown key {_json(extra)} for {_a(kind)} job (did you mean "
                    f"{_json(hint)}? put fields of your own under metadata)"
                )
    return kind


def _a(kind: str) -> str:
    """``kind`` with its indefinite article: "a prompt", "an embeddings"."""
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _endpoint_shape(obj: dict[str, Any], endpoint: object) -> str:
    """The non-chat endpoint a line names: its input field there, no chat shape's key."""
    if type(endpoint) is not str or endpoint not in INPUT_FIELDS:
        hint = closest(endpoint, ENDPOINTS) if type(endpoint) is str else None
        fix = f"did you mean {_json(hint)}" if hint else "name one of them"
        raise LineError(
            f"endpoint {_json(endpoint)} is not one of {', '.join(ENDPOINTS)} — {fix}, or "
            "leave endpoint out for a chat job"
        )
    field = INPUT_FIELDS[endpoint]
    job = f"{_a(endpoint)} job"
    for key in _OTHER_SHAPES:
        if key in obj and key != field:
            raise LineError(f"{job} takes {field}, not {key}")
    if field not in obj:
        raise LineError(f"{job} needs {field} (what to send to /{endpoint})")
    return endpoint


def _prompt(obj: dict[str, Any]) -> Parts:
    prompt = obj["prompt"]
    if type(prompt) is not str:
        raise LineError(f"prompt must be a string, got {type_name(prompt)}")
    user = {"role": "user", "content": prompt}
    system = obj.get("system")
    messages = (user,) if system is None else (*_system_message(system, "system"), user)
    params = obj.get("params")
    if params is None:  # the most common line: no params to check, none to pop
        return messages, _EMPTY, {}, None, "chat", None
    params = _check_params(params, "params")
    return messages, _EMPTY, params, _pop_stream(params, "params"), "chat", None


def _messages(obj: dict[str, Any]) -> Parts:
    messages = _check_messages(obj["messages"], "messages")
    system = _system_message(obj.get("system"), "system")
    if system:
        if messages[0]["role"] == "system":
            raise LineError("has system and a leading system message — keep one")
        messages = system + messages
    params = _check_params(obj.get("params"), "params")
    return messages, _EMPTY, params, _pop_stream(params, "params"), "chat", None


def _session(obj: dict[str, Any]) -> Parts:
    turns = obj["turns"]
    if type(turns) is not list or not turns or any(type(t) is not str for t in turns):
        raise LineError("turns must be a non-empty array of strings (the user's turns)")
    params = _check_params(obj.get("params"), "params")
    system = _system_message(obj.get("system"), "system")
    return system, tuple(turns), params, _pop_stream(params, "params"), "chat", None


def _openai_batch(obj: dict[str, Any]) -> Parts:
    url = obj.get("url")
    endpoint = BATCH_URLS.get(url) if type(url) is str else None
    if endpoint is None:
        accepted = ", ".join(f'"{u}"' for u in BATCH_URLS)
        raise LineError(f"url {_json(url)} is not an endpoint rrcli sends — use one of {accepted}")
    if obj.get("method", "POST") != "POST":
        raise LineError(f'method {_json(obj["method"])} — only "POST" is accepted')
    body = obj.get("body")
    if type(body) is not dict:
        raise LineError(f"body must be an object (the {url} request), got {type_name(body)}")
    return openai_request(endpoint, body)


def openai_request(endpoint: str, body: dict[str, Any]) -> Parts:
    """The parts of an OpenAI request's ``body`` to ``endpoint`` (an OpenAI Batch line's, or
    one ``rrcli serve`` received); its messages or input are taken out of it."""
    if endpoint != "chat":
        field = INPUT_FIELDS[endpoint]
        if field not in body:
            raise LineError(f"body.{field} is missing (what to send to /v1/{endpoint})")
        return _endpoint_parts(endpoint, body.pop(field), f"body.{field}", body, "body")
    if "messages" not in body:
        raise LineError("body.messages is missing")
    messages = _check_messages(body.pop("messages"), "body.messages")
    return messages, _EMPTY, body, _pop_stream(body, "body"), "chat", None


def _anthropic_batch(obj: dict[str, Any]) -> Parts:
    return anthropic_request(_check_params(obj["params"], "params"), "params")


def anthropic_request(params: dict[str, Any], where: str) -> Parts:
    """The parts of an Anthropic Messages request (a Message Batches line's ``params``, or the
    body ``rrcli serve`` received, named ``where``); its messages are taken out of it."""
    if "messages" not in params:
        raise LineError(f"{where}.messages is missing")
    messages = _check_messages(params.pop("messages"), f"{where}.messages")
    system = _system_message(params.pop("system", None), f"{where}.system")
    return system + messages, _EMPTY, params, _pop_stream(params, where), "chat", None


def _endpoint_job(obj: dict[str, Any]) -> Parts:
    """An rrcli line naming a non-chat endpoint: its input field and params."""
    endpoint = obj["endpoint"]
    field = INPUT_FIELDS[endpoint]
    params = _check_params(obj.get("params"), "params")
    if field in params:
        raise LineError(f"has {field} and params.{field} — keep {field}")
    return _endpoint_parts(endpoint, obj[field], field, params, "params")


def _endpoint_parts(
    endpoint: str, value: object, where_input: str, params: dict[str, Any], where: str
) -> Parts:
    """A non-chat request: its input (at ``where_input``) and its params (at ``where``)."""
    _INPUT_CHECKS[endpoint](value, where_input)
    stream = _pop_stream(params, where)
    if stream and endpoint in UNSTREAMED:
        raise LineError(f"{where}.stream: /{endpoint} has no streamed form — remove it")
    previous = params.get("previous_response_id")
    if previous is not None and (type(previous) is not str or not previous):
        raise LineError(
            f"{where}.previous_response_id must be a response id, got {_json(previous)}"
        )
    return _EMPTY, _EMPTY, params, stream, endpoint, value


def _texts(value: object, where: str) -> None:
    """Embeddings' and completions' input: a text, a token array, or a non-empty array of
    either."""
    if type(value) is str or _tokens(value):
        return
    if type(value) is list and value and all(type(v) is str or _tokens(v) for v in value):
        return
    raise LineError(
        f"{where} must be a string or a non-empty array of strings (or of token arrays), "
        f"got {type_name(value) if value != [] else 'an empty array'}"
    )


def _tokens(value: object) -> bool:
    return type(value) is list and bool(value) and all(type(v) is int for v in value)


def _items(value: object, where: str) -> None:
    """The Responses API's input: a text, or a non-empty array of input items (objects)."""
    if type(value) is str or (
        type(value) is list and value and all(type(v) is dict for v in value)
    ):
        return
    raise LineError(
        f"{where} must be a string or a non-empty array of input items (objects such as "
        f'{{"role": "user", "content": "..."}}), got {type_name(value)}'
    )


def _moderated(value: object, where: str) -> None:
    """Moderations' input: a text, an array of texts, or an array of content parts (objects)."""
    if type(value) is list and value and all(type(v) is dict for v in value):
        return
    if type(value) is str or (type(value) is list and value and all(type(v) is str for v in value)):
        return
    raise LineError(
        f"{where} must be a string, an array of strings or an array of content parts, "
        f"got {type_name(value)}"
    )


_INPUT_CHECKS: dict[str, Callable[[object, str], None]] = {
    "embeddings": _texts,
    "responses": _items,
    "completions": _texts,
    "moderations": _moderated,
}


#: each shape's builder: a line's Parts
BUILDERS: dict[str, Callable[[dict[str, Any]], Parts]] = {
    "prompt": _prompt,
    "messages": _messages,
    "session": _session,
    "openai_batch": _openai_batch,
    "anthropic_batch": _anthropic_batch,
    **dict.fromkeys(INPUT_FIELDS, _endpoint_job),
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
