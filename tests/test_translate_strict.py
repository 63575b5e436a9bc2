"""No translated job draws a 400: jobs of either API, as each adapter writes them for a backend
of the other API, posted to a strict server of that API on loopback (tests/strict_api.py), which
refuses exactly what the real API refuses.

A job whose params or messages the other API cannot say (``unexpressible``) is routed away from
that backend, and one whose content has no counterpart is an error before anything is sent: the
property is that everything else is taken. Each job is first checked against its own API's
rules, so the generators make only jobs their own API would take.
"""

from __future__ import annotations

from typing import Any

import httpx2
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strict_anthropic import anthropic_problem
from strict_api import strict_servers
from strict_openai import openai_problem
from test_translate import call_id, ident, json_object, oa_image, schema

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import UntranslatableError
from rrcli.providers.anthropic import AnthropicProvider
from rrcli.providers.base import Call
from rrcli.providers.openai import OpenAIProvider
from rrcli.providers.translate import unexpressible

SETTINGS = settings(max_examples=200, deadline=None)

#: text a model may be sent: words, and the whitespace that tests a rule
words = st.text(st.sampled_from("ab cé\n\t"), max_size=8)
said = words.map(str.strip).filter(bool)  # text with something in it
stop = st.sampled_from(["\n", "\n\n", " ", "", "END", "###", "\nUser:"]) | said


@pytest.fixture(scope="module")
def servers():
    with strict_servers() as pair, httpx2.Client(timeout=10) as client:
        yield pair, client


def adapters() -> tuple[OpenAIProvider, AnthropicProvider]:
    retry = RetrySettings()
    openai = Backend(id="o", provider="openai", base_url="http://127.0.0.1:1/v1", model="gpt")
    anthropic = Backend(id="a", provider="anthropic", base_url="http://127.0.0.1:1", model="cl")
    return OpenAIProvider(openai, None, retry=retry), AnthropicProvider(
        anthropic, None, retry=retry
    )


OPENAI, ANTHROPIC = adapters()

# --- OpenAI-shaped jobs --------------------------------------------------------------------

oa_text_part = st.builds(lambda t: {"type": "text", "text": t}, words)
oa_user = st.builds(
    lambda content, name: {"role": "user", "content": content, **name},
    words | st.lists(oa_text_part | oa_image, min_size=1, max_size=3),
    st.just({}) | st.builds(lambda n: {"name": n}, ident),
)
oa_assistant = st.builds(lambda t: {"role": "assistant", "content": t}, words) | st.builds(
    lambda r: {"role": "assistant", "content": [{"type": "refusal", "refusal": r}]}, said
)
oa_call = st.builds(
    lambda i, name, args: {
        "id": i, "type": "function",
        "function": {"name": name, "arguments": orjson.dumps(args).decode()},
    },
    call_id, ident, json_object,
)  # fmt: skip


@st.composite
def oa_tool_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    calls = draw(st.lists(oa_call, min_size=1, max_size=2, unique_by=lambda c: c["id"]))
    content = draw(st.none() | words)
    results = [{"role": "tool", "tool_call_id": c["id"], "content": draw(words)} for c in calls]
    return [{"role": "assistant", "content": content, "tool_calls": calls}, *results]


@st.composite
def oa_job(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    head = draw(st.lists(st.builds(lambda t: {"role": "system", "content": t}, words), max_size=1))
    one = st.builds(lambda m: [m], oa_user | oa_assistant)
    turns = draw(st.lists(one | oa_tool_turn(), min_size=1, max_size=5))
    params = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "stop": stop | st.lists(stop, min_size=1, max_size=4),
                "max_tokens": st.integers(1, 4096),
                "temperature": st.floats(0, 2),
                "top_p": st.floats(0, 1),
                "user": words,
                "n": st.integers(1, 2),
                "response_format": st.builds(
                    lambda name, strict: {
                        "type": "json_schema",
                        "json_schema": {"name": name, "schema": {"type": "object"}, **strict},
                    },
                    ident,
                    st.just({}) | st.builds(lambda s: {"strict": s}, st.booleans()),
                ),
            },
        )
    )
    tools = draw(
        st.lists(
            st.builds(
                lambda name, parameters, strict: {
                    "type": "function",
                    "function": {"name": name, "parameters": parameters, **strict},
                },
                ident,
                schema,
                st.just({}) | st.builds(lambda s: {"strict": s}, st.booleans()),
            ),
            max_size=2,
            unique_by=lambda t: t["function"]["name"],
        )
    )
    if tools:
        params["tools"] = tools
        name = tools[0]["function"]["name"]
        choices = ["auto", "required", "none", {"type": "function", "function": {"name": name}}]
        params["tool_choice"] = draw(st.sampled_from(choices))
        if draw(st.booleans()):
            params["parallel_tool_calls"] = False
    return head + [m for turn in turns for m in turn], params


# --- Anthropic-shaped jobs -----------------------------------------------------------------

an_text = st.builds(lambda t: {"type": "text", "text": t}, said)
an_use = st.builds(
    lambda i, n, args: {"type": "tool_use", "id": i, "name": n, "input": args},
    call_id, ident, json_object,
)  # fmt: skip


@st.composite
def an_tool_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    uses = draw(st.lists(an_use, min_size=1, max_size=2, unique_by=lambda b: b["id"]))
    lead = draw(st.lists(an_text, max_size=1))
    results = [{"type": "tool_result", "tool_use_id": u["id"], "content": draw(said)} for u in uses]
    return [{"role": "assistant", "content": lead + uses}, {"role": "user", "content": results}]


an_head = st.lists(st.builds(lambda t: {"role": "system", "content": t}, said), max_size=1)
an_user = st.builds(
    lambda c: {"role": "user", "content": c}, said | st.lists(an_text, min_size=1, max_size=2)
)
an_assistant = st.builds(lambda t: {"role": "assistant", "content": t}, said)
an_turns = st.lists(
    st.builds(lambda m: [m], an_user | an_assistant) | an_tool_turn(), min_size=1, max_size=5
)
an_params = st.fixed_dictionaries(
    {},
    optional={
        "stop_sequences": st.lists(said, min_size=1, max_size=6),
        "max_tokens": st.integers(1, 4096),
        "temperature": st.floats(0, 1),
        "top_p": st.floats(0, 1),
        "top_k": st.integers(1, 40),
        "metadata": st.builds(lambda u: {"user_id": u}, said),
    },
)
an_tools = st.lists(
    st.builds(lambda n, s: {"name": n, "input_schema": s}, ident, schema),
    max_size=2,
    unique_by=lambda t: t["name"],
)


@st.composite
def an_job(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    head, turns, params, tools = draw(an_head), draw(an_turns), draw(an_params), draw(an_tools)
    if tools:
        params["tools"] = tools
        choices = [{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": tools[0]["name"]}]
        params["tool_choice"] = draw(st.sampled_from(choices))
    return head + [m for turn in turns for m in turn], params


def posted(servers, api: str, body: dict[str, Any]) -> tuple[int, str]:
    (openai, anthropic), client = servers
    server = openai if api == "openai" else anthropic
    path = "/chat/completions" if api == "openai" else "/v1/messages"
    answer = client.post(server.url + path, json=body)
    return answer.status_code, answer.text


@SETTINGS
@given(oa_job())
def test_no_openai_job_draws_a_400_from_the_messages_api(servers, job) -> None:
    """An OpenAI-shaped job its own API takes is, toward an Anthropic backend, routed away
    (what it asks cannot be said there), an error before sending, or a request the strict
    Messages server takes."""
    messages, params = job
    own = OPENAI.build_body(Call(messages, params))
    assert None is openai_problem(own)
    if unexpressible("anthropic", params, messages):
        return
    try:
        body = ANTHROPIC.build_body(Call(messages, params))
    except UntranslatableError:
        return
    assert (200, None) == (posted(servers, "anthropic", body)[0], anthropic_problem(body))


@SETTINGS
@given(an_job())
def test_no_anthropic_job_draws_a_400_from_the_chat_completions_api(servers, job) -> None:
    """An Anthropic-shaped job (a Message Batches line) its own API takes is, toward an
    OpenAI-compatible backend, routed away, an error before sending, or a request the strict
    chat completions server takes."""
    messages, params = job
    own = ANTHROPIC.build_body(Call(messages, params, dialect="anthropic"))
    assert None is anthropic_problem(own)
    if unexpressible("openai", params, messages):
        return
    try:
        body = OPENAI.build_body(Call(messages, params, dialect="anthropic"))
    except UntranslatableError:
        return
    assert (200, None) == (posted(servers, "openai", body)[0], openai_problem(body))
