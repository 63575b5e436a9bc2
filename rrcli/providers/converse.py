"""A Messages request (Anthropic's shape) as a Bedrock Converse request, and the Converse
answer's words back in rrcli's.

The bedrock adapter speaks the ``anthropic`` dialect: an OpenAI-shaped job is first translated by
the one table (``translate.to_anthropic``), then spelled here, so both client APIs reach Converse
by the rows already written once. The rows: ``system`` → ``system`` text blocks; content blocks
``text``, ``image`` (base64) and ``document`` (base64 PDF) → ``text``, ``image``, ``document``;
``tool_use`` / ``tool_result`` (``is_error`` → ``status: error``) → ``toolUse`` / ``toolResult``;
``thinking`` / ``redacted_thinking`` → ``reasoningContent``; ``cache_control`` on a system, message
or tool block → a ``cachePoint`` block after it; ``tools`` → ``toolConfig.tools[].toolSpec``,
``tool_choice`` auto/any/tool → ``toolConfig.toolChoice`` (``none`` sends the tools without a
choice: Converse has no ``none``; a history with tool calls and no tools declares the tools it
called, as Converse refuses tool blocks without a toolConfig; a tool result with no text says
``(empty)``, as Converse refuses blank text); ``max_tokens``, ``temperature``, ``top_p``,
``stop_sequences`` → ``inferenceConfig``; ``top_k`` and ``thinking`` →
``additionalModelRequestFields`` (the model's own fields); blank text is left out (a message
with nothing else is untranslatable). Converse's own fields (a backend's ``params``:
``guardrailConfig``...) pass unchanged; ``metadata`` and ``service_tier`` say nothing
Converse takes and are dropped; any other field, and content with no Converse block (an image by
URL), raises ``UntranslatableError``: nothing is sent.

Pure: no HTTP client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rrcli.errors import UntranslatableError
from rrcli.vocabulary import finish_reason_from_anthropic

__all__ = ["CONVERSE_FIELDS", "EMPTY_RESULT", "finish_reason", "to_converse"]

#: The Converse request's own top-level fields (the body; the model is in the path)
CONVERSE_FIELDS = frozenset(
    {
        "messages",
        "system",
        "inferenceConfig",
        "toolConfig",
        "guardrailConfig",
        "additionalModelRequestFields",
        "additionalModelResponseFieldPaths",
        "promptVariables",
        "requestMetadata",
        "performanceConfig",
        "serviceTier",
        "outputConfig",
    }
)
_INFERENCE = {
    "max_tokens": "maxTokens",
    "temperature": "temperature",
    "top_p": "topP",
    "stop_sequences": "stopSequences",
}
_MODEL_FIELDS = ("top_k", "thinking")
_DROPPED = frozenset({"model", "stream", "metadata", "service_tier"})
_CACHE_POINT = {"cachePoint": {"type": "default"}}
#: what a tool result with no content says (Converse refuses a blank text block)
EMPTY_RESULT = "(empty)"
#: Converse's stop reasons that Anthropic's words do not name
_FINISH = {"guardrail_intervened": "content_filter", "content_filtered": "content_filter"}


def finish_reason(stop_reason: object) -> str | None:
    """The result's finish reason for a Converse ``stopReason``."""
    if not isinstance(stop_reason, str):
        return None
    return _FINISH.get(stop_reason) or finish_reason_from_anthropic(stop_reason)


def to_converse(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Messages request body as a Converse request body (see the module docstring)."""
    out: dict[str, Any] = {}
    inference: dict[str, Any] = {}
    model_fields: dict[str, Any] = {}
    for key, value in body.items():
        if value is None or key in _DROPPED:
            continue
        if key in _INFERENCE:
            inference[_INFERENCE[key]] = value
        elif key in _MODEL_FIELDS:
            model_fields[key] = value
        elif key == "system":
            if system := _system(value):
                out["system"] = system
        elif key == "messages":
            out["messages"] = [_message(m, i) for i, m in enumerate(value)]
        elif key in ("tools", "tool_choice"):
            continue  # together below
        elif key in CONVERSE_FIELDS:
            out[key] = value
        else:
            raise UntranslatableError(f"{key!r} has no counterpart in Bedrock's Converse API")
    tools = _tool_config(body.get("tools"), body.get("tool_choice"))
    if tools is None:
        tools = _tools_in_history(out.get("messages", ()))
    if tools:
        out["toolConfig"] = tools
    if inference:
        out["inferenceConfig"] = {**inference, **out.get("inferenceConfig", {})}
    if model_fields:
        out["additionalModelRequestFields"] = {
            **model_fields,
            **out.get("additionalModelRequestFields", {}),
        }
    return out


def _system(system: Any) -> list[dict[str, Any]]:
    """The system text blocks, blank ones left out (with the cache point after one)."""
    if isinstance(system, str):
        return [{"text": system}] if system.strip() else []
    blocks: list[dict[str, Any]] = []
    for block in system if isinstance(system, list) else ():
        text = block.get("text", "") if isinstance(block, dict) else ""
        if isinstance(text, str) and text.strip():
            blocks.append({"text": text})
            if block.get("cache_control"):
                blocks.append(_CACHE_POINT)
    return blocks


def _message(message: Mapping[str, Any], index: int) -> dict[str, Any]:
    """A message's blocks, blank text left out (Converse refuses it); a message with nothing
    else is untranslatable."""
    content = message.get("content")
    if isinstance(content, str):
        blocks = [{"text": content}]
    else:
        blocks = []
        for n, block in enumerate(content if isinstance(content, list) else ()):
            blocks.extend(_block(block, f"messages[{index}].content[{n}]"))
    blocks = [b for b in blocks if "text" not in b or str(b["text"]).strip()]
    if not any("cachePoint" not in b for b in blocks):
        raise UntranslatableError(
            f"messages[{index}] has no content but blank text, which Converse refuses"
        )
    return {"role": message.get("role"), "content": blocks}


def _block(block: Any, where: str) -> list[dict[str, Any]]:
    """One Messages content block as Converse blocks (a cachePoint after it when marked)."""
    if not isinstance(block, dict):
        raise UntranslatableError(f"{where} is not a content block")
    kind = block.get("type")
    if kind == "text":
        out: dict[str, Any] = {"text": block.get("text", "")}
    elif kind in ("image", "document"):
        out = _media(kind, block.get("source"), where)
    elif kind == "tool_use":
        use = {"toolUseId": block.get("id"), "name": block.get("name")}
        out = {"toolUse": {**use, "input": block.get("input") or {}}}
    elif kind == "tool_result":
        result: dict[str, Any] = {
            "toolUseId": block.get("tool_use_id"),
            "content": _result_content(block.get("content"), where),
        }
        if block.get("is_error"):
            result["status"] = "error"
        out = {"toolResult": result}
    elif kind == "thinking":
        text = {"text": block.get("thinking", ""), "signature": block.get("signature")}
        out = {"reasoningContent": {"reasoningText": text}}
    elif kind == "redacted_thinking":
        out = {"reasoningContent": {"redactedContent": block.get("data", "")}}
    else:
        raise UntranslatableError(f"{where}: a {kind!r} block has no Converse counterpart")
    return [out, _CACHE_POINT] if block.get("cache_control") else [out]


def _media(kind: str, source: Any, where: str) -> dict[str, Any]:
    """A base64 image or document (the JSON wire carries bytes as base64 text)."""
    if not isinstance(source, dict) or source.get("type") != "base64":
        raise UntranslatableError(
            f"{where}: Converse takes an {kind} as base64 bytes, not by URL or file id"
        )
    media = str(source.get("media_type", ""))
    form = media.rpartition("/")[2] or "png"
    out: dict[str, Any] = {"format": form, "source": {"bytes": source.get("data", "")}}
    if kind == "document":
        out["name"] = "document"
    return {kind: out}


def _result_content(content: Any, where: str) -> list[dict[str, Any]]:
    """A tool result's blocks; blank text is left out (Converse refuses it), and a result
    with nothing left says ``(empty)``."""
    if isinstance(content, str):
        blocks = [{"text": content}]
    else:
        blocks = []
        for block in content if isinstance(content, list) else ():
            blocks.extend(b for b in _block(block, where) if "cachePoint" not in b)
    blocks = [b for b in blocks if "text" not in b or str(b["text"]).strip()]
    return blocks or [{"text": EMPTY_RESULT}]


def _tools_in_history(messages: Any) -> dict[str, Any] | None:
    """A history with tool calls and no tools: Converse refuses tool blocks without a
    toolConfig, so the tools called are declared, each with an open schema."""
    names = [
        block["toolUse"].get("name")
        for message in messages
        for block in message["content"]
        if "toolUse" in block
    ]
    if not names and not any("toolResult" in b for m in messages for b in m["content"]):
        return None
    names = list(dict.fromkeys(n for n in names if isinstance(n, str))) or ["tool"]
    schema = {"json": {"type": "object"}}
    return {"tools": [{"toolSpec": {"name": n, "inputSchema": schema}} for n in names]}


def _tool_config(tools: Any, choice: Any) -> dict[str, Any] | None:
    if not isinstance(tools, list) or not tools:
        return None
    specs: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict) or "input_schema" not in tool:
            raise UntranslatableError(
                f"tool {tool.get('name') if isinstance(tool, dict) else tool!r} is a server "
                "tool; Converse takes function tools only"
            )
        spec = {"name": tool.get("name"), "inputSchema": {"json": tool["input_schema"]}}
        if tool.get("description"):
            spec["description"] = tool["description"]
        specs.append({"toolSpec": spec})
        if tool.get("cache_control"):
            specs.append(_CACHE_POINT)
    config: dict[str, Any] = {"tools": specs}
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind in ("auto", "any"):
        config["toolChoice"] = {kind: {}}
    elif kind == "tool":
        config["toolChoice"] = {"tool": {"name": choice.get("name")}}
    return config
