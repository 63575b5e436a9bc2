"""What a simulated chat reply says, before either API spells it (``rrcli.sim.wire``,
``rrcli.sim.anthropic``): its choices (text, a tool call or a JSON document), their finish, the
reasoning, logprobs, and the usage counts.

A reply is a dict (built once a request, read by the wire): ``pieces`` are the output's tokens as
stream pieces; a tool call's or a JSON document's pieces are four-character fragments of its JSON
text (about a token each, as rrcli's estimate counts). Everything is deterministic for the same
request: the words, the tool arguments (``rrcli.sim.schema_instance`` from a checksum of the last
user message) and the ids, so a streamed reply equals the plain one.

The choice of a tool follows the APIs: OpenAI chat tools ``{"type": "function", "function":
{"name", "parameters"}}``, Responses tools ``{"type": "function", "name", "parameters"}`` and
Anthropic tools ``{"name", "input_schema"}``; ``tool_choice`` ``none`` (either API's spelling)
forbids a call, a named one forces it, anything else calls the first function tool. A request
whose last message is a tool result (an OpenAI ``tool`` message, an Anthropic ``tool_result``
block, a Responses ``function_call_output`` item) is answered with text.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

from rrcli.sim.behaviour import VARIANTS, WORDS, last_user_text
from rrcli.sim.schema_instance import instance
from rrcli.tokens import CHARS_PER_TOKEN, estimate_input_tokens

__all__ = [
    "after_tool_result",
    "chat_reply",
    "chosen_tool",
    "fragments",
    "json_answer",
    "logprobs",
    "text_tokens",
    "tool_call",
]

_NO_TOOLS = ("none",)


def text_tokens(text: str) -> int:
    """Tokens of a bare text (no message framing), by rrcli's one estimate: at least 1."""
    return len(text) // CHARS_PER_TOKEN or 1


def fragments(text: str) -> tuple[str, ...]:
    """``text`` in pieces of about a token each (four characters)."""
    step = CHARS_PER_TOKEN
    return tuple(text[i : i + step] for i in range(0, len(text), step)) or ("",)


def chosen_tool(tools: Any, choice: Any) -> tuple[str, dict[str, Any]] | None:
    """(name, JSON schema of its arguments) of the tool a reply calls, or None for text."""
    if not isinstance(tools, list) or not tools or choice in _NO_TOOLS:
        return None
    forced = None
    if isinstance(choice, dict):
        if choice.get("type") == "none":
            return None
        named = choice.get("function") if isinstance(choice.get("function"), dict) else choice
        forced = named.get("name")
    for tool in tools:
        if not isinstance(tool, dict) or tool.get("type") not in (None, "function", "custom"):
            continue
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        name = spec.get("name")
        if isinstance(name, str) and (forced is None or name == forced):
            schema = spec.get("parameters", spec.get("input_schema"))
            return name, schema if isinstance(schema, dict) else {"type": "object"}
    return None


def after_tool_result(messages: list[Any]) -> bool:
    """Whether the last message (or Responses input item) hands back a tool's result."""
    if not messages or not isinstance(messages[-1], dict):
        return False
    last = messages[-1]
    if last.get("role") == "tool" or last.get("type") == "function_call_output":
        return True
    content = last.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content
    )


def tool_call(schema: dict[str, Any], seed: int) -> tuple[dict[str, Any], str]:
    """The arguments of a call: a valid instance of ``schema``, and its JSON text."""
    arguments = instance(schema, seed)
    if not isinstance(arguments, dict):
        arguments = {}
    return arguments, orjson.dumps(arguments).decode()


def json_answer(response_format: Any, text: str, seed: int) -> str | None:
    """The JSON text a ``response_format`` (or Anthropic ``output_format``) asks for, or None:
    a valid instance of a ``json_schema``, ``{"answer": text}`` for ``json_object``."""
    if not isinstance(response_format, dict):
        return None
    kind = response_format.get("type")
    if kind == "json_object":
        return orjson.dumps({"answer": text}).decode()
    if kind != "json_schema":
        return None
    spec = response_format.get("json_schema", response_format)
    schema = spec.get("schema") if isinstance(spec, dict) else None
    return orjson.dumps(instance(schema if schema is not None else {}, seed)).decode()


def logprobs(pieces: tuple[str, ...], top: int) -> list[dict[str, Any]]:
    """OpenAI ``logprobs.content``: each token, its log probability and the ``top`` likeliest
    tokens (itself first), deterministic for the token and its position."""
    out = []
    for position, token in enumerate(pieces):
        crc = zlib.crc32(token.encode()) + position
        chosen = -((crc % 1000) + 1) / 1000.0
        alternatives = [{"token": token, "logprob": chosen, "bytes": list(token.encode())}]
        for j in range(1, top):
            other = " " + WORDS[(crc + j) % len(WORDS)]
            other = other if other != token else other + "s"
            lp = chosen - j * 0.5
            alternatives.append({"token": other, "logprob": lp, "bytes": list(other.encode())})
        entry = {"token": token, "logprob": chosen, "bytes": alternatives[0]["bytes"]}
        entry["top_logprobs"] = alternatives[:top]
        out.append(entry)
    return out


def chat_reply(sim: Any, body: dict[str, Any], modes: str, anthropic: bool) -> dict[str, Any]:
    """The reply to a chat request (OpenAI chat completions or Anthropic Messages): ``sim`` is
    the server (its ``behaviour`` and ``config``)."""
    messages = body.get("messages")
    if type(messages) is not list:
        messages = []
    crc = zlib.crc32(last_user_text(messages).encode())
    count = body.get("n", 1) if not anthropic else 1
    if count == 1:
        choices = [_choice(sim, body, messages, modes, crc, 0, anthropic)]
    else:
        count = count if type(count) is int and 0 < count <= 128 else 1
        choices = [_choice(sim, body, messages, modes, crc, i, anthropic) for i in range(count)]
    first = choices[0]
    reasoning, reasoning_tokens = None, 0
    if "reasoning" in modes or (anthropic and _thinks(body.get("thinking"))):
        reasoning = "sim reasoning: " + sim.behaviour.text(crc % VARIANTS).partition(" ")[0]
        reasoning_tokens = text_tokens(reasoning)
    elif body.get("reasoning_effort") not in (None, "none", "minimal"):
        reasoning_tokens = len(first["pieces"])  # an o-series model's unseen thinking
    if not anthropic and body.get("logprobs") is True:
        top = body.get("top_logprobs")
        for choice in choices:
            choice["logprobs"] = logprobs(choice["pieces"], top if type(top) is int else 0)
    lengths = [len(c["pieces"]) for c in choices]
    return {
        "body": body,
        "model": sim.config.model or body.get("model") or "sim-model",
        "input": estimate_input_tokens(messages),
        "reasoning": reasoning,
        "reasoning_tokens": reasoning_tokens,
        "text_index": 1 if reasoning else 0,
        "cache": "cache" in modes,
        "cached": estimate_input_tokens(messages) // 2 if "cache" in modes else 0,
        "choices": choices,
        "pieces": first["pieces"],
        "finish": first["finish"],
        "tool": first["tool"],
        "length": max(lengths),
        "output": sum(lengths) + reasoning_tokens,
        "simple": count == 1 and first["tool"] is None and first["logprobs"] is None,
    }


def _thinks(thinking: Any) -> bool:
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")


def _choice(
    sim: Any,
    body: dict[str, Any],
    messages: list[Any],
    modes: str,
    crc: int,
    index: int,
    anthropic: bool,
) -> dict[str, Any]:
    """Choice ``index``: text, a tool call or a JSON document; then cut by the token limit."""
    pieces, finish, tool = sim.behaviour.pieces((crc + index) % VARIANTS), "stop", None
    if anthropic or "tools" in body or "response_format" in body:
        pieces, finish, tool = _shaped(sim, body, messages, modes, crc + index, pieces, anthropic)
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    if type(limit) is int and 0 < limit < len(pieces):
        pieces, finish = pieces[:limit], "length"
    return {"index": index, "pieces": pieces, "finish": finish, "tool": tool, "logprobs": None}


def _shaped(
    sim: Any,
    body: dict[str, Any],
    messages: list[Any],
    modes: str,
    seed: int,
    words: tuple[str, ...],
    anthropic: bool,
) -> tuple[tuple[str, ...], str, dict[str, Any] | None]:
    """(pieces, finish, tool call) of a choice that may call a tool, answer in JSON, or
    (Anthropic) continue a paused turn or pause."""
    tools = body.get("tools")
    chosen = None
    if tools and not after_tool_result(messages):
        chosen = chosen_tool(tools, body.get("tool_choice"))
    continuing = bool(messages) and _role(messages[-1]) == "assistant"
    if chosen is not None and not continuing:
        arguments, text = tool_call(chosen[1], seed)
        if "bad-arguments" in modes:
            text = text[:-1]  # not JSON: the closing brace is missing
        prefix = "toolu_sim" if anthropic else "call_sim"
        tool = {"id": f"{prefix}{seed:010d}", "name": chosen[0], "input": arguments}
        tool["arguments"] = text
        return fragments(text), "tool_calls", tool
    asked = body.get("output_format" if anthropic else "response_format")
    answer = json_answer(asked, "".join(words), seed) if asked else None
    pieces = fragments(answer) if answer is not None else words
    if anthropic and continuing:
        return pieces[len(pieces) // 2 :], "stop", None
    if anthropic and _pauses(sim, modes):
        return pieces[: len(pieces) // 2], "pause_turn", None
    return pieces, "stop", None


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _pauses(sim: Any, modes: str) -> bool:
    return "pause-turn" in modes or sim.behaviour.chance(sim.config.pause_turn_rate)
