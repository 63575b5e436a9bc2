"""``rrcli sim`` speaks the whole chat APIs over real HTTP: tool calls, structured outputs, ``n``,
logprobs, usage details and thinking, on OpenAI ``/v1/chat/completions`` and Anthropic
``/v1/messages``, plain and streamed; a stream folds into the plain body."""

from __future__ import annotations

import json
from typing import Any

import httpx2
import jsonschema
import pytest
from simkit import data_lines, events, post

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit"],
}
CLOCK = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
OPENAI_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}},
]
ANTHROPIC_TOOLS = [
    {"name": "get_weather", "input_schema": WEATHER},
    {"name": "get_time", "input_schema": CLOCK},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01"}

# the fields the official SDKs' types require (openai-python, anthropic-sdk-python)
CHAT_COMPLETION = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "object": {"const": "chat.completion"},
        "choices": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["index", "message", "finish_reason"],
                "properties": {"message": {"type": "object", "required": ["role"]}},
            },
        },
        "usage": {"type": "object", "required": ["prompt_tokens", "completion_tokens"]},
    },
}
CHUNK = {
    "type": "object",
    "required": ["id", "object", "created", "model", "choices"],
    "properties": {
        "object": {"const": "chat.completion.chunk"},
        "choices": {"type": "array", "items": {"type": "object", "required": ["index", "delta"]}},
    },
}
MESSAGE = {
    "type": "object",
    "required": ["id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"],
    "properties": {"usage": {"type": "object", "required": ["input_tokens", "output_tokens"]}},
}


def chat(server, body: dict[str, Any], **headers: str) -> httpx2.Response:
    return post(server.openai_url + "/chat/completions", {"model": "m", **body}, headers)


def messages(server, body: dict[str, Any], **headers: str) -> httpx2.Response:
    body = {"model": "m", "max_tokens": 200, **body}
    return post(server.url + "/v1/messages", body, {**ANTHROPIC_HEADERS, **headers})


def fold_openai(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The body a chat-completions stream folds into (what a client rebuilds)."""
    choices: dict[int, dict[str, Any]] = {}
    usage = None
    for chunk in chunks:
        jsonschema.validate(chunk, CHUNK)
        usage = chunk.get("usage") or usage
        for c in chunk["choices"]:
            choice = choices.setdefault(
                c["index"],
                {"index": c["index"], "message": {"role": "assistant"}, "logprobs": None},
            )
            message, delta = choice["message"], c["delta"]
            if "content" in delta:
                message["content"] = (message.get("content") or "") + (delta["content"] or "")
                message["content"] = message["content"] if delta["content"] is not None else None
            for call in delta.get("tool_calls", []):
                calls = message.setdefault("tool_calls", [])
                if call.get("id"):
                    calls.append({"id": call["id"], "type": call["type"], "function": {}})
                    calls[-1]["function"] = {"name": call["function"]["name"], "arguments": ""}
                calls[call["index"]]["function"]["arguments"] += call["function"]["arguments"]
            if c.get("logprobs"):
                choice["logprobs"] = choice["logprobs"] or {"content": [], "refusal": None}
                choice["logprobs"]["content"] += c["logprobs"]["content"]
            if c.get("finish_reason"):
                choice["finish_reason"] = c["finish_reason"]
    return {"choices": [choices[i] for i in sorted(choices)], "usage": usage}


def comparable_openai(body: dict[str, Any]) -> dict[str, Any]:
    choices = []
    for c in body["choices"]:
        message = {k: v for k, v in c["message"].items() if k != "refusal"}
        choices.append({**c, "message": message})
    return {"choices": choices, "usage": body["usage"]}


def fold_anthropic(stream: list[dict[str, Any]]) -> dict[str, Any]:
    """The message an Anthropic stream folds into."""
    message: dict[str, Any] = {}
    for event in stream:
        kind = event["type"]
        if kind == "message_start":
            message = {**event["message"], "content": []}
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
            if event["content_block"]["type"] == "tool_use":
                message["content"][-1]["partial"] = ""
        elif kind == "content_block_delta":
            block, delta = message["content"][event["index"]], event["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking"}.get(delta["type"])
            if field:
                block[field] += delta[field]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            else:
                block["partial"] += delta["partial_json"]
        elif kind == "content_block_stop":
            block = message["content"][event["index"]]
            if "partial" in block:
                block["input"] = json.loads(block.pop("partial"))
        elif kind == "message_delta":
            message.update(event["delta"])
            message["usage"] = {**message["usage"], **event["usage"]}
    return message


def comparable_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body.items() if k != "id"}


@pytest.mark.parametrize("stream", [False, True])
def test_openai_answers_with_a_call_of_the_first_tool(sim_server, stream: bool) -> None:
    """With tools, the reply calls the first one: content null, finish ``tool_calls``, arguments
    a JSON text valid against its parameters, the same in every run; a stream sends the id and
    name in the first fragment and the arguments over several, and folds into the plain body."""
    server = sim_server()
    plain = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS}).json()
    jsonschema.validate(plain, CHAT_COMPLETION)
    (choice,) = plain["choices"]
    (call,) = choice["message"]["tool_calls"]
    assert ("tool_calls", None, "get_weather") == (
        choice["finish_reason"],
        choice["message"]["content"],
        call["function"]["name"],
    )
    jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER)
    again = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS}).json()
    assert call == again["choices"][0]["message"]["tool_calls"][0]
    if stream:
        body = {"messages": ASK, "tools": OPENAI_TOOLS, "stream": True}
        body["stream_options"] = {"include_usage": True}
        chunks = data_lines(chat(server, body))
        fragments = [c["choices"][0]["delta"].get("tool_calls") for c in chunks if c["choices"]]
        fragments = [f[0] for f in fragments if f]
        assert [call["id"]] == [f["id"] for f in fragments if "id" in f]
        assert len(fragments) > 3
        assert comparable_openai(plain) == fold_openai(chunks)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_answers_with_a_tool_use_block(sim_server, stream: bool) -> None:
    """With tools, the reply is a ``tool_use`` block (id, name, input valid against its
    input_schema), stop_reason ``tool_use``; a stream starts the block with an empty input,
    sends ``input_json_delta`` fragments, and folds into the plain message."""
    server = sim_server()
    plain = messages(server, {"messages": ASK, "tools": ANTHROPIC_TOOLS}).json()
    jsonschema.validate(plain, MESSAGE)
    (block,) = plain["content"]
    assert ("tool_use", "tool_use", "get_weather") == (
        plain["stop_reason"],
        block["type"],
        block["name"],
    )
    assert block["id"].startswith("toolu_")
    jsonschema.validate(block["input"], WEATHER)
    if stream:
        stream_events = events(
            messages(server, {"messages": ASK, "tools": ANTHROPIC_TOOLS, "stream": True})
        )
        partial = [
            e["delta"]["partial_json"] for e in stream_events if e["type"] == "content_block_delta"
        ]
        assert len(partial) > 3
        assert comparable_anthropic(plain) == comparable_anthropic(fold_anthropic(stream_events))


def test_tool_choice_none_forbids_and_a_named_choice_forces_a_tool(sim_server) -> None:
    """``tool_choice: none`` (``{"type": "none"}``) gives text; a named tool (OpenAI
    ``{"type": "function", "function": {"name"}}``, Anthropic ``{"type": "tool", "name"}``)
    is the one called."""
    server = sim_server()
    none = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS, "tool_choice": "none"}).json()
    forced = {"type": "function", "function": {"name": "get_time"}}
    named = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS, "tool_choice": forced}).json()
    a_none = {"messages": ASK, "tools": ANTHROPIC_TOOLS, "tool_choice": {"type": "none"}}
    a_named = {**a_none, "tool_choice": {"type": "tool", "name": "get_time"}}
    assert ("stop", "end_turn") == (
        none["choices"][0]["finish_reason"],
        messages(server, a_none).json()["stop_reason"],
    )
    assert ["get_time", "get_time"] == [
        named["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        messages(server, a_named).json()["content"][0]["name"],
    ]


def test_after_a_tool_result_the_reply_is_text(sim_server) -> None:
    """A history ending in the tool's result (an OpenAI ``tool`` message, an Anthropic
    ``tool_result`` block) is answered with text, tools or not."""
    server = sim_server()
    call = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS}).json()["choices"][0]["message"]
    result = {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "sunny"}
    answer = chat(server, {"messages": [*ASK, call, result], "tools": OPENAI_TOOLS}).json()
    use = messages(server, {"messages": ASK, "tools": ANTHROPIC_TOOLS}).json()["content"]
    back = {"type": "tool_result", "tool_use_id": use[0]["id"], "content": "sunny"}
    turns = [*ASK, {"role": "assistant", "content": use}, {"role": "user", "content": [back]}]
    reply = messages(server, {"messages": turns, "tools": ANTHROPIC_TOOLS}).json()
    assert ("stop", "end_turn", "text") == (
        answer["choices"][0]["finish_reason"],
        reply["stop_reason"],
        reply["content"][0]["type"],
    )
    assert answer["choices"][0]["message"]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_json_schema_response_format_gives_a_valid_document(sim_server, stream) -> None:
    """``response_format`` ``json_schema``: the content is a JSON text valid against the
    schema, the same plain and streamed."""
    server = sim_server()
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": WEATHER, "strict": True}}
    body = {"messages": ASK, "response_format": fmt}
    content = chat(server, body).json()["choices"][0]["message"]["content"]
    jsonschema.validate(json.loads(content), WEATHER)
    if stream:
        folded = fold_openai(data_lines(chat(server, {**body, "stream": True})))
        assert content == folded["choices"][0]["message"]["content"]


@pytest.mark.parametrize("stream", [False, True])
def test_n_gives_that_many_distinct_choices(sim_server, stream: bool) -> None:
    """``n: 3`` gives choices 0, 1, 2 with distinct texts; usage counts all of them; a stream
    interleaves them by index and folds into the plain body."""
    server = sim_server(output_tokens=5)
    body = {"messages": ASK, "n": 3}
    plain = chat(server, body).json()
    texts = [c["message"]["content"] for c in plain["choices"]]
    assert [0, 1, 2] == [c["index"] for c in plain["choices"]]
    assert 3 == len(set(texts))
    assert 15 == plain["usage"]["completion_tokens"]
    if stream:
        streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
        assert comparable_openai(plain) == fold_openai(data_lines(chat(server, streamed)))


@pytest.mark.parametrize("stream", [False, True])
def test_logprobs_cover_every_output_token(sim_server, stream: bool) -> None:
    """``logprobs`` with ``top_logprobs: 3``: one entry per output token (the tokens join to the
    content), each with its bytes and three alternatives, the token itself first; streamed in
    each chunk's choice."""
    server = sim_server(output_tokens=4)
    body = {"messages": ASK, "logprobs": True, "top_logprobs": 3}
    choice = chat(server, body).json()["choices"][0]
    content = choice["logprobs"]["content"]
    assert choice["message"]["content"] == "".join(t["token"] for t in content)
    assert [3, 3, 3, 3] == [len(t["top_logprobs"]) for t in content]
    assert all(t["top_logprobs"][0]["token"] == t["token"] for t in content)
    assert all(bytes(t["bytes"]).decode() == t["token"] and t["logprob"] < 0 for t in content)
    if stream:
        folded = fold_openai(data_lines(chat(server, {**body, "stream": True})))
        assert choice["logprobs"] == folded["choices"][0]["logprobs"]


def test_openai_usage_details_fingerprint_and_request_id(sim_server) -> None:
    """Usage carries ``prompt_tokens_details.cached_tokens`` (0; half the input in ``cache``
    mode) and ``completion_tokens_details.reasoning_tokens`` (0; the reasoning's tokens in
    ``reasoning`` mode, counted in completion_tokens); the body has ``system_fingerprint``; the
    ``x-request-id`` header is the body's id."""
    server = sim_server(output_tokens=4)
    plain = chat(server, {"messages": ASK})
    cached = chat(server, {"messages": ASK}, **{"x-sim-mode": "cache"}).json()["usage"]
    thinking = chat(server, {"messages": ASK}, **{"x-sim-mode": "reasoning"}).json()["usage"]
    usage = plain.json()["usage"]
    assert (0, 0) == (
        usage["prompt_tokens_details"]["cached_tokens"],
        usage["completion_tokens_details"]["reasoning_tokens"],
    )
    assert usage["prompt_tokens"] // 2 == cached["prompt_tokens_details"]["cached_tokens"]
    reasoning = thinking["completion_tokens_details"]["reasoning_tokens"]
    assert (True, 4 + reasoning) == (reasoning > 0, thinking["completion_tokens"])
    assert plain.headers["x-request-id"] == plain.json()["id"]
    assert plain.json()["system_fingerprint"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_thinking_and_cache_reads(sim_server, stream: bool) -> None:
    """``thinking`` enabled gives a thinking block with its signature before the text (streamed
    as ``thinking_delta`` and ``signature_delta``); ``cache`` mode moves half the input to
    ``cache_read_input_tokens``."""
    server = sim_server(output_tokens=4)
    body = {"messages": ASK, "thinking": {"type": "enabled", "budget_tokens": 1024}}
    plain = messages(server, body, **{"x-sim-mode": "cache"}).json()
    thinking, text = plain["content"]
    assert ("thinking", "text") == (thinking["type"], text["type"])
    assert thinking["thinking"] and thinking["signature"]
    usage = plain["usage"]
    assert usage["cache_read_input_tokens"] > 0
    if stream:
        streamed = events(messages(server, {**body, "stream": True}, **{"x-sim-mode": "cache"}))
        kinds = [e["delta"]["type"] for e in streamed if e["type"] == "content_block_delta"]
        assert ["thinking_delta", "signature_delta"] == kinds[:2]
        assert comparable_anthropic(plain) == comparable_anthropic(fold_anthropic(streamed))


def test_bodies_validate_against_the_official_sdk_types(sim_server) -> None:
    """Where the ``openai`` and ``anthropic`` packages are installed, their types accept the
    sim's bodies, chunks and events (tool calls, logprobs, n, thinking)."""
    openai = pytest.importorskip("openai")
    anthropic = pytest.importorskip("anthropic")
    from pydantic import TypeAdapter

    server = sim_server()
    body = {"messages": ASK, "tools": OPENAI_TOOLS, "n": 2, "logprobs": True, "top_logprobs": 2}
    openai.types.chat.ChatCompletion.model_validate(chat(server, body).json())
    streamed = {**body, "stream": True, "stream_options": {"include_usage": True}}
    for chunk in data_lines(chat(server, streamed)):
        openai.types.chat.ChatCompletionChunk.model_validate(chunk)
    thinking = {"type": "enabled", "budget_tokens": 1024}
    for a_body in (
        {"messages": ASK, "tools": ANTHROPIC_TOOLS, "thinking": thinking},
        {"messages": ASK, "thinking": thinking},
    ):
        anthropic.types.Message.model_validate(messages(server, a_body).json())
        adapter = TypeAdapter(anthropic.types.RawMessageStreamEvent)
        for event in events(messages(server, {**a_body, "stream": True})):
            if event["type"] != "ping":
                adapter.validate_python(event)


def test_a_token_limit_or_bad_arguments_mode_breaks_the_call(sim_server) -> None:
    """A call cut by the token limit ends with finish ``length`` and arguments that are not
    whole JSON (Anthropic: stop_reason ``max_tokens``, an empty input); the ``bad-arguments``
    mode sends arguments that are not JSON (Anthropic: a streamed input that is not), so a
    client's refusal of them can be tested."""
    server = sim_server()
    cut = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS, "max_tokens": 2}).json()
    bad = chat(server, {"messages": ASK, "tools": OPENAI_TOOLS}, **{"x-sim-mode": "bad-arguments"})
    a_cut = messages(server, {"messages": ASK, "tools": ANTHROPIC_TOOLS, "max_tokens": 2}).json()
    a_bad = messages(
        server,
        {"messages": ASK, "tools": ANTHROPIC_TOOLS, "stream": True},
        **{"x-sim-mode": "bad-arguments"},
    )
    texts = [
        cut["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        bad.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "".join(e["delta"].get("partial_json", "") for e in events(a_bad) if "delta" in e),
    ]
    for text in texts:
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
    assert ("length", "max_tokens", {}) == (
        cut["choices"][0]["finish_reason"],
        a_cut["stop_reason"],
        a_cut["content"][0]["input"],
    )
