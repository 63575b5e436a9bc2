"""Whole answers for tests: an OpenAI ``chat.completion`` and an Anthropic ``message`` that say
everything (tool calls, several choices, logprobs, a refusal, reasoning, cache and reasoning
token counts, a system fingerprint), and the SSE streams that fold into exactly those bodies.

The streams are cut from the bodies: text in 4-character pieces, tool arguments in 5-character
fragments after a first fragment naming the call (other sizes on request), one logprobs token a
chunk, the choices of an ``n`` > 1 answer interleaved, pings between Anthropic events. So a
streamed run must give the same result as a plain one, and ``--keep-response`` the same body.
"""

from __future__ import annotations

from typing import Any

import orjson

WEATHER = {"id": "call_weather", "type": "function",
           "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}  # fmt: skip
TIME = {"id": "call_time", "type": "function",
        "function": {"name": "get_time", "arguments": '{"tz":"CET","utc":false}'}}  # fmt: skip
#: the tool calls both canned providers make, in the result's shape
TOOL_CALLS = [WEATHER, TIME]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}},
]


def _token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": logprob, "bytes": list(text.encode()), "top_logprobs": []}


def _choice(index: int, message: dict[str, Any], finish: str, logprobs: Any) -> dict[str, Any]:
    message = {"role": "assistant", "content": None, "refusal": None, **message}
    return {"index": index, "message": message, "logprobs": logprobs, "finish_reason": finish}


OPENAI_BODY: dict[str, Any] = {
    "id": "chatcmpl-canned",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "gpt-canned",
    "choices": [
        _choice(
            0,
            {"tool_calls": TOOL_CALLS, "reasoning_content": "Two tools are needed."},
            "tool_calls",
            {"content": [_token("call", -0.5)], "refusal": None},
        ),
        _choice(
            1,
            {"content": "Sunny in Paris, 21 degrees."},
            "stop",
            {"content": [_token("Sunny", -0.1), _token(" in", -0.2)], "refusal": None},
        ),
        _choice(
            2,
            {"refusal": "I can't help with that."},
            "stop",
            {"content": None, "refusal": [_token("I", -0.3)]},
        ),
    ],
    "usage": {
        "prompt_tokens": 50,
        "completion_tokens": 30,
        "total_tokens": 80,
        "prompt_tokens_details": {"cached_tokens": 32, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 12, "audio_tokens": 0},
    },
    "service_tier": "default",
    "system_fingerprint": "fp_canned",
}

ANTHROPIC_BODY: dict[str, Any] = {
    "id": "msg_canned",
    "type": "message",
    "role": "assistant",
    "model": "claude-canned",
    "content": [
        {"type": "thinking", "thinking": "Two tools are needed.", "signature": "c2lnbmF0dXJl"},
        {"type": "text", "text": "Let me check both."},
        {
            "type": "tool_use",
            "id": "call_weather",
            "name": "get_weather",
            "input": {"city": "Paris"},
        },
        {
            "type": "tool_use",
            "id": "call_time",
            "name": "get_time",
            "input": {"tz": "CET", "utc": False},
        },
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 18,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 32,
        "output_tokens": 30,
    },
}


def pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _choice_deltas(choice: dict[str, Any], size: int) -> list[dict[str, Any]]:
    """One choice's chunk entries (without ``index``), in the order a server sends them."""
    message = choice["message"]
    out: list[dict[str, Any]] = [{"delta": {"role": "assistant", "content": ""}}]
    for name in ("reasoning_content", "content", "refusal"):
        out += [{"delta": {name: p}} for p in pieces(message.get(name) or "", size)]
    for number, call in enumerate(message.get("tool_calls") or ()):
        function = call["function"]
        head = {"index": number, "id": call["id"], "type": "function",
                "function": {"name": function["name"], "arguments": ""}}  # fmt: skip
        out.append({"delta": {"tool_calls": [head]}})
        for part in pieces(function["arguments"], size + 1):
            fragment = {"index": number, "function": {"arguments": part}}
            out.append({"delta": {"tool_calls": [fragment]}})
    logprobs = choice["logprobs"] or {}
    for name, tokens in logprobs.items():
        for token in tokens or ():
            other = "refusal" if name == "content" else "content"
            out.append({"delta": {}, "logprobs": {name: [token], other: None}})
    out.append({"delta": {}, "finish_reason": choice["finish_reason"]})
    return out


def openai_events(body: dict[str, Any], size: int = 4) -> list[tuple[str | None, object]]:
    """The ``chat.completion.chunk`` stream that folds into ``body`` (text in ``size``-character
    pieces, tool arguments in ``size + 1``)."""
    head = {k: body[k] for k in ("id", "created", "model", "service_tier", "system_fingerprint")}
    head["object"] = "chat.completion.chunk"
    lanes = [_choice_deltas(choice, size) for choice in body["choices"]]
    chunks = []
    for step in range(max(map(len, lanes))):
        for index, lane in enumerate(lanes):
            if step < len(lane):
                entry = {"index": index, "logprobs": None, "finish_reason": None, **lane[step]}
                chunks.append({**head, "choices": [entry]})
    chunks.append({**head, "choices": [], "usage": body["usage"]})
    return [(None, chunk) for chunk in chunks] + [(None, "[DONE]")]


def _block_events(index: int, block: dict[str, Any], size: int) -> list[tuple[str, dict[str, Any]]]:
    kind = block["type"]
    if kind == "text":
        start, deltas = (
            {"type": "text", "text": ""},
            [{"type": "text_delta", "text": p} for p in pieces(block["text"], 4)],
        )
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"], size)
        ]
        deltas += [{"type": "signature_delta", "signature": block["signature"]}]
    else:
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        text = orjson.dumps(block["input"]).decode()
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(text, size + 1)]
    events = [("content_block_start", {"type": "content_block_start", "index": index,
                                       "content_block": start})]  # fmt: skip
    for delta in deltas:
        events.append(("content_block_delta", {"type": "content_block_delta", "index": index,
                                               "delta": delta}))  # fmt: skip
        events.append(("ping", {"type": "ping"}))
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


def anthropic_events(body: dict[str, Any], size: int = 4) -> list[tuple[str | None, object]]:
    """The Messages stream that folds into ``body`` (pieces as ``openai_events``')."""
    usage = body["usage"]
    start = {**body, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 1}}  # fmt: skip
    events: list[tuple[str | None, object]] = [
        ("message_start", {"type": "message_start", "message": start})
    ]
    for index, block in enumerate(body["content"]):
        events += _block_events(index, block, size)
    delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
    end = {"output_tokens": usage["output_tokens"]}
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": end}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events
