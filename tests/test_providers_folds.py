"""How the chat adapters read whole answers and fold streams (canned bodies over MockTransport).

The end-to-end behaviour is in test_run_whole_answers.py; here are the edges of the parsing:
stream pieces of every size, tool call fragments without an index, arguments that are empty,
an object or not JSON, a custom tool call, an Anthropic tool block the stream never closed.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import httpx2
import orjson
import pytest
from answers import ANTHROPIC_BODY, OPENAI_BODY, TOOL_CALLS, anthropic_events, openai_events
from canned import sse_bytes

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import InvalidResponseError
from rrcli.providers.anthropic import AnthropicProvider
from rrcli.providers.base import Call, Reply
from rrcli.providers.openai import OpenAIProvider

MESSAGES = [{"role": "user", "content": "hi"}]
ADAPTERS = {"openai": OpenAIProvider, "anthropic": AnthropicProvider}


def send(
    provider: str,
    *,
    body: object = None,
    events: list | None = None,
    on_text: Any = None,
) -> Reply:
    """One call answered with ``body`` (plain) or ``events`` (a stream)."""

    def answer(request: httpx2.Request) -> httpx2.Response:
        if events is not None:
            stream = {"content-type": "text/event-stream"}
            return httpx2.Response(200, headers=stream, content=sse_bytes(events))
        return httpx2.Response(200, json=body)

    backend = Backend(id="b", provider=provider, base_url="http://canned/v1", model="m")
    adapter = ADAPTERS[provider](
        backend, "sk-fold-test-key", retry=RetrySettings(), transport=httpx2.MockTransport(answer)
    )

    async def go() -> Reply:
        try:
            return await adapter.send(Call(MESSAGES, stream=events is not None), on_text)
        finally:
            await adapter.aclose()

    return asyncio.run(go())


FIELDS = [f for f in Reply.__slots__ if f != "ttft_ms"]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_stream_cut_in_pieces_of_any_size_equals_the_plain_answer(provider, size):
    """Whatever the size of the text, reasoning and argument pieces, the streamed reply has
    every field of the plain one (its body included), all but the time to first text."""
    body = {"openai": OPENAI_BODY, "anthropic": ANTHROPIC_BODY}[provider]
    events = {"openai": openai_events, "anthropic": anthropic_events}[provider](body, size)
    plain, streamed = send(provider, body=body), send(provider, events=events)
    assert [getattr(plain, f) for f in FIELDS] == [getattr(streamed, f) for f in FIELDS]


def chunk(delta: dict[str, Any], index: int = 0, finish: str | None = None) -> tuple:
    entry = {"index": index, "delta": delta, "finish_reason": finish}
    return None, {"id": "c", "created": 1, "model": "m", "choices": [entry]}


def call_fragment(arguments: str, **head: Any) -> dict[str, Any]:
    function = {"arguments": arguments, **({"name": head.pop("name")} if "name" in head else {})}
    return {"tool_calls": [{**head, "function": function}]}


def test_tool_call_fragments_without_an_index_join_by_their_ids():
    """Some servers send tool call fragments without ``index``: a fragment with a new id
    starts a call, one without an id continues the last."""
    events = [
        chunk(call_fragment('{"city"', id="call_weather", type="function", name="get_weather")),
        chunk(call_fragment(':"Paris"}')),
        chunk(call_fragment("", id="call_time", type="function", name="get_time")),
        chunk(call_fragment('{"tz":"CET",')),
        chunk(call_fragment('"utc":false}'), finish="tool_calls"),
        (None, "[DONE]"),
    ]
    reply = send("openai", events=events)
    assert (TOOL_CALLS, "tool_calls") == (reply.tool_calls, reply.finish_reason)


def test_a_tools_only_stream_has_a_time_to_first_text_and_prints_nothing():
    """A stream of tool call fragments only: the fragments count as generated text for
    ``ttft_ms``; nothing is handed to ``on_text`` (it is not output)."""
    printed: list[str] = []
    events = [
        chunk(call_fragment("{}", index=0, id="call_1", type="function", name="f")),
        chunk({}, finish="tool_calls"),
        (None, "[DONE]"),
    ]
    reply = send("openai", events=events, on_text=printed.append)
    assert ([], True) == (printed, reply.ttft_ms is not None)


def test_only_the_first_choice_of_a_stream_is_printed():
    """With several choices streamed, ``on_text`` gets the first choice's text only, never
    interleaved with the others'; the reply has both choices whole."""
    printed: list[str] = []
    events = [
        chunk({"content": "A"}, 0),
        chunk({"content": "x"}, 1),
        chunk({"content": "B"}, 0, "stop"),
        chunk({"content": "y"}, 1, "stop"),
        (None, "[DONE]"),
    ]
    reply = send("openai", events=events, on_text=printed.append)
    assert (["A", "B"], ["AB", "xy"]) == (printed, [c["output"] for c in reply.choices])


def with_arguments(arguments: object) -> dict[str, Any]:
    body = copy.deepcopy(OPENAI_BODY)
    body["choices"] = body["choices"][:1]
    body["choices"][0]["message"]["tool_calls"] = [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
    ]
    return body


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ("", "{}"),
        ("  ", "{}"),
        (None, "{}"),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        ('{"a": 1}', '{"a": 1}'),
    ],
)
def test_tool_call_arguments_are_a_json_objects_text(arguments, expected):
    """Arguments are kept as the server wrote them when they are a JSON object's text; empty or
    absent arguments (a tool without parameters) are ``{}``; an object is written as compact
    JSON text."""
    [call] = send("openai", body=with_arguments(arguments)).tool_calls
    assert expected == call["function"]["arguments"]


@pytest.mark.parametrize("arguments", ['{"a": ', "[1, 2]", '"text"', 3])
def test_tool_call_arguments_that_are_no_json_object_make_the_answer_invalid(arguments):
    """Arguments that are not JSON, or JSON but not an object: InvalidResponseError (transient)
    naming the call, the body kept as the error's body."""
    body = with_arguments(arguments)
    with pytest.raises(InvalidResponseError) as info:
        send("openai", body=body)
    assert (True, "choices[0].message.tool_calls[0].function.arguments") == (
        info.value.transient,
        info.value.message.split(" is not")[0].removeprefix("invalid response: "),
    )
    assert body == orjson.loads(info.value.body)


def test_a_custom_tool_call_is_kept_as_it_came():
    """A tool call of another type than ``function`` (a custom tool's) is kept unchanged."""
    body = with_arguments("{}")
    custom = {"id": "c2", "type": "custom", "custom": {"name": "grammar", "input": "x + 1"}}
    body["choices"][0]["message"]["tool_calls"].append(custom)
    calls = send("openai", body=body).tool_calls
    assert custom == calls[1]


def anthropic_tool_stream(partial: list[str], close: bool) -> list[tuple[str, object]]:
    start = {"type": "tool_use", "id": "call_weather", "name": "get_weather", "input": {}}
    events: list[tuple[str, object]] = [
        ("message_start", {"type": "message_start", "message": {"id": "msg", "model": "m"}}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": start},
        ),
    ]
    for piece in partial:
        delta = {"type": "input_json_delta", "partial_json": piece}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    if close:
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
    delta = {"stop_reason": "stop_sequence", "stop_sequence": "END"}
    events.append(("message_delta", {"type": "message_delta", "delta": delta}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def test_an_anthropic_tool_block_the_stream_never_closed_is_read_whole():
    """A tool_use block whose content_block_stop never came: its input JSON pieces are still
    joined and read; the stop sequence of message_delta is kept in the body."""
    reply = send("anthropic", events=anthropic_tool_stream(['{"city"', ':"Paris"}'], close=False))
    assert ([TOOL_CALLS[0]], "stop_sequence", "END") == (
        reply.tool_calls,
        reply.finish_reason,
        reply.body["stop_sequence"],
    )
    assert {"city": "Paris"} == reply.body["content"][0]["input"]


def test_anthropic_tool_input_that_is_not_json_makes_the_answer_invalid():
    """Input JSON pieces that do not join into JSON: InvalidResponseError naming it, the text
    kept as the error's body."""
    with pytest.raises(InvalidResponseError) as info:
        send("anthropic", events=anthropic_tool_stream(['{"city"', ":Paris}"], close=True))
    assert ("tool_use block's input is not JSON", '{"city":Paris}') == (
        info.value.message.split(": '")[0].removeprefix("invalid response: a "),
        info.value.body,
    )
