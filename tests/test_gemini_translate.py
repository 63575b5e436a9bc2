"""The Gemini column of the translation table: every chat request the official SDKs' types
allow, with any parameters, is either routed away from Gemini backends (``unexpressible``
names what Gemini cannot say) or translated into a body the sim's strict Gemini wire accepts
(it refuses unknown fields and empty parts as Gemini's parser does); the table's rows, and
Gemini's answers read back into OpenAI's shape."""

from __future__ import annotations

import copy

import httpx2
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sdk_shapes import json_of

from rrcli.errors import ProviderError, UntranslatableError
from rrcli.providers._from_gemini import gemini_reply
from rrcli.providers.translate import to_gemini, to_openai, unexpressible

chat = pytest.importorskip("openai.types.chat")
anthropic_types = pytest.importorskip("anthropic.types")

SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
SCHEMA = {"name": "out", "schema": {"type": "object", "properties": {"a": {"type": "string"}}}}
OPENAI_PARAMS = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": st.integers(1, 4000),
        "max_completion_tokens": st.integers(1, 4000),
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0, 1),
        "seed": st.integers(0, 2**31),
        "presence_penalty": st.floats(-2, 2),
        "frequency_penalty": st.floats(-2, 2),
        "stop": st.one_of(st.text(max_size=5), st.lists(st.text(max_size=5), max_size=6)),
        "n": st.integers(1, 10),
        "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 5),
        "user": st.text(max_size=5),
        "metadata": st.dictionaries(st.text(max_size=3), st.text(max_size=3), max_size=2),
        "store": st.booleans(),
        "parallel_tool_calls": st.booleans(),
        "reasoning_effort": st.sampled_from(["none", "minimal", "low", "medium", "high"]),
        "response_format": st.sampled_from(
            [
                {"type": "text"},
                {"type": "json_object"},
                {"type": "json_schema", "json_schema": SCHEMA},
            ]
        ),
        "tools": st.just([TOOL]),
        "tool_choice": st.sampled_from(
            ["auto", "none", "required", {"type": "function", "function": {"name": "f"}}]
        ),
        "logit_bias": st.sampled_from([{}, {"50256": -100}]),
        "prompt_cache_key": st.text(max_size=5),
        "service_tier": st.sampled_from(["auto", "default", "flex"]),
    },
)
#: a user's question, then what the SDK's types allow (a participant's ``name``, which routes a
#: job away, left out so that most examples are sent)
FIRST = {"role": "user", "content": "Hi"}
OPENAI_HISTORY = st.lists(json_of(chat.ChatCompletionMessageParam), min_size=1, max_size=4).map(
    lambda ms: [FIRST, *({k: v for k, v in m.items() if k != "name"} for m in ms)]
)
ANTHROPIC_HISTORY = st.lists(json_of(anthropic_types.MessageParam), max_size=4).map(
    lambda ms: [FIRST, *ms]
)
ANTHROPIC_PARAMS = st.fixed_dictionaries(
    {"max_tokens": st.integers(1, 4000)},
    optional={
        "system": st.text(max_size=5),
        "stop_sequences": st.lists(st.text(max_size=5), max_size=5),
        "temperature": st.floats(0, 1),
        "top_k": st.integers(1, 40),
        "top_p": st.floats(0, 1),
    },
)
#: what may fail at send time whatever the routing: arguments no API reads as an object, a tool
#: result answering no call, content that is no text nor parts
UNSENDABLE = ("function.arguments is not", "answers no tool call", "neither text nor")


@pytest.fixture
def generate(sim_server):
    """POST a body to the sim's generateContent: (status, error message)."""
    sim = sim_server()
    client = httpx2.Client(timeout=10)
    url = sim.url + "/v1beta/models/gemini-2.5-flash:generateContent"

    def post(body):
        answer = client.post(url, content=orjson.dumps(body))
        error = answer.json().get("error") if answer.status_code != 200 else None
        return answer.status_code, error

    yield post
    client.close()


def _sent_or_routed(generate, messages, params, dialect):
    routed_away = unexpressible("gemini", params, messages, dialect)
    if dialect == "anthropic":
        try:
            translated = to_openai(copy.deepcopy(messages), params)
        except UntranslatableError:
            return  # fails on OpenAI backends alike: content no chat completions API has
        messages = translated.pop("messages")
        params = translated
    try:
        body = to_gemini(copy.deepcopy(messages), params)
    except UntranslatableError as exc:
        assert routed_away or any(words in str(exc) for words in UNSENDABLE), str(exc)
        return
    if routed_away:
        return
    assert (200, None) == generate(body)


@SETTINGS
@given(messages=OPENAI_HISTORY, params=OPENAI_PARAMS)
@example(
    messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": ""}]},
    ],
    params={},
)
@example(
    messages=[{"role": "assistant", "content": ""}, {"role": "user", "content": "x"}], params={}
)
@example(
    messages=[{"role": "system", "content": "Be brief."}, FIRST],
    params={
        "max_tokens": 5,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 1,
        "presence_penalty": 0.1,
        "frequency_penalty": 0.1,
        "stop": ["a", "b"],
        "n": 2,
        "reasoning_effort": "low",
        "response_format": {"type": "json_schema", "json_schema": SCHEMA},
        "tools": [TOOL],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "user": "u",
        "metadata": {"a": "b"},
        "prompt_cache_key": "k",
        "parallel_tool_calls": False,
    },
)
def test_openai_requests_reach_gemini_as_it_takes_them(generate, messages, params):
    """An OpenAI-shaped request is routed away from Gemini or sent as a body Gemini's strict
    parser accepts."""
    _sent_or_routed(generate, messages, params, "openai")


@SETTINGS
@given(messages=ANTHROPIC_HISTORY, params=ANTHROPIC_PARAMS)
def test_anthropic_requests_reach_gemini_as_it_takes_them(generate, messages, params):
    """An Anthropic-shaped request is routed away from Gemini or sent, by way of the OpenAI
    shape, as a body Gemini's strict parser accepts."""
    _sent_or_routed(generate, messages, params, "anthropic")


def test_an_unknown_field_is_refused_by_name(generate):
    """The sim's strict check: a field Gemini's request does not have is a 400 naming it."""
    body = {"contents": [{"role": "user", "parts": [{"text": "x"}]}], "max_tokens": 5}
    status, error = generate(body)
    assert 400 == status
    assert "INVALID_ARGUMENT" == error["status"]
    assert 'Unknown name "max_tokens"' in error["message"]


def test_what_gemini_cannot_say_is_named():
    """logprobs, more than eight candidates, a logit bias and a URL image route a job away
    from Gemini backends; a field of Gemini's own (a backend's params) is said as it is."""
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    messages = [{"role": "user", "content": [image]}]
    params = {"logprobs": True, "n": 9, "logit_bias": {"1": 2}, "topK": 3, "safetySettings": []}
    assert ("logprobs", "n", "logit_bias", "messages[0].content[0]") == unexpressible(
        "gemini", params, messages, "openai"
    )


def test_gemini_own_params_go_where_gemini_reads_them():
    """A backend's Gemini params: request fields at the top, generation config fields in
    generationConfig, merged with the translated ones."""
    body = to_gemini(
        [{"role": "user", "content": "x"}],
        {"max_tokens": 5, "topK": 3, "safetySettings": [{"category": "c", "threshold": "t"}]},
    )
    assert {"maxOutputTokens": 5, "topK": 3} == body["generationConfig"]
    assert [{"category": "c", "threshold": "t"}] == body["safetySettings"]


def test_tool_choice_reasoning_effort_and_cap_rows():
    """tool_choice required / a named function / none → toolConfig's modes; reasoning_effort
    → a thinking budget; both spellings of the cap → the larger as maxOutputTokens."""
    said = [
        to_gemini([{"role": "user", "content": "x"}], {"tools": [TOOL], "tool_choice": choice})
        for choice in ("required", {"type": "function", "function": {"name": "f"}}, "none")
    ]
    assert [
        {"mode": "ANY"},
        {"mode": "ANY", "allowedFunctionNames": ["f"]},
        {"mode": "NONE"},
    ] == [b["toolConfig"]["functionCallingConfig"] for b in said]
    body = to_gemini([{"role": "user", "content": "x"}], {"reasoning_effort": "low"})
    assert {"thinkingConfig": {"thinkingBudget": 1024}} == body["generationConfig"]
    for params in ({"max_tokens": 7, "max_completion_tokens": 9}, {"max_completion_tokens": 9}):
        body = to_gemini([{"role": "user", "content": "x"}], {**params, "max_tokens": 7})
        assert {"maxOutputTokens": 9} == body["generationConfig"]


def test_answers_read_back_in_openai_shape():
    """Thought parts are reasoning, function calls tool calls keeping their signature, usage
    counts thoughts as output and cached tokens apart; a finishReason SAFETY is a
    content_filter error, never retried."""
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "thinking", "thought": True},
                        {
                            "functionCall": {"name": "f", "args": {"a": 1}},
                            "thoughtSignature": "c2ln",
                        },
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "cachedContentTokenCount": 4,
            "candidatesTokenCount": 3,
            "thoughtsTokenCount": 5,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }
    reply = gemini_reply(body, None)
    (call,) = reply.tool_calls
    assert ("thinking", "tool_calls", '{"a":1}') == (
        reply.reasoning_content,
        reply.finish_reason,
        call["function"]["arguments"],
    )
    assert {"google": {"thought_signature": "c2ln"}} == call["extra_content"]
    assert (10, 8, 4, 5) == (
        reply.input_tokens,
        reply.output_tokens,
        reply.cached_input_tokens,
        reply.reasoning_tokens,
    )
    body["candidates"][0]["finishReason"] = "RECITATION"
    with pytest.raises(ProviderError) as blocked:
        gemini_reply(body, None)
    assert ("content_filter", False) == (blocked.value.type, blocked.value.transient)
    assert "RECITATION" in blocked.value.message
