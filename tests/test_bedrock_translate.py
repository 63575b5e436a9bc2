"""Jobs of both client APIs as Converse requests: the rows of the table (providers.converse),
and the property that no job its own API takes, and the router would send to a bedrock backend,
is refused by Bedrock's published schema (tests/strict_bedrock.py) or by the sim."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from strict_bedrock import converse_problem
from test_translate_strict import an_job, oa_job

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import UntranslatableError
from rrcli.providers.base import Call
from rrcli.providers.bedrock import BedrockProvider
from rrcli.providers.converse import to_converse
from rrcli.providers.translate import unexpressible

SETTINGS = settings(max_examples=150, deadline=None)
BEDROCK = BedrockProvider(
    Backend(id="b", provider="bedrock", base_url="http://127.0.0.1:1", model="m", region="x"),
    None,
    retry=RetrySettings(),
)
SCHEMA = {"type": "object"}


def test_the_rows_of_the_table():
    """Tool choice, a tool error, thinking, images, top_k, cache_control and stop sequences,
    each in its Converse place."""
    body = {
        "max_tokens": 9,
        "top_k": 5,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u"},
        "tools": [{"name": "f", "input_schema": SCHEMA, "cache_control": {"type": "ephemeral"}}],
        "tool_choice": {"type": "any"},
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/jpeg", "data": "QQ=="},
                    }
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "no", "is_error": True}
                ],
            },
        ],
    }
    out = to_converse(body)
    assert {"maxTokens": 9, "stopSequences": ["END"]} == out["inferenceConfig"]
    assert {"top_k": 5, "thinking": body["thinking"]} == out["additionalModelRequestFields"]
    spec = {"toolSpec": {"name": "f", "inputSchema": {"json": SCHEMA}}}
    cache = {"cachePoint": {"type": "default"}}
    assert {"tools": [spec, cache], "toolChoice": {"any": {}}} == out["toolConfig"]
    image = {"image": {"format": "jpeg", "source": {"bytes": "QQ=="}}}
    reasoning = {"reasoningContent": {"reasoningText": {"text": "hm", "signature": "s"}}}
    use = {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}
    result = {"toolResult": {"toolUseId": "t1", "content": [{"text": "no"}], "status": "error"}}
    assert [[image], [reasoning, use], [result]] == [m["content"] for m in out["messages"]]
    assert None is converse_problem(out)


@pytest.mark.parametrize(
    "body",
    [
        {"container": "c", "messages": []},
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}
                    ],
                }
            ]
        },
    ],
)
def test_what_converse_cannot_say_is_refused_before_sending(body):
    """A Messages field with no Converse counterpart, or an image by URL, is untranslatable."""
    with pytest.raises(UntranslatableError):
        to_converse(body)


@pytest.fixture(scope="module")
def sim(request):
    from conftest import RunningSim

    from rrcli.sim.behaviour import config_from_options

    server = RunningSim(config_from_options())
    request.addfinalizer(server.stop)
    return server


def taken(sim, body: dict[str, Any]) -> tuple[int, str | None]:
    """(the sim's status for ``body``, the schema's objection)."""
    answer = httpx2.post(sim.url + "/model/m/converse", json=body, timeout=10)
    return answer.status_code, converse_problem(body)


def bedrock_body(messages, params, dialect):
    try:
        return BEDROCK.build_body(Call(messages, params, dialect=dialect))
    except UntranslatableError:
        return None


@SETTINGS
@given(oa_job())
def test_no_openai_job_is_refused_by_converse(sim, job) -> None:
    """An OpenAI-shaped job a bedrock backend would be sent (the router's Messages rules) is
    an error before sending, or a request Bedrock's schema and the sim take."""
    messages, params = job
    if unexpressible("bedrock", params, messages):
        return
    body = bedrock_body(messages, params, "openai")
    if body is not None:
        assert (200, None) == taken(sim, body)


@SETTINGS
@given(an_job())
def test_no_anthropic_job_is_refused_by_converse(sim, job) -> None:
    """An Anthropic-shaped job is an error before sending, or a request Bedrock takes."""
    messages, params = job
    body = bedrock_body(messages, params, "anthropic")
    if body is not None:
        assert (200, None) == taken(sim, body)


def test_the_router_sends_bedrock_what_messages_can_say():
    """A bedrock backend can say what Anthropic's Messages can (top_k, thinking), not what
    only chat completions can (logprobs, n = 2): the router keeps those jobs from it."""
    assert () == unexpressible("bedrock", {"top_k": 3, "thinking": {"type": "enabled"}})
    assert ("logprobs", "n") == unexpressible("bedrock", {"logprobs": True, "n": 2})
