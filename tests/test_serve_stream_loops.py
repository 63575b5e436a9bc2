"""Both SDKs' stream loops, written as their docs write them, through ``rrcli serve`` in front
of an OpenAI and an Anthropic backend (so each client API is served as it is and translated):
every chunk has the choices the client reads, an ``n = 2`` stream carries both choices, and the
usage chunk (which has none) comes only to a client that asked for it."""

from __future__ import annotations

import pytest
from runkit import write_profile
from servekit import Served

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

HI = [{"role": "user", "content": "Hi"}]
POOLS = ["openai", "anthropic"]  # the backend's API, the profile's name


@pytest.fixture
def served(tmp_path, sim_server):
    """serve with two pools: ``openai`` (an OpenAI backend) and ``anthropic`` (an Anthropic
    one), both sim servers."""
    sim = sim_server(ttft_ms=2, tokens_per_s=5000, output_tokens=12)
    oa = write_profile(tmp_path / "openai.toml", [{"id": "oa", "base_url": sim.openai_url}])
    an = write_profile(
        tmp_path / "anthropic.toml", [{"id": "an", "provider": "anthropic", "base_url": sim.url}]
    )
    server = Served(oa, tmp_path, "-p", an, "--no-auth")
    yield server
    server.stop()


def _openai(served):
    return openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)


def _anthropic(served):
    return anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)


@pytest.mark.parametrize("pool", POOLS)
def test_openai_docs_stream_loop(served, pool):
    """``for chunk in stream: chunk.choices[0].delta.content or ""`` reads every chunk (no
    chunk without choices) and its text is the whole answer's."""
    client = _openai(served)
    plain = client.chat.completions.create(model=pool, messages=HI, max_tokens=32)
    stream = client.chat.completions.create(model=pool, messages=HI, max_tokens=32, stream=True)
    text = ""
    for chunk in stream:
        text += chunk.choices[0].delta.content or ""
    assert plain.choices[0].message.content == text


@pytest.mark.parametrize("pool", POOLS)
def test_openai_usage_chunk_only_when_asked(served, pool):
    """With ``stream_options.include_usage`` the last chunk has no choices and the usage."""
    stream = _openai(served).chat.completions.create(
        model=pool,
        messages=HI,
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert [] == chunks[-1].choices and chunks[-1].usage.completion_tokens > 0
    assert all(c.choices for c in chunks[:-1])


def test_openai_n2_stream_carries_both_choices(served):
    """An ``n = 2`` stream gives each choice its text and finish reason, as the whole answer
    has them."""
    client = _openai(served)
    stream = client.chat.completions.create(
        model="openai", messages=HI, max_tokens=32, n=2, stream=True
    )
    texts, reasons = {}, {}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            if choice.finish_reason:
                reasons[choice.index] = choice.finish_reason
    assert [0, 1] == sorted(texts) and all(texts.values())
    assert {0: "stop", 1: "stop"} == reasons


@pytest.mark.parametrize("pool", POOLS)
def test_anthropic_docs_text_stream_and_raw_events(served, pool):
    """``with client.messages.stream(...) as stream: for text in stream.text_stream`` and the
    raw events loop of ``messages.create(stream=True)`` both read the whole answer's text."""
    client = _anthropic(served)
    plain = client.messages.create(model=pool, max_tokens=32, messages=HI)
    with client.messages.stream(model=pool, max_tokens=32, messages=HI) as stream:
        text = "".join(piece for piece in stream.text_stream)
    raw = ""
    for event in client.messages.create(model=pool, max_tokens=32, messages=HI, stream=True):
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            raw += event.delta.text
    assert (plain.content[0].text, plain.content[0].text) == (text, raw)
