"""Every message the official SDKs' request types allow is taken: the jobs parser accepts it (a
batch line's body, a request ``rrcli serve`` received) and the translation to the other API
either writes it or says what has no form there, never crashes. The messages are generated
from the SDKs' own TypedDicts (``sdk_shapes``)."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sdk_shapes import json_of

from rrcli.errors import UntranslatableError
from rrcli.providers.translate import to_anthropic, to_openai, unexpressible
from rrcli.records.jobs import Job, request_job
from rrcli.tokens import estimate_input_tokens

chat = pytest.importorskip("openai.types.chat")
anthropic_types = pytest.importorskip("anthropic.types")

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OPENAI_HISTORY = st.lists(json_of(chat.ChatCompletionMessageParam), min_size=1, max_size=4)
ANTHROPIC_HISTORY = st.lists(json_of(anthropic_types.MessageParam), min_size=1, max_size=4)
CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
#: an agent's turn as a pydantic model dumped with exclude_none=True writes it
AGENT = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]},
]


def _accepted(api: str, messages: list) -> Job:
    body = {"model": "m", "messages": copy.deepcopy(messages), "max_tokens": 5}
    job = request_job(api, "chat", body, id=1)
    assert Job is type(job), job.message
    return job


@SETTINGS
@given(OPENAI_HISTORY)
@example(AGENT)
@example([{"role": "assistant", "content": None, "tool_calls": [CALL]}])
@example([{"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}])
@example([{"role": "function", "name": "f", "content": None}])
@example([{"role": "assistant", "audio": {"id": "audio_1"}}])
@example([{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}])
@example([{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}])
def test_openai_sdk_messages_are_accepted_and_translated(messages):
    """A history the openai SDK's ChatCompletionMessageParam allows (content left out or null
    beside tool calls, refusal parts, audio and file parts, tool messages with part arrays) is
    a job, its tokens can be estimated, and toward Anthropic it is routed away (to backends
    that take audio, files that are no PDF, function_call...) or written as JSON."""
    job = _accepted("openai", messages)
    assert estimate_input_tokens(job.messages) > 0
    routed_away = unexpressible("anthropic", job.params, job.messages)
    try:
        body = to_anthropic(list(job.messages), job.params)
    except UntranslatableError as exc:
        # what the router lets through is said, but for arguments no API could read as an
        # object (the job's error, naming them)
        assert routed_away or "function.arguments is not" in str(exc), str(exc)
    else:
        orjson.dumps(body)


@SETTINGS
@given(ANTHROPIC_HISTORY)
@example(
    [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "look it up", "signature": "s"},
                {"type": "redacted_thinking", "data": "x"},
                {"type": "tool_use", "id": "t1", "name": "weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "sunny"}],
                },
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "d"},
                },
            ],
        },
    ]
)
def test_anthropic_sdk_messages_are_accepted_and_translated(messages):
    """A history the anthropic SDK's MessageParam allows (text, image, document, tool_use,
    tool_result with a content list, thinking and redacted_thinking blocks) is a job, and
    toward the chat completions API it is JSON or a clear refusal."""
    job = _accepted("anthropic", messages)
    assert estimate_input_tokens(job.messages) > 0
    try:
        body = to_openai(list(job.messages), job.params)
    except UntranslatableError as exc:
        assert str(exc)
    else:
        orjson.dumps(body)


def test_an_agent_turn_without_content_goes_to_anthropic_as_a_tool_use():
    """The assistant's tool call with no content key becomes a tool_use block, and the tool's
    text parts its tool_result."""
    job = _accepted("openai", AGENT)
    body = to_anthropic(list(job.messages), job.params)
    use = {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert {"role": "assistant", "content": [use]} == body["messages"][1]
    result = {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}
    assert {"role": "user", "content": [result]} == body["messages"][2]


def test_a_user_message_without_content_is_still_refused():
    """Only the messages the SDKs let go without content may: a user message needs one."""
    job = request_job("openai", "chat", {"messages": [{"role": "user"}]}, id=1)
    expected = "body.messages[0].content must be a string or an array of content parts, got nothing"
    assert expected == job.message


def test_a_pdf_goes_between_the_apis_as_a_document_and_a_file():
    """A file part holding a base64 PDF is a document block toward Anthropic, and that block a
    file part again toward the chat completions API; a file named by its OpenAI id is routed
    away from Anthropic, as audio is."""
    pdf = "data:application/pdf;base64,JVBERi0x"
    part = {"type": "file", "file": {"filename": "a.pdf", "file_data": pdf}}
    body = to_anthropic([{"role": "user", "content": [part]}], {})
    source = {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0x"}
    assert [{"type": "document", "source": source}] == body["messages"][0]["content"]
    back = to_openai(body["messages"], {})
    file = {"filename": "document.pdf", "file_data": pdf}
    assert [{"type": "file", "file": file}] == back["messages"][0]["content"]
    by_id = {"type": "file", "file": {"file_id": "file-1"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    messages = [{"role": "user", "content": [by_id, audio]}]
    expected = ("messages[0].content[0]", "messages[0].content[1]")
    assert expected == unexpressible("anthropic", {}, messages)
