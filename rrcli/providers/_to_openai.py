"""Anthropic-shaped requests as chat completions requests: the other half of ``translate``'s
table.

``EXPRESSIBLE`` says, for each Messages field the chat completions API lacks or restricts,
whether a value can be said there; ``to_openai`` writes the request, ``cache_control`` removed
everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from rrcli.errors import UntranslatableError

__all__ = ["EXPRESSIBLE", "text_of", "to_openai"]

_Rule = Callable[[dict[str, Any], str, Any], None]


def _always(value: object) -> bool:
    return True


def _client_tools(tools: object) -> bool:
    """Tools with an input schema (or OpenAI's own); not Anthropic's server tools."""
    return isinstance(tools, list) and all(
        isinstance(t, dict) and (t.get("type") == "function" or "input_schema" in t) for t in tools
    )


#: the most stop sequences the chat completions API takes
MAX_STOP = 4
#: Messages field → whether the chat completions API can express its value.
EXPRESSIBLE: dict[str, Callable[[Any], bool]] = {
    "top_k": lambda v: False,
    "thinking": lambda v: isinstance(v, dict) and v.get("type") == "disabled",
    "tools": _client_tools,
    "service_tier": lambda v: v in ("auto", "standard_only"),
    "stop_sequences": lambda v: not isinstance(v, list) or len(v) <= MAX_STOP,
    **dict.fromkeys(
        ["max_tokens", "system", "temperature", "top_p", "tool_choice", "metadata"], _always
    ),
}


def apply_rules(
    rules: Mapping[str, Callable[[dict[str, Any], str, Any], None]], params: Mapping[str, Any]
) -> dict[str, Any]:
    """A body from ``params``: each field through its rule (which writes what the other API
    says for it), a field without one as it is, a null dropped (it says nothing, and may be no
    field of the other API)."""
    body: dict[str, Any] = {}
    for key, value in params.items():
        if value is None:
            continue
        rule = rules.get(key)
        if rule is None:
            body[key] = value
        else:
            rule(body, key, value)
    return body


def to_openai(messages: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """An Anthropic-shaped request as a chat completions body, without ``model`` or
    ``stream``; ``cache_control`` removed everywhere."""
    body = apply_rules(_RULES, params)
    system = params.get("system")
    if system is not None:
        messages = [{"role": "system", "content": text_of(system, "system")}, *messages]
    body["messages"] = _openai_messages(messages)
    return body


def _openai_tool(tool: Any) -> Any:
    if not isinstance(tool, dict) or "input_schema" not in tool:
        return tool  # already an OpenAI tool (the router keeps server tools away)
    function = {"name": tool.get("name")}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool["input_schema"]
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


_OPENAI_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _openai_choice(body: dict[str, Any], key: str, choice: Any) -> None:
    kind = choice.get("type") if isinstance(choice, dict) else None
    kind = kind if isinstance(kind, str) else None
    if kind in _OPENAI_CHOICES:
        body["tool_choice"] = _OPENAI_CHOICES[kind]
    elif kind == "tool":
        body["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    else:
        body["tool_choice"] = choice
    if kind and choice.get("disable_parallel_tool_use"):
        body["parallel_tool_calls"] = False


def _openai_metadata(body: dict[str, Any], key: str, value: Any) -> None:
    rest = dict(value) if isinstance(value, dict) else {}
    if rest.get("user_id") is not None:
        body["user"] = rest.pop("user_id")
    if rest:
        body["metadata"] = rest


def _stop(body: dict[str, Any], key: str, value: Any) -> None:
    body["stop"] = value


def _tools(body: dict[str, Any], key: str, tools: Any) -> None:
    body[key] = [_openai_tool(t) for t in tools] if isinstance(tools, list) else tools


def _thinking(body: dict[str, Any], key: str, value: Any) -> None:
    if not EXPRESSIBLE[key](value):  # disabled says nothing; the router keeps the rest away
        body[key] = value


def _service_tier(body: dict[str, Any], key: str, value: Any) -> None:
    body[key] = "default" if value == "standard_only" else value


def _ignore(body: dict[str, Any], key: str, value: Any) -> None:
    """system becomes the leading message; stream and model are rrcli's."""


_RULES: dict[str, _Rule] = {
    "stop_sequences": _stop,
    "tools": _tools,
    "tool_choice": _openai_choice,
    "metadata": _openai_metadata,
    "thinking": _thinking,
    "service_tier": _service_tier,
    **dict.fromkeys(("system", "stream", "model"), _ignore),
}


def _openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if not isinstance(content, list):
            out.append(message)
        elif role == "assistant":
            out.append(_openai_assistant(content, f"messages[{i}]"))
        elif role == "system":
            out.append({"role": "system", "content": text_of(content, f"messages[{i}]")})
        else:
            out.extend(_openai_user(message, content, f"messages[{i}]"))
    return out


def _openai_user(message: dict[str, Any], content: list[Any], where: str) -> list[dict[str, Any]]:
    """tool_result blocks as tool messages (first, as Anthropic places them), then the rest."""
    tools, parts = [], []
    for j, block in enumerate(content):
        here = f"{where}.content[{j}]"
        if isinstance(block, dict) and block.get("type") == "tool_result":
            text = text_of(block.get("content"), here)
            tools.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": text}
            )
        else:
            parts.append(_openai_part(block, here))
    return (
        [*tools, {"role": message.get("role"), "content": parts}] if parts or not tools else tools
    )


def _openai_part(block: Any, where: str) -> Any:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image":
        source = block.get("source")
        source = source if isinstance(source, dict) else {}
        if source.get("type") == "url":
            return {"type": "image_url", "image_url": {"url": source.get("url")}}
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type')};base64,{source.get('data')}"
            return {"type": "image_url", "image_url": {"url": url}}
    elif kind == "document":
        source = block.get("source")
        source = source if isinstance(source, dict) else {}
        if source.get("type") == "base64" and source.get("media_type") == "application/pdf":
            data = f"data:application/pdf;base64,{source.get('data')}"
            title = block.get("title")
            name = title if isinstance(title, str) and title else "document.pdf"
            return {"type": "file", "file": {"filename": name, "file_data": data}}
    elif kind in ("image_url", "input_audio", "file"):
        return block  # already an OpenAI part
    raise UntranslatableError(f"{where}: {_kind(block)} has no form in the chat completions API")


def _openai_assistant(content: list[Any], where: str) -> dict[str, Any]:
    texts, calls, thinking = [], [], []
    for j, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            texts.append(_string(block, kind, where))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif kind == "thinking":
            thinking.append(_string(block, kind, where))
        elif kind != "redacted_thinking":
            raise UntranslatableError(
                f"{where}.content[{j}]: {_kind(block)} has no form in the chat completions API"
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if calls:
        message["content"] = message["content"] or None
        message["tool_calls"] = calls
    if thinking:
        message["reasoning_content"] = "".join(thinking)
    return message


def _kind(block: Any) -> str:
    kind = block.get("type") if isinstance(block, dict) else None
    return f"a {kind} block" if isinstance(kind, str) else "a block without a type"


def text_of(content: Any, where: str = "") -> str:
    """Content as text: a string, or its text parts joined; any other part is refused."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise UntranslatableError(f"{where}: content that is neither text nor a list of parts")
    return "".join(_string(part, "text", where) for part in content)


def call_arguments(text: Any, where: str, needs: str) -> dict[str, Any]:
    """A chat completions tool call's ``function.arguments`` as an object: its JSON text parsed
    (empty or absent: ``{}``; an object as it is), or UntranslatableError saying ``needs``."""
    if text is None or text == "":
        return {}
    if isinstance(text, dict):
        return text
    try:
        value = orjson.loads(text)
    except (orjson.JSONDecodeError, TypeError) as exc:
        raise UntranslatableError(
            f"{where}.function.arguments is not JSON ({exc}) — {needs}"
        ) from None
    if not isinstance(value, dict):
        raise UntranslatableError(f"{where}.function.arguments is not a JSON object")
    return value


def _string(block: Any, key: str, where: str) -> str:
    """A text or thinking block's text."""
    value = block.get(key) if isinstance(block, dict) and block.get("type") == key else None
    if not isinstance(value, str):
        raise UntranslatableError(f"{where}: only text can be sent here, not {_kind(block)}")
    return value
