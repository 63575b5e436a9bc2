"""A budget against every way a request may ask for output: the cap spelled twice with
different values, a spelling its API does not take, several answers, a list of prompts. Sent
through ``rrcli serve`` with the official SDKs and through ``rrcli.Pool`` to a server that bills
every token it writes (tests/billing.py: it reads the LARGEST cap a body spells, ignores one it
does not know, and reports no usage, so each call is charged what it reserved): what it billed
never passes the budget, and each body it got carries one cap, in one spelling."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import hypothesis.strategies as st
import openai
import pytest
from billing import GPT_4O
from hypothesis import given
from runkit import write_profile
from servekit import Served

import rrcli
from rrcli.config.models import cap_param
from rrcli.pool.pool import answer
from rrcli.providers.base import Call
from rrcli.routing.costs import answers
from rrcli.tokens import CAP_WORDS, cap_word, one_cap, output_cap

HI = [{"role": "user", "content": "Hi"}]
LIMIT = 0.1  # USD: five calls of 2,000 output tokens at gpt-4o's $10 a million
TWENTY = [f"p{i}" for i in range(20)]

#: (case, backend provider, the request's endpoint, its params, the cap each body must carry)
CASES = [
    ("max_tokens", "openai", "chat", {"max_tokens": 2000}, ("max_tokens", 2000)),
    (
        "max_completion_tokens",
        "openai",
        "chat",
        {"max_completion_tokens": 2000},
        ("max_completion_tokens", 2000),
    ),
    (
        "both_spelled",
        "openai",
        "chat",
        {"max_tokens": 1, "max_completion_tokens": 2000},
        ("max_tokens", 2000),
    ),
    (
        "max_output_tokens_on_chat",
        "openai",
        "chat",
        {"max_output_tokens": 2000},
        ("max_tokens", 2000),
    ),
    ("n_3", "openai", "chat", {"max_tokens": 700, "n": 3}, ("max_tokens", 700)),
    (
        "to_anthropic_both_spelled",
        "anthropic",
        "chat",
        {"max_tokens": 1, "max_completion_tokens": 2000},
        ("max_tokens", 2000),
    ),
    ("prompt_list", "openai", "completions", {"max_tokens": 100}, ("max_tokens", 100)),
]


def _profile(tmp_path, server, provider: str):
    url = server.url if provider == "anthropic" else server.openai_url
    model = "claude-sonnet-4-5" if provider == "anthropic" else "gpt-4o"
    entry = {"id": "b0", "provider": provider, "base_url": url, "model": model, "price": GPT_4O,
             "max_concurrency": 4}  # fmt: skip
    if provider == "openai":
        entry["endpoints"] = ["chat", "completions"]
    budget = {"max_cost_usd": LIMIT}
    return write_profile(tmp_path / "pool.toml", [entry], name="pool", budget=budget)


def _sent_caps(server) -> set[tuple[str, ...]]:
    """The spellings of the cap and their values in each body the server got."""
    return {tuple(f"{w}={body[w]}" for w in CAP_WORDS if w in body) for body in server.requests}


def _held(server, cap: tuple[str, int], refused: int) -> None:
    """What a user checks: the bill within the budget, the budget mostly used, the calls past
    it refused, and one cap in one spelling in every body sent."""
    word, value = cap
    assert 0.6 * LIMIT < server.billed() <= LIMIT
    assert refused > 0
    assert {(f"{word}={value}",)} == _sent_caps(server)


@pytest.mark.parametrize(
    ("case", "provider", "endpoint", "params", "cap"), CASES, ids=[c[0] for c in CASES]
)
def test_pool_calls_are_billed_within_the_budget_for_every_spelling(
    tmp_path, billing_server, case, provider, endpoint, params, cap
):
    """Twelve calls through ``rrcli.Pool`` (each of which the server bills $0.02) against a
    budget of $0.10: the server billed no more than the budget, the calls past it raised
    CallError (``budget`` once spent, before that the request too big for what is left), and
    every body carried one cap spelling at the largest asked."""
    server = billing_server(writes=4000, usage=False)
    path = _profile(tmp_path, server, provider)

    async def main() -> int:
        refused = 0
        async with rrcli.Pool.from_profile(path) as pool:
            for _ in range(12):
                try:
                    if endpoint == "completions":
                        line = {"endpoint": "completions", "prompt": list(TWENTY)}
                        answer(await pool.call({**line, "params": dict(params)}))
                    else:
                        await pool.chat(HI, **params)
                except rrcli.CallError as exc:  # spent, or too big for what is left
                    assert "budget" == exc.type or "left of the budget" in str(exc), exc
                    refused += 1
        return refused

    _held(server, cap, asyncio.run(main()))


def _openai_call(client: openai.OpenAI, endpoint: str, params: dict[str, Any]) -> None:
    known = {k: v for k, v in params.items() if k != "max_output_tokens"}
    extra = {k: v for k, v in params.items() if k == "max_output_tokens"}
    if endpoint == "completions":
        client.completions.create(model="pool", prompt=list(TWENTY), **known, extra_body=extra)
    else:
        client.chat.completions.create(model="pool", messages=HI, **known, extra_body=extra)


@pytest.mark.parametrize(
    ("case", "provider", "endpoint", "params", "cap"), CASES, ids=[c[0] for c in CASES]
)
def test_served_calls_are_billed_within_the_budget_for_every_spelling(
    tmp_path, billing_server, case, provider, endpoint, params, cap
):
    """The same twelve calls sent to ``rrcli serve`` with the official openai SDK: the server
    billed no more than the budget, the calls past it were refused (429 once spent, 400 while
    what is left is less than their worst case), and every body carried one cap spelling at the
    largest asked."""
    server = billing_server(writes=4000, usage=False)
    served = Served(_profile(tmp_path, server, provider), tmp_path, "--no-auth")
    refused = 0
    try:
        client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        for _ in range(12):
            try:
                _openai_call(client, endpoint, params)
            except (openai.RateLimitError, openai.BadRequestError):  # spent, or too big
                refused += 1
    finally:
        served.stop()
    _held(server, cap, refused)


def test_an_anthropic_request_spelling_a_second_cap_is_billed_within_the_budget(
    tmp_path, billing_server
):
    """The official anthropic SDK's ``max_tokens=1`` with ``max_completion_tokens: 2000`` beside
    it, served by an OpenAI-compatible backend that reads the larger: the bill stays within the
    budget, and the backend got one cap, the larger."""
    server = billing_server(writes=4000, usage=False)
    served = Served(_profile(tmp_path, server, "openai"), tmp_path, "--no-auth")
    refused = 0
    try:
        client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        for _ in range(12):
            try:
                client.messages.create(
                    model="pool",
                    messages=HI,
                    max_tokens=1,
                    extra_body={"max_completion_tokens": 2000},
                )
            except (anthropic.RateLimitError, anthropic.BadRequestError):  # spent, or too big
                refused += 1
    finally:
        served.stop()
    _held(server, ("max_tokens", 2000), refused)


def test_a_cap_that_is_no_whole_number_is_refused_before_anything_is_sent(tmp_path, billing_server):
    """``max_tokens: "5000"`` (a string a lenient server reads as a number) or 20.5: the call
    is refused as the request's fault, naming the field, and nothing is sent."""
    server = billing_server(writes=4000, usage=False)
    path = _profile(tmp_path, server, "openai")

    async def main() -> list[str]:
        said = []
        async with rrcli.Pool.from_profile(path) as pool:
            for value in ("5000", 20.5, -1, True):
                outcome = await pool.call({"messages": list(HI), "params": {"max_tokens": value}})
                with pytest.raises(rrcli.CallError) as caught:
                    answer(outcome)
                said.append((caught.value.type, str(caught.value)))
        return said

    said = asyncio.run(main())
    assert {"invalid_job"} == {kind for kind, _ in said}
    assert said[0][1] == 'max_tokens must be a whole number of tokens (0 or more), got "5000"'
    assert [] == server.requests


_VALUES = st.one_of(st.none(), st.integers(0, 10**6), st.integers(0, 10**6).map(float), st.just(0))


@given(
    spelled=st.dictionaries(st.sampled_from(CAP_WORDS), _VALUES),
    n=st.one_of(st.none(), st.integers(1, 8), st.integers(1, 8).map(float)),
    endpoint=st.sampled_from(["chat", "completions", "responses"]),
    dialect=st.sampled_from(["openai", "anthropic"]),
    prompts=st.integers(1, 30),
    default=st.one_of(st.none(), st.integers(1, 100_000)),
)
def test_the_cap_sent_is_the_one_reserved_and_no_smaller_than_any_asked(
    spelled, n, endpoint, dialect, prompts, default
):
    """For any spellings of the cap (each set or null, whole numbers as integers or floats), any
    ``n`` and any number of prompts: the params sent carry at most one spelling; a backend
    reading it bills no more output than reserved (that cap times every answer of every
    prompt); and no cap asked for is larger than it."""
    params: dict[str, Any] = {**spelled, "n": n}
    asked = [int(v) for v in spelled.values() if v is not None]
    word = cap_word(params, endpoint, dialect, cap_param(endpoint, "gpt-4o"))
    one_cap(params, word, default)
    sent = [w for w in CAP_WORDS if params.get(w) is not None]  # a null says nothing
    assert len(sent) <= 1
    prompt = [f"p{i}" for i in range(prompts)] if endpoint == "completions" else None
    call = Call(list(HI), params, False, dialect, endpoint, prompt, 1)
    reserved = (output_cap(params) or 0) * answers(call)
    if sent and params[sent[0]]:
        billable = params[sent[0]] * max(1, int(n or 1)) * (prompts if prompt else 1)
        assert billable <= reserved
        assert all(a <= params[sent[0]] for a in asked)
