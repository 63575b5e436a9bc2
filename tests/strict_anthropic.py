"""Anthropic Messages (``anthropic_problem``): only Messages fields, and no field on a message but
``role`` and ``content``; ``max_tokens`` at least 1; ``temperature`` and ``top_p`` within 0-1;
``stop_sequences`` a list whose every entry has non-whitespace text; ``metadata`` only
``user_id``; ``system`` text, or text blocks that are not blank; roles ``user`` and
``assistant``; every message's content non-empty except the final assistant message's, no text
block blank, the final assistant content not ending in whitespace; images from a ``url`` or
``base64`` source of jpeg, png, gif or webp; ``tool_use`` only from the assistant, each answered
by a ``tool_result`` in the next turn (the results first in it), each ``tool_result`` answering a
``tool_use`` of the turn before (consecutive turns of one role are joined first, as the API
joins them); tools named ``[a-zA-Z0-9_-]{1,64}``, unique, with an object ``input_schema``, no
``strict``; ``tool_choice`` only with tools, naming one of them; ``service_tier`` ``auto`` or
``standard_only``.
"""

from __future__ import annotations

from typing import Any

from strict_common import NAME, Refused, blank, number

#: POST /v1/messages request fields
ANTHROPIC_FIELDS = {
    "model", "messages", "max_tokens", "container", "context_management", "mcp_servers",
    "metadata", "service_tier", "stop_sequences", "stream", "system", "temperature", "thinking",
    "tool_choice", "tools", "top_k", "top_p",
}  # fmt: skip
_MEDIA = {"image/jpeg", "image/png", "image/gif", "image/webp"}
_BLOCK_FIELDS = {
    "text": {"type", "text", "cache_control", "citations"},
    "image": {"type", "source", "cache_control"},
    "tool_use": {"type", "id", "name", "input", "cache_control"},
    "tool_result": {"type", "tool_use_id", "content", "is_error", "cache_control"},
}


def anthropic_problem(body: dict[str, Any]) -> str | None:
    """The 400 message the Messages API answers ``body`` with, or None when it takes it."""
    try:
        _anthropic(body)
    except Refused as exc:
        return str(exc)
    return None


def _anthropic(body: dict[str, Any]) -> None:
    for key in body:
        if key not in ANTHROPIC_FIELDS:
            raise Refused(f"{key}: Extra inputs are not permitted")
    tokens = body.get("max_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise Refused("max_tokens: Field required (an integer of at least 1)")
    number(body, "temperature", 0, 1)
    number(body, "top_p", 0, 1)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise Refused("stop_sequences: Input should be a valid list of strings")
        if any(not s.strip() for s in stops):
            raise Refused("stop_sequences: each stop sequence must contain non-whitespace")
    metadata = body.get("metadata")
    if metadata is not None and (not isinstance(metadata, dict) or set(metadata) - {"user_id"}):
        raise Refused("metadata: Extra inputs are not permitted")
    if body.get("service_tier") not in (None, "auto", "standard_only"):
        raise Refused("service_tier: Input should be 'auto' or 'standard_only'")
    _anthropic_system(body.get("system"))
    names = _anthropic_tools(body.get("tools"))
    _anthropic_choice(body.get("tool_choice"), names)
    _anthropic_messages(body.get("messages"))


def _anthropic_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise Refused("system: Input should be a valid string or list of text blocks")
    for block in system:
        if not isinstance(block, dict) or block.get("type") != "text":
            raise Refused("system: Input tag does not match the expected tag 'text'")
        if blank(block.get("text")):
            raise Refused("system: text content blocks must contain non-whitespace text")


def _anthropic_tools(tools: Any) -> set[str]:
    if tools is None:
        return set()
    if not isinstance(tools, list):
        raise Refused("tools: Input should be a valid list")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise Refused(f"tools.{i}: Input should be a valid dictionary")
        extra = set(tool) - {"name", "description", "input_schema", "cache_control", "type"}
        if extra:
            raise Refused(f"tools.{i}.{sorted(extra)[0]}: Extra inputs are not permitted")
        name = tool.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise Refused(
                f"tools.{i}.custom.name: String should match pattern '^[a-zA-Z0-9_-]{{1,64}}$'"
            )
        if name in names:
            raise Refused("tools: Tool names must be unique.")
        names.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise Refused(f"tools.{i}.custom.input_schema.type: Input should be 'object'")
    return names


def _anthropic_choice(choice: Any, names: set[str]) -> None:
    if choice is None:
        return
    if not names:
        raise Refused("tool_choice may only be specified while providing tools.")
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind not in ("auto", "any", "tool", "none"):
        raise Refused("tool_choice: Input tag does not match any of the expected tags")
    allowed = {"type", "disable_parallel_tool_use"} | ({"name"} if kind == "tool" else set())
    if kind == "none":
        allowed = {"type"}
    if set(choice) - allowed:
        raise Refused(
            f"tool_choice.{kind}.{sorted(set(choice) - allowed)[0]}: Extra inputs are not permitted"
        )
    if kind == "tool" and choice.get("name") not in names:
        raise Refused(f"Tool '{choice.get('name')}' not found in provided tools")


def _anthropic_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise Refused("messages: Field required (at least one message)")
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for i, message in enumerate(messages):
        blocks = _anthropic_message(message, i, final=i == len(messages) - 1)
        role = message["role"]
        if turns and turns[-1][0] == role:  # the API joins consecutive turns of one role
            turns[-1][1].extend(blocks)
        else:
            turns.append((role, list(blocks)))
    for t, (role, blocks) in enumerate(turns):
        uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if role == "user" and results:
            before = turns[t - 1][1] if t else []
            asked = {b["id"] for b in before if b.get("type") == "tool_use"}
            for block in results:
                if block.get("tool_use_id") not in asked:
                    raise Refused(
                        f"messages.{t}.content: unexpected `tool_use_id` found in `tool_result` "
                        "blocks. Each `tool_result` block must have a corresponding `tool_use` "
                        "block in the previous message."
                    )
            kinds = [b.get("type") for b in blocks]
            if kinds[: len(results)] != ["tool_result"] * len(results):
                raise Refused(f"messages.{t}: tool_result blocks must come first in the content")
        if uses:
            after = turns[t + 1][1] if t + 1 < len(turns) else None
            answered = {b.get("tool_use_id") for b in after or () if b.get("type") == "tool_result"}
            missing = [u for u in uses if u not in answered]
            if missing:
                raise Refused(
                    f"messages.{t}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}"
                )


def _anthropic_message(message: Any, i: int, *, final: bool) -> list[dict[str, Any]]:
    """The message's blocks, once it is found valid on its own."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise Refused(f"messages.{i}.role: Input should be 'user' or 'assistant'")
    extra = set(message) - {"role", "content"}
    if extra:
        raise Refused(f"messages.{i}.{sorted(extra)[0]}: Extra inputs are not permitted")
    role, content = message["role"], message.get("content")
    last_assistant = final and role == "assistant"
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}] if content else []
    elif isinstance(content, list):
        blocks = content
    else:
        raise Refused(f"messages.{i}.content: Input should be a valid string or list")
    if not blocks and not last_assistant:
        raise Refused(
            f"messages.{i}: all messages must have non-empty content except for the optional "
            "final assistant message"
        )
    for j, block in enumerate(blocks):
        _anthropic_block(block, f"messages.{i}.content.{j}", role)
    tail = blocks[-1] if last_assistant and blocks else {}
    if tail.get("type") == "text" and tail["text"] != tail["text"].rstrip():
        raise Refused("final assistant content cannot end with trailing whitespace")
    return blocks


def _anthropic_block(block: Any, where: str, role: str) -> None:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind not in _BLOCK_FIELDS:
        raise Refused(f"{where}: Input tag '{kind}' does not match any of the expected tags")
    extra = set(block) - _BLOCK_FIELDS[kind]
    if extra:
        raise Refused(f"{where}.{kind}.{sorted(extra)[0]}: Extra inputs are not permitted")
    if kind == "text" and blank(block.get("text")):
        raise Refused("messages: text content blocks must contain non-whitespace text")
    if kind == "image":
        _anthropic_image(block.get("source"), where)
    if kind == "tool_use":
        if role != "assistant":
            raise Refused(f"{where}: tool_use blocks may only appear in assistant messages")
        if not isinstance(block.get("input"), dict) or not isinstance(block.get("id"), str):
            raise Refused(f"{where}.tool_use.input: Input should be a valid dictionary")
        if not isinstance(block.get("name"), str) or not NAME.fullmatch(block["name"]):
            raise Refused(f"{where}.tool_use.name: String should match pattern")
    if kind == "tool_result":
        if role != "user":
            raise Refused(f"{where}: tool_result blocks may only appear in user messages")
        inner = block.get("content")
        if isinstance(inner, list):
            for k, part in enumerate(inner):
                if not isinstance(part, dict) or part.get("type") not in ("text", "image"):
                    raise Refused(f"{where}.tool_result.content.{k}: text or image blocks only")
                _anthropic_block(part, f"{where}.content.{k}", role)
        elif inner is not None and not isinstance(inner, str):
            raise Refused(f"{where}.tool_result.content: Input should be a valid string or list")


def _anthropic_image(source: Any, where: str) -> None:
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "url" and isinstance(source.get("url"), str):
        return
    if kind == "base64" and source.get("media_type") in _MEDIA and source.get("data"):
        return
    raise Refused(f"{where}.image.source: Input should be a url or base64 source of an image")
