"""OpenAI chat completions (``openai_problem``): only chat completions fields; each message's
fields those of its role; ``stop`` at most 4 sequences; ``temperature`` 0-2, ``top_p`` 0-1,
``n`` 1-128, max tokens at least 1; ``top_logprobs`` only with ``logprobs``; ``metadata`` text
values; content text or a non-empty list of the parts its role takes (system, developer and
tool: text only); an assistant message with content or tool calls; each assistant's
``tool_calls`` answered by tool messages right after it, each tool message answering one of
them; function tools named ``[a-zA-Z0-9_-]{1,64}``, unique; ``tool_choice`` and
``parallel_tool_calls`` only with tools, a named choice one of them; ``response_format`` text,
json_object or json_schema with a valid name.
"""

from __future__ import annotations

import re
from typing import Any

from strict_common import NAME, Refused, number

#: POST /v1/chat/completions request fields
OPENAI_FIELDS = {
    "messages", "model", "audio", "frequency_penalty", "function_call", "functions",
    "logit_bias", "logprobs", "max_completion_tokens", "max_tokens", "metadata", "modalities",
    "n", "parallel_tool_calls", "prediction", "presence_penalty", "prompt_cache_key",
    "reasoning_effort", "response_format", "safety_identifier", "seed", "service_tier", "stop",
    "store", "stream", "stream_options", "temperature", "tool_choice", "tools", "top_logprobs",
    "top_p", "user", "verbosity", "web_search_options",
}  # fmt: skip
_OPENAI_MESSAGE_FIELDS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "name", "tool_calls", "refusal", "audio"},
    "tool": {"role", "content", "tool_call_id"},
}
_OPENAI_PARTS = {
    "system": {"text"},
    "developer": {"text"},
    "tool": {"text"},
    "user": {"text", "image_url", "input_audio", "file"},
    "assistant": {"text", "refusal"},
}


# --- OpenAI -------------------------------------------------------------------------------


def openai_problem(body: dict[str, Any]) -> str | None:
    """The 400 message the chat completions API answers ``body`` with, or None."""
    try:
        _openai(body)
    except Refused as exc:
        return str(exc)
    return None


def _openai(body: dict[str, Any]) -> None:
    for key in body:
        if key not in OPENAI_FIELDS:
            raise Refused(f"Unrecognized request argument supplied: {key}")
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise Refused("Invalid type for 'stop': expected a string or an array of strings")
        if len(stops) > 4:
            raise Refused(
                f"Invalid 'stop': array too long. Expected an array with maximum length 4, but "
                f"got an array with length {len(stops)} instead."
            )
    number(body, "temperature", 0, 2)
    number(body, "top_p", 0, 1)
    number(body, "n", 1, 128)
    number(body, "frequency_penalty", -2, 2)
    number(body, "presence_penalty", -2, 2)
    for key in ("max_tokens", "max_completion_tokens"):
        number(body, key, 1, 10**7)
    if body.get("top_logprobs") is not None and body.get("logprobs") is not True:
        raise Refused("Invalid value for 'top_logprobs': logprobs must be set to true")
    metadata = body.get("metadata")
    if metadata is not None and (
        not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values())
    ):
        raise Refused("Invalid 'metadata': values must be strings")
    if body.get("user") is not None and not isinstance(body["user"], str):
        raise Refused("Invalid type for 'user': expected a string")
    names = _openai_tools(body.get("tools"))
    _openai_choice(body, names)
    _openai_format(body.get("response_format"))
    _openai_messages(body.get("messages"))


def _openai_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list) or not tools:
        raise Refused("Invalid 'tools': empty array. Expected an array with minimum length 1")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if (
            tool.get("type") != "function"
            or not isinstance(function, dict)
            or set(tool) - {"type", "function"}
        ):
            raise Refused(f"Invalid value for 'tools[{i}]': expected a function tool")
        extra = set(function) - {"name", "description", "parameters", "strict"}
        if extra:
            where = f"tools[{i}].function.{sorted(extra)[0]}"
            raise Refused(f"Unrecognized request argument supplied: {where}")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise Refused(f"Invalid 'tools[{i}].function.name': string does not match pattern.")
        if name in names:
            raise Refused(f"Invalid 'tools': duplicate function name {name}")
        names.add(name)
        if "parameters" in function and not isinstance(function["parameters"], dict):
            raise Refused(f"Invalid type for 'tools[{i}].function.parameters': expected an object")
    return names


def _openai_choice(body: dict[str, Any], names: set[str]) -> None:
    choice = body.get("tool_choice")
    if (choice is not None or body.get("parallel_tool_calls") is not None) and not names:
        key = "tool_choice" if choice is not None else "parallel_tool_calls"
        raise Refused(f"Invalid value for '{key}': '{key}' is only allowed when 'tools' are given.")
    if choice is None or choice in ("none", "auto", "required"):
        return
    function = choice.get("function") if isinstance(choice, dict) else None
    if not isinstance(function, dict) or choice.get("type") != "function":
        raise Refused("Invalid value for 'tool_choice'")
    name = function.get("name")
    if name not in names:
        raise Refused(f"Invalid value for 'tool_choice': no function named {name} in 'tools'.")


def _openai_format(fmt: Any) -> None:
    if fmt is None:
        return
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind in ("text", "json_object"):
        return
    spec = fmt.get("json_schema") if kind == "json_schema" else None
    if (
        not isinstance(spec, dict)
        or not isinstance(spec.get("name"), str)
        or not NAME.fullmatch(spec["name"])
    ):
        raise Refused("Invalid 'response_format.json_schema.name': string does not match pattern.")


def _openai_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise Refused("Invalid 'messages': empty array. Expected an array with minimum length 1")
    waiting: set[str] = set()  # tool calls not answered yet
    answering = False  # right after an assistant's tool calls, or their tool messages
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in _OPENAI_MESSAGE_FIELDS:
            raise Refused(f"Invalid value for 'messages[{i}].role'")
        extra = set(message) - _OPENAI_MESSAGE_FIELDS[role]
        if extra:
            raise Refused(
                f"Unrecognized request argument supplied: messages[{i}].{sorted(extra)[0]}"
            )
        if role == "tool":
            if not answering or message.get("tool_call_id") not in waiting:
                raise Refused(
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
            waiting.discard(message["tool_call_id"])
        elif waiting:
            raise Refused(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(sorted(waiting))}"
            )
        else:
            answering = False
        calls = message.get("tool_calls") if role == "assistant" else None
        _openai_content(message.get("content"), role, i, calls=bool(calls))
        if calls:
            waiting = _openai_calls(calls, i)
            answering = True
    if waiting:
        raise Refused(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            f"to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
            f"{', '.join(sorted(waiting))}"
        )


def _openai_calls(calls: Any, i: int) -> set[str]:
    if not isinstance(calls, list):
        raise Refused(f"Invalid type for 'messages[{i}].tool_calls': expected an array")
    ids = set()
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or call.get("type") != "function"
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("arguments"), str)
            or not isinstance(function.get("name"), str)
        ):
            raise Refused(f"Invalid value for 'messages[{i}].tool_calls[{j}]'")
        ids.add(call["id"])
    return ids


def _openai_content(content: Any, role: str, i: int, *, calls: bool) -> None:
    if content is None:
        if role == "assistant" and calls:
            return
        raise Refused(f"Invalid value for 'messages[{i}].content': expected a string, got null.")
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise Refused(
            f"Invalid 'messages[{i}].content': empty array. Expected an array with minimum length 1"
        )
    for j, part in enumerate(content):
        _openai_part(part, role, f"messages[{i}].content[{j}]")


_PART_FIELDS = {"type", "text", "image_url", "input_audio", "file", "refusal"}
_IMAGE_URL = re.compile(r"https?://.*|data:image/[a-z]+;base64,.*", re.DOTALL)


def _openai_part(part: Any, role: str, where: str) -> None:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in _OPENAI_PARTS[role]:
        supported = sorted(_OPENAI_PARTS[role])
        raise Refused(f"Invalid value: '{kind}'. Supported values are: {supported} ({where})")
    if kind == "text" and not isinstance(part.get("text"), str):
        raise Refused(f"Missing required parameter: '{where}.text'.")
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else None
        if not isinstance(url, str) or not _IMAGE_URL.fullmatch(url):
            raise Refused(f"Invalid '{where}.image_url.url': expected a URL or an image data URL")
    extra = set(part) - _PART_FIELDS
    if extra:
        raise Refused(f"Unrecognized request argument supplied: {where}.{sorted(extra)[0]}")
