"""The translation table between the two chat APIs (``providers.translate``), as properties.

Round trips keep a request's meaning up to the documented normalisation; a translated request
carries only fields of its target API, checked against allow-lists written here from each API's
reference (not imported from the module under test); what cannot be said is named, never sent.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strict_anthropic import ANTHROPIC_FIELDS
from strict_openai import OPENAI_FIELDS

from rrcli.config.profile import Backend
from rrcli.errors import UntranslatableError
from rrcli.providers.base import Call, Reply
from rrcli.providers.translate import (
    answer_from_forced_tool,
    to_anthropic,
    to_openai,
    unexpressible,
)
from rrcli.routing.eligibility import Eligibility, eligible_backends

SETTINGS = settings(max_examples=150, deadline=None)

#: the request body fields of each API, as the strict test servers accept them
OPENAI_REQUEST = OPENAI_FIELDS
ANTHROPIC_REQUEST = ANTHROPIC_FIELDS
OPENAI_ROLES = {"system", "developer", "user", "assistant", "tool"}
OPENAI_PARTS = {"text", "image_url", "input_audio", "file", "refusal"}
ANTHROPIC_BLOCKS = {"text", "image", "tool_use", "tool_result"}

# --- strategies ---------------------------------------------------------------------------

text = st.text(max_size=12)
ident = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
call_id = st.from_regex(r"call_[A-Za-z0-9]{1,8}", fullmatch=True)
scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), text)
json_object = st.dictionaries(ident, scalar, max_size=3)
schema = st.builds(
    lambda props: {"type": "object", "properties": {p: {"type": "string"} for p in props}},
    st.lists(ident, max_size=3),
)
cache = st.just({"type": "ephemeral"})
https_url = st.builds(lambda p: f"https://img.example.com/{p}.png", ident)
data_url = st.builds(
    lambda media, data: f"data:{media};base64,{data}",
    st.sampled_from(["image/png", "image/jpeg", "image/webp"]),
    st.from_regex(r"[A-Za-z0-9+/]{4,12}={0,2}", fullmatch=True),
)


def with_cache(part: dict[str, Any], control: dict[str, str] | None) -> dict[str, Any]:
    return part if control is None else {**part, "cache_control": control}


oa_text = st.builds(
    lambda t, c: with_cache({"type": "text", "text": t}, c), text, st.none() | cache
)
oa_image = st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, https_url | data_url)
oa_user = st.builds(
    lambda c: {"role": "user", "content": c},
    text | st.lists(oa_text | oa_image, min_size=1, max_size=3),
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
    """An assistant message with tool calls, then one tool message per call."""
    calls = draw(st.lists(oa_call, min_size=1, max_size=3, unique_by=lambda c: c["id"]))
    content = draw(st.none() | text.filter(bool))
    result = text | st.lists(oa_text, max_size=2)
    results = [{"role": "tool", "tool_call_id": c["id"], "content": draw(result)} for c in calls]
    return [{"role": "assistant", "content": content, "tool_calls": calls}, *results]


system_head = st.lists(st.builds(lambda t: {"role": "system", "content": t}, text), max_size=1)
oa_one = st.builds(
    lambda m: [m], oa_user | st.builds(lambda t: {"role": "assistant", "content": t}, text)
)
oa_turns = st.lists(oa_one | oa_tool_turn(), min_size=1, max_size=5)


@st.composite
def oa_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    head, turns = draw(system_head), draw(oa_turns)  # strategies built once: drawing is the cost
    return head + [m for turn in turns for m in turn]


oa_function = st.builds(
    lambda name, description, parameters: {
        "type": "function",
        "function": {"name": name, **description, "parameters": parameters},
    },
    ident, st.just({}) | st.builds(lambda d: {"description": d}, text.filter(bool)), schema,
)  # fmt: skip


@st.composite
def oa_params(draw: st.DrawFn) -> dict[str, Any]:
    params = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "stop": text | st.lists(text, min_size=1, max_size=3),
                "max_tokens": st.integers(1, 4096),
                "max_completion_tokens": st.integers(1, 4096),
                "temperature": st.floats(0, 1),
                "top_p": st.floats(0, 1),
                "user": text,
            },
        )
    )
    tools = draw(st.lists(oa_function, max_size=3, unique_by=lambda t: t["function"]["name"]))
    if tools:
        params["tools"] = tools
        names = [t["function"]["name"] for t in tools]
        function = st.builds(
            lambda n: {"type": "function", "function": {"name": n}}, st.sampled_from(names)
        )
        choice = draw(st.none() | st.sampled_from(["auto", "required", "none"]) | function)
        if choice is not None:
            params["tool_choice"] = choice
        if draw(st.booleans()):
            params["parallel_tool_calls"] = False
    return params


def normal_openai(messages: list[dict[str, Any]], params: dict[str, Any]) -> tuple[list, dict]:
    """What an OpenAI request reads as after a round trip through Anthropic's shape (an
    assistant turn that said nothing left out, the last one's trailing whitespace removed)."""
    params = dict(params)
    if isinstance(params.get("stop"), str):
        params["stop"] = [params["stop"]]
    if "max_completion_tokens" in params:  # the larger of the two spellings, as reserved
        wider = params.pop("max_completion_tokens")
        params["max_tokens"] = max(wider, params.get("max_tokens", wider))
    if params.get("parallel_tool_calls") is False:
        params.setdefault("tool_choice", "auto")  # carried by Anthropic's tool_choice
        if params["tool_choice"] == "none":
            del params["parallel_tool_calls"]  # nothing is called: nothing in parallel
    out = []
    for i, message in enumerate(messages):
        message = dict(message)
        content = message.get("content")
        if message["role"] == "assistant" and isinstance(content, str):
            if message.get("tool_calls"):
                message["content"] = content if content.strip() else None
            elif i == len(messages) - 1:
                message["content"] = content.rstrip()  # Anthropic continues it: no trailing space
            elif not content.strip():
                continue  # a turn that said nothing: left out
        if message["role"] == "tool" and isinstance(content, list):
            message["content"] = "".join(p["text"] for p in content)
        elif isinstance(content, list):
            message["content"] = [
                {k: v for k, v in p.items() if k != "cache_control"} for p in content
            ]
        out.append(message)
    return out, params


def split(body: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    body = dict(body)
    return body.pop("messages"), body


@SETTINGS
@given(oa_messages(), oa_params())
def test_openai_to_anthropic_and_back_keeps_the_request(messages, params) -> None:
    """OpenAI → Anthropic → OpenAI keeps messages, tools, tool calls, tool results, images,
    tool_choice, stop and the user up to the normalisation: stop a list, the larger of
    max_tokens and max_completion_tokens as max_tokens, a tool result's parts as its text,
    cache_control removed, parallel_tool_calls false carried with an explicit tool_choice."""
    there = to_anthropic(messages, params)
    system = there.pop("system", None)
    anthropic_messages, anthropic_params = split(there)
    lead = [{"role": "system", "content": system}] if system is not None else []
    back = to_openai(lead + anthropic_messages, anthropic_params)
    assert normal_openai(messages, params) == split(back)


an_text = st.builds(
    lambda t, c: with_cache({"type": "text", "text": t}, c), text, st.none() | cache
)
an_image = st.builds(
    lambda source: {"type": "image", "source": source},
    st.builds(lambda u: {"type": "url", "url": u}, https_url)
    | st.builds(
        lambda m, d: {"type": "base64", "media_type": m, "data": d},
        st.sampled_from(["image/png", "image/gif"]),
        st.from_regex(r"[A-Za-z0-9+/]{4,12}", fullmatch=True),
    ),
)
an_use = st.builds(
    lambda i, n, args: {"type": "tool_use", "id": i, "name": n, "input": args},
    call_id, ident, json_object,
)  # fmt: skip


@st.composite
def an_tool_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    uses = draw(st.lists(an_use, min_size=1, max_size=3, unique_by=lambda b: b["id"]))
    lead = draw(
        st.lists(st.builds(lambda t: {"type": "text", "text": t}, text.filter(bool)), max_size=1)
    )
    results = [{"type": "tool_result", "tool_use_id": u["id"], "content": draw(text)} for u in uses]
    return [{"role": "assistant", "content": lead + uses}, {"role": "user", "content": results}]


an_user = st.builds(
    lambda c: {"role": "user", "content": c},
    text | st.lists(an_text | an_image, min_size=1, max_size=3),
)
# Anthropic takes no assistant turn without text, nor one ending in whitespace
an_assistant = st.builds(
    lambda t: {"role": "assistant", "content": t}, text.map(str.strip).filter(bool)
)
an_turns = st.lists(
    st.builds(lambda m: [m], an_user | an_assistant) | an_tool_turn(), min_size=1, max_size=5
)


@st.composite
def an_messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    head, turns = draw(system_head), draw(an_turns)
    return head + [m for turn in turns for m in turn]


@st.composite
def an_params(draw: st.DrawFn) -> dict[str, Any]:
    params = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "stop_sequences": st.lists(text, min_size=1, max_size=3),
                "max_tokens": st.integers(1, 4096),
                "temperature": st.floats(0, 1),
                "top_p": st.floats(0, 1),
                "metadata": st.builds(lambda u: {"user_id": u}, text),
            },
        )
    )
    tools = draw(
        st.lists(
            st.builds(
                lambda n, s, c: with_cache({"name": n, "input_schema": s}, c),
                ident,
                schema,
                st.none() | cache,
            ),
            max_size=3,
            unique_by=lambda t: t["name"],
        )
    )
    if tools:
        params["tools"] = tools
        named = st.builds(
            lambda n: {"type": "tool", "name": n}, st.sampled_from([t["name"] for t in tools])
        )
        choice = draw(
            st.none() | st.sampled_from([{"type": k} for k in ("auto", "any", "none")]) | named
        )
        if choice is not None:
            if choice["type"] != "none" and draw(st.booleans()):
                choice = {**choice, "disable_parallel_tool_use": True}
            params["tool_choice"] = choice
    return params


def without_cache(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache(v) for v in value]
    return value


def normal_anthropic(messages: list[dict[str, Any]], params: dict[str, Any]) -> tuple[Any, ...]:
    """An Anthropic request after a round trip through OpenAI's shape: the leading system
    message as ``system``, cache_control removed, an assistant's text blocks as a string, and
    an assistant's whitespace-only text before its tool calls left out (it says nothing, and
    Anthropic refuses a text block without non-whitespace text)."""
    system = None
    if messages and messages[0]["role"] == "system":
        system, messages = messages[0]["content"], messages[1:]
    out = []
    for message in without_cache(messages):
        content = message["content"]
        if message["role"] == "assistant" and isinstance(content, list):
            if all(b["type"] == "text" for b in content):
                content = "".join(b["text"] for b in content)
            else:
                content = [b for b in content if b["type"] != "text" or b["text"].strip()]
            message = {"role": "assistant", "content": content}
        out.append(message)
    return system, out, without_cache(params)


BLANK_LEAD_USE = {"type": "tool_use", "id": "call_a", "name": "f", "input": {}}
BLANK_LEAD_RESULT = {"type": "tool_result", "tool_use_id": "call_a", "content": ""}


@SETTINGS
@given(an_messages(), an_params())
@example(  # found by the property: a blank text before a tool call, refused by Anthropic
    [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": " "}, BLANK_LEAD_USE]},
        {"role": "user", "content": [BLANK_LEAD_RESULT]},
    ],
    {},
)
def test_anthropic_to_openai_and_back_keeps_the_request(messages, params) -> None:
    """Anthropic → OpenAI → Anthropic keeps messages, tool_use and tool_result blocks, images,
    tools, tool_choice (with disable_parallel_tool_use), stop_sequences and the user id, up to
    the normalisation: cache_control removed, an assistant's text blocks as one string, its
    whitespace-only text before tool calls left out."""
    there = to_openai(messages, params)
    back = to_anthropic(*split(there))
    system = back.pop("system", None)
    assert normal_anthropic(messages, params) == (system, *split(back))


# --- only the target API's fields ----------------------------------------------------------

keys = ident | st.sampled_from(["type", "function", "name", "json_schema", "user_id", "text"])
anything = st.recursive(
    scalar | st.floats(-2, 2),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(keys, inner, max_size=2),
    max_leaves=4,
)
#: values worth trying for each field: shaped ones where a field has a shape, else anything
SHAPED = {
    "tools": st.lists(oa_function, max_size=2) | anything,
    "tool_choice": st.sampled_from(["auto", "required", "none"]) | anything,
    "response_format": st.sampled_from(
        [{"type": "text"}, {"type": "json_object"},
         {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}}}]
    ) | anything,
    "metadata": st.builds(lambda u: {"user_id": u}, text) | anything,
    "thinking": st.sampled_from([{"type": "disabled"}, {"type": "enabled", "budget_tokens": 1024}]),
    "system": text | st.lists(st.builds(lambda t: {"type": "text", "text": t}, text), max_size=2),
    "n": st.sampled_from([1, 2]),
    "logprobs": st.booleans(),
    "service_tier": st.sampled_from(["auto", "default", "flex", "standard_only"]),
}  # fmt: skip


def params_of(fields: set[str]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(
        {}, optional={f: SHAPED.get(f, anything) for f in sorted(fields - {"messages", "model"})}
    )


def expressible(provider: str, params: dict[str, Any]) -> dict[str, Any]:
    """What the router lets through: the params minus those the provider's API cannot say."""
    refused = set(unexpressible(provider, params))
    return {k: v for k, v in params.items() if k not in refused}


@SETTINGS
@given(oa_messages(), params_of(OPENAI_REQUEST | {"top_k", "foo", "min_p"}))
def test_a_translated_openai_request_holds_only_messages_api_fields(messages, params) -> None:
    """Whatever an OpenAI-shaped job asks, once the fields Anthropic cannot express are named
    (and the job routed elsewhere), the Messages request has only Messages API fields, only
    user and assistant messages and only Anthropic block types."""
    body = to_anthropic(messages, expressible("anthropic", params))
    assert set() == body.keys() - ANTHROPIC_REQUEST
    assert {"user", "assistant"} >= {m["role"] for m in body["messages"]}
    blocks = {
        b["type"] for m in body["messages"] if isinstance(m["content"], list) for b in m["content"]
    }
    assert ANTHROPIC_BLOCKS >= blocks


@SETTINGS
@given(an_messages(), params_of(ANTHROPIC_REQUEST | {"seed", "n", "foo"}))
def test_a_translated_anthropic_request_holds_only_chat_completions_fields(
    messages, params
) -> None:
    """Whatever an Anthropic-shaped job asks, once the fields the chat completions API cannot
    express are named, the request has only chat completions fields and OpenAI part types, and
    no cache_control anywhere."""
    body = to_openai(messages, expressible("openai", params))
    assert set() == body.keys() - OPENAI_REQUEST
    assert OPENAI_ROLES >= {m["role"] for m in body["messages"]}
    parts = {
        p["type"] for m in body["messages"] if isinstance(m["content"], list) for p in m["content"]
    }
    assert OPENAI_PARTS >= parts
    assert b"cache_control" not in orjson.dumps(body)


KNOWN_TYPES = sorted(OPENAI_PARTS | ANTHROPIC_BLOCKS | {"thinking", "document", "refusal"})
any_part = st.fixed_dictionaries(
    {"type": st.sampled_from(KNOWN_TYPES) | ident},
    optional={k: anything for k in ("text", "image_url", "source", "content", "input", "name")},
)
any_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"])},
    optional={
        "content": anything | st.lists(any_part | anything),
        "tool_calls": anything | st.lists(st.fixed_dictionaries({}, optional={"function": anything})),  # noqa: E501
        "tool_call_id": anything,
    },
)  # fmt: skip


@SETTINGS
@given(st.lists(any_message, max_size=4), params_of(OPENAI_REQUEST | ANTHROPIC_REQUEST))
def test_any_content_translates_or_is_untranslatable_never_a_crash(messages, params) -> None:
    """Messages of any shape (the jobs file checks only roles and content types) become a
    request or an UntranslatableError in either direction, never another exception."""
    for translate in (to_anthropic, to_openai):
        try:
            translate(messages, params)
        except UntranslatableError:
            pass


@pytest.mark.parametrize("source", [True, "x", 3, ["url"]])
def test_an_image_whose_source_is_not_an_object_is_untranslatable(source) -> None:
    """An Anthropic image block whose ``source`` is not an object (found by the property test
    above) is an UntranslatableError naming the block, not an AttributeError."""
    messages = [{"role": "developer", "content": [{"type": "image", "source": source}]}]
    with pytest.raises(UntranslatableError, match="image"):
        to_openai(messages, {})


# --- what cannot be said -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "params", "expected"),
    [
        ("anthropic", {"n": 2, "seed": 7, "temperature": 0.5}, ("n", "seed")),
        ("anthropic", {"n": 1, "logprobs": False, "frequency_penalty": 0}, ()),
        ("anthropic", {"logprobs": True, "top_logprobs": 3, "logit_bias": {"1": 2}},
         ("logprobs", "top_logprobs", "logit_bias")),
        ("anthropic", {"presence_penalty": 0.5, "temperature": 1.5},
         ("presence_penalty", "temperature")),
        ("anthropic", {"response_format": {"type": "json_object"}}, ("response_format",)),
        ("anthropic", {"response_format": {"type": "json_schema", "json_schema": {}}}, ()),
        ("anthropic", {"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 2048}}, ()),
        ("anthropic", {"min_p": 0.1, "stream_options": {"include_usage": True}}, ("min_p",)),
        ("openai", {"top_k": 5, "thinking": {"type": "enabled", "budget_tokens": 2048}},
         ("top_k", "thinking")),
        ("openai", {"thinking": {"type": "disabled"}, "seed": 3, "stop_sequences": ["x"]}, ()),
        ("openai", {"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, ("tools",)),
        ("openai", {"container": "c1", "metadata": {"user_id": "u"}}, ("container",)),
        ("sim", {"n": 5, "top_k": 1}, ()),
    ],
)  # fmt: skip
def test_unexpressible_names_what_the_target_api_cannot_say(provider, params, expected) -> None:
    """Anthropic has no n > 1, logprobs, seed, logit_bias, penalties, temperature above 1 or
    json_object; OpenAI no top_k, thinking or server tools; a default that says nothing and
    rrcli's own fields are not refused; a field of the target API is its own; sim takes all."""
    assert expected == unexpressible(provider, params)


def backend(bid: str, provider: str) -> Backend:
    return Backend(id=bid, provider=provider, base_url="http://127.0.0.1:1", model="m")


def test_eligible_backends_names_the_parameter_and_the_backends() -> None:
    """A job routes among the backends that can express it; each refused group gets a reason
    naming the parameters with their values and the backends."""
    pool = [backend("a", "anthropic"), backend("o", "openai"), backend("b", "anthropic")]
    ids, reasons = eligible_backends({"n": 2, "tools": []}, "openai", pool)
    assert ("o",) == ids
    assert (
        "n = 2 cannot be sent to anthropic backends a, b: Anthropic's Messages API cannot "
        "express it",
    ) == reasons


def test_eligibility_excludes_or_refuses() -> None:
    """A mixed pool excludes the backends that cannot carry the job (seed on Anthropic, top_k on
    OpenAI); a pool where none can refuses it with the reason; a pool of the job's own API
    excludes nothing."""
    mixed = Eligibility([backend("a", "anthropic"), backend("o", "openai")])
    only = Eligibility([backend("a", "anthropic")])
    assert (frozenset({"a"}), None) == mixed.check({"seed": 1}, "openai")
    assert (frozenset({"o"}), None) == mixed.check({"metadata": {}, "top_k": 2}, "anthropic")
    excluded, why = only.check({"n": 2}, "openai")
    assert (frozenset({"a"}), True) == (excluded, why is not None and why.startswith("n = 2"))
    assert (frozenset(), None) == Eligibility([backend("o", "openai")]).check({"n": 9}, "openai")


# --- content with no counterpart, and the answer tool --------------------------------------


def test_tool_call_arguments_that_are_not_json_are_an_error_naming_the_place() -> None:
    """An assistant tool call whose arguments are not JSON cannot become a tool_use block: the
    error names the message and the call."""
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]},
    ]  # fmt: skip
    with pytest.raises(UntranslatableError) as caught:
        to_anthropic(messages, {})
    assert ("untranslatable", False) == (caught.value.type, caught.value.transient)
    assert caught.value.message.startswith(
        "messages[1].tool_calls[0].function.arguments is not JSON"
    )


@pytest.mark.parametrize(
    ("translate", "message"),
    [
        (to_anthropic, {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}),
        (to_anthropic, {"role": "function", "name": "f", "content": "x"}),
        (to_openai, {"role": "user", "content": [{"type": "document", "source": {}}]}),
        (to_openai, {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                     "content": [{"type": "image", "source": {}}]}]}),
    ],
)  # fmt: skip
def test_content_without_a_counterpart_is_untranslatable(translate, message) -> None:
    """Audio and function messages for Anthropic, documents and images in tool results for
    OpenAI: an UntranslatableError, never a request the server would refuse."""
    with pytest.raises(UntranslatableError):
        translate([message], {})


def test_a_json_schema_becomes_a_forced_tool_and_its_input_the_answer() -> None:
    """response_format json_schema is a tool with that schema, forced; the reply's tool input
    becomes the output JSON text with finish reason stop."""
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    params = {
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    }
    body = to_anthropic([{"role": "user", "content": "2+2?"}], params)
    assert ([{"name": "out", "input_schema": schema}], {"type": "tool", "name": "out"}) == (
        [{k: v for k, v in t.items() if k != "description"} for t in body["tools"]],
        body["tool_choice"],
    )
    content = [{"type": "tool_use", "id": "t1", "name": "out", "input": {"answer": 4}}]
    reply = Reply("", "tool_calls", body={"content": content})
    answered = answer_from_forced_tool(reply, Call([], params))
    assert ('{"answer":4}', "stop") == (answered.output, answered.finish_reason)


def test_a_json_schema_with_tools_of_its_own_requires_some_tool_call() -> None:
    """With the job's own tools, the answer tool joins them and some tool call is required, so
    the model may still call the job's tools."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    params = {
        "tools": [tool],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out"}},
    }
    body = to_anthropic([{"role": "user", "content": "x"}], params)
    assert (["f", "out"], {"type": "any"}) == (
        [t["name"] for t in body["tools"]],
        body["tool_choice"],
    )


def test_a_json_schema_named_as_one_of_the_jobs_tools_gets_an_answer_tool_of_its_own() -> None:
    """A json_schema whose name is one of the job's tools' (found by the strict server's
    property test: Anthropic refuses two tools of one name): the answer tool is numbered, and
    its call is still read as the answer, the job's own tool call kept."""
    tool = {"type": "function", "function": {"name": "out", "parameters": {"type": "object"}}}
    params = {
        "tools": [tool],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out"}},
    }
    body = to_anthropic([{"role": "user", "content": "x"}], params)
    assert ["out", "out_1"] == [t["name"] for t in body["tools"]]
    own = {"id": "t1", "type": "function", "function": {"name": "out", "arguments": "{}"}}
    content = [
        {"type": "tool_use", "id": "t1", "name": "out", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "out_1", "input": {"answer": 42}},
    ]
    reply = Reply(output="", finish_reason="tool_calls", body={"content": content})
    reply.tool_calls = [own]
    answered = answer_from_forced_tool(reply, Call([], params))
    assert ('{"answer":42}', "stop", [own]) == (
        answered.output,
        answered.finish_reason,
        answered.tool_calls,
    )
