"""OpenAI-shaped requests as Anthropic Messages requests: one half of ``translate``'s table.

``to_anthropic`` writes the request; what it can say at all is ``_anthropic_sayable``'s
(``EXPRESSIBLE``, ``unsayable``), checked before a job is routed here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rrcli.errors import UntranslatableError
from rrcli.providers._anthropic_sayable import (
    EXPRESSIBLE,
    file_source,
    image_source,
    schema_format,
)
from rrcli.providers._to_openai import apply_rules, call_arguments, text_of
from rrcli.tokens import whole_tokens

__all__ = ["answer_name", "to_anthropic"]

_ANSWER = "Answer by calling this tool: its input is the answer."
_Rule = Callable[[dict[str, Any], str, Any], None]


def to_anthropic(messages: list[dict[str, Any]], params: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI-shaped request as a Messages body, without ``model``, ``stream`` or the default
    ``max_tokens`` (the adapter's)."""
    body = apply_rules(_RULES, params)
    _answer_tool(body, params)
    if params.get("parallel_tool_calls") is False and body.get("tools"):
        choice = body.get("tool_choice")
        choice = choice if isinstance(choice, dict) else {"type": "auto"}
        if choice.get("type") != "none":
            body["tool_choice"] = {**choice, "disable_parallel_tool_use": True}
    system, body["messages"] = _anthropic_messages(messages)
    if system is not None:
        body["system"] = system
    return body


def _default(body: dict[str, Any], key: str, value: Any) -> None:
    if not EXPRESSIBLE[key](value):
        body[key] = value  # the router keeps such a job away; sent, the server says why


def _max_tokens(body: dict[str, Any], key: str, value: Any) -> None:
    """The larger of the two spellings, as a budget reserves them (``tokens.output_cap``)."""
    held = body.get("max_tokens")
    if held is None or (whole_tokens(value) or 0) > (whole_tokens(held) or 0):
        body["max_tokens"] = value


def _user(body: dict[str, Any], key: str, value: Any) -> None:
    metadata = body.get("metadata")
    metadata = body["metadata"] = dict(metadata) if isinstance(metadata, dict) else {}
    if key == "user" or "user_id" not in metadata:
        metadata["user_id"] = value


def _metadata(body: dict[str, Any], key: str, value: Any) -> None:
    """Merged under a user_id that ``user`` already set (``user`` wins)."""
    if isinstance(value, dict):
        body["metadata"] = {**value, **body.get("metadata", {})}
    elif "metadata" not in body:
        body["metadata"] = value  # the router keeps such a job away; sent, the server says why


def _anthropic_tools(body: dict[str, Any], key: str, tools: Any) -> None:
    body["tools"] = [_anthropic_tool(t) for t in tools] if isinstance(tools, list) else tools


def _anthropic_tool(tool: Any) -> Any:
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict) or tool.get("type") != "function":
        return tool  # already an Anthropic tool (or no tool the router lets through)
    out = {"name": function.get("name")}
    if function.get("description"):
        out["description"] = function["description"]
    out["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    if "cache_control" in tool:
        out["cache_control"] = tool["cache_control"]
    return out


_CHOICES = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}


def _tool_choice(body: dict[str, Any], key: str, choice: Any) -> None:
    if isinstance(choice, str) and choice in _CHOICES:
        body["tool_choice"] = dict(_CHOICES[choice])
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        body["tool_choice"] = {"type": "tool", "name": choice["function"].get("name")}
    else:
        body["tool_choice"] = choice


def _answer_tool(body: dict[str, Any], params: Mapping[str, Any]) -> None:
    """A json_schema response_format as a tool whose input is the answer: forced, unless the job
    has tools of its own it may call (then some tool call is required)."""
    name = answer_name(params)
    if name is None:
        return
    spec = params["response_format"]["json_schema"]
    tool = {
        "name": name,
        "description": spec.get("description") or _ANSWER,
        "input_schema": spec.get("schema") or {"type": "object"},
    }
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else "auto"
    others = body.get("tools") if isinstance(body.get("tools"), list) else []
    body["tools"] = [*others, tool]
    if not others or kind == "none":
        body["tool_choice"] = {"type": "tool", "name": name}
    elif kind != "tool":
        body["tool_choice"] = {"type": "any"}


def answer_name(params: Mapping[str, Any]) -> str | None:
    """The answer tool's name: the json_schema's, numbered when one of the job's own tools has
    it (Anthropic refuses two tools of one name); None without a json_schema."""
    fmt = params.get("response_format")
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return None
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict):
        return None
    base = name = spec.get("name") or "response"
    tools = params.get("tools")
    names = (_tool_name(t) for t in tools) if isinstance(tools, list) else ()
    taken = {n for n in names if isinstance(n, str)}
    count = 0
    while name in taken:
        count += 1
        name = f"{str(base)[:60]}_{count}"
    return name


def _tool_name(tool: Any) -> Any:
    function = tool.get("function") if isinstance(tool, dict) else None
    if isinstance(function, dict):
        return function.get("name")
    return tool.get("name") if isinstance(tool, dict) else None


def _stop(body: dict[str, Any], key: str, value: Any) -> None:
    body["stop_sequences"] = [value] if isinstance(value, str) else value


def _service_tier(body: dict[str, Any], key: str, value: Any) -> None:
    body[key] = "standard_only" if value == "default" else value


def _response_format(body: dict[str, Any], key: str, value: Any) -> None:
    if not schema_format(value):  # text says nothing; json_schema is the answer tool
        body[key] = value


def _ignore(body: dict[str, Any], key: str, value: Any) -> None:
    """parallel_tool_calls is read with tool_choice; stream, stream_options and model are
    rrcli's (the call streams or not, the model is the backend's)."""


_RULES: dict[str, _Rule] = {
    "max_tokens": _max_tokens,
    "max_completion_tokens": _max_tokens,
    "stop": _stop,
    "tools": _anthropic_tools,
    "tool_choice": _tool_choice,
    "user": _user,
    "safety_identifier": _user,
    "metadata": _metadata,
    "service_tier": _service_tier,
    "response_format": _response_format,
    **dict.fromkeys(("parallel_tool_calls", "stream", "stream_options", "model"), _ignore),
    **dict.fromkeys(
        (
            "n",
            "logprobs",
            "top_logprobs",
            "frequency_penalty",
            "presence_penalty",
            "logit_bias",
            "store",
            "modalities",
        ),
        _default,
    ),
}


def _anthropic_messages(messages: list[dict[str, Any]]) -> tuple[Any, list[dict[str, Any]]]:
    """(system, messages): system and developer messages gathered into ``system``; tool
    messages as tool_result blocks, consecutive ones in one user message; an assistant turn as
    ``_anthropic_assistant`` says it."""
    system: list[Any] = []
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None
    for i, message in enumerate(messages):
        role, content, where = message.get("role"), message.get("content"), f"messages[{i}]"
        if role in ("system", "developer"):
            system.append(content)
        elif role == "tool":
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id")}
            block["content"] = _tool_result(content, where)
            results.append(block)
        elif role == "assistant":
            results = None
            said = _anthropic_assistant(message, where, final=i == len(messages) - 1)
            if said is not None:
                out.append(said)
        elif role == "user":
            results = None
            out.append({"role": "user", "content": _anthropic_content(content, where)})
        else:
            raise UntranslatableError(f"{where}: a {role} message has no form in Anthropic's API")
    return _anthropic_system(system), out


def _anthropic_system(contents: list[Any]) -> str | list[dict[str, Any]] | None:
    if not contents:
        return None
    parts = [p for c in contents if isinstance(c, list) for p in c if isinstance(p, dict)]
    if any("cache_control" in p for p in parts):
        return [
            {"type": "text", "text": c} if isinstance(c, str) else p
            for c in contents
            for p in (c if isinstance(c, list) else [c])
        ]
    return "\n\n".join(text_of(c) for c in contents)


def _anthropic_assistant(
    message: dict[str, Any], where: str, *, final: bool
) -> dict[str, Any] | None:
    """An assistant turn as Anthropic takes it: a refusal as its text; a turn that said nothing
    (no text, no tool call) left out where it is not the last (Anthropic refuses empty content
    there and joins the turns around it, as it joins any two of one role); the text of the
    last, which Anthropic continues, without trailing whitespace (which it refuses)."""
    content, calls = message.get("content"), message.get("tool_calls")
    if message.get("function_call") is not None:
        raise UntranslatableError(f"{where}.function_call: use tool_calls for Anthropic backends")
    if calls is not None and not isinstance(calls, list):
        raise UntranslatableError(f"{where}.tool_calls is not a list of tool calls")
    blocks: list[Any] = []
    if isinstance(content, list):
        blocks.extend(_anthropic_content(content, where))
    elif content:
        blocks.append({"type": "text", "text": content})
    if not blocks and isinstance(message.get("refusal"), str):
        blocks.append({"type": "text", "text": message["refusal"]})
    blocks = [b for b in blocks if not _empty_text(b)]
    blocks.extend(_tool_use(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(calls or ()))
    if final and blocks and _text_block(blocks[-1]):
        blocks[-1] = {**blocks[-1], "text": blocks[-1]["text"].rstrip()}
        blocks = [b for b in blocks if not _empty_text(b)]
    if not blocks:
        return {"role": "assistant", "content": ""} if final else None
    if (
        len(blocks) == 1
        and _text_block(blocks[0])
        and blocks[0].keys() == {"type", "text"}
        and not calls
    ):
        return {"role": "assistant", "content": blocks[0]["text"]}
    return {"role": "assistant", "content": blocks}


def _text_block(block: Any) -> bool:
    """A text block whose text is a string (content parts arrive unchecked: any JSON)."""
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
    )


def _empty_text(block: Any) -> bool:
    return (
        isinstance(block, dict)
        and block.get("type") == "text"
        and not str(block.get("text")).strip()
    )


def _tool_result(content: Any, where: str) -> Any:
    """A tool message's content as a tool_result's: text parts as one text (Anthropic refuses
    an empty text block, and the chat completions API takes only text here)."""
    if content is None:
        return ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type") == "text" for p in content
    ):
        return text_of(content, where)
    return _anthropic_content(content, where)


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise UntranslatableError(f"{where} is not a function call")
    arguments = call_arguments(
        function.get("arguments"), where, "Anthropic needs the tool call's input as an object"
    )
    return {
        "type": "tool_use",
        "id": call.get("id"),
        "name": function.get("name"),
        "input": arguments,
    }


def _anthropic_content(content: Any, where: str) -> Any:
    if not isinstance(content, list):
        return content
    return [_anthropic_part(p, f"{where}.content[{j}]") for j, p in enumerate(content)]


def _anthropic_part(part: Any, where: str) -> Any:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "image_url":
        return _block("image", image_source(part), part, where, "an image URL or base64 data")
    if kind == "file":
        return _block("document", file_source(part), part, where, "a PDF as base64 file_data")
    if kind == "refusal":
        return {"type": "text", "text": part.get("refusal", "")}
    if kind == "input_audio":
        raise UntranslatableError(f"{where}: an input_audio part has no form in Anthropic's API")
    return part  # text, or already an Anthropic block (a pause_turn continuation's)


def _block(
    kind: str, source: dict[str, Any] | None, part: dict[str, Any], where: str, takes: str
) -> dict[str, Any]:
    """An image or document block of ``source``; a part without one has no form there."""
    if source is None:
        raise UntranslatableError(f"{where}: Anthropic's {kind} blocks take {takes} only")
    block = {"type": kind, "source": source}
    if "cache_control" in part:
        block["cache_control"] = part["cache_control"]
    return block
