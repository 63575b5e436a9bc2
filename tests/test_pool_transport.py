"""``rrcli.PoolTransport``: the official SDKs and pydantic-ai on a pool in this process, no
server and no socket between them and the pool (the backends are sim servers on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest
from runkit import calls, write_profile
from servekit import openai_backends

import rrcli

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

HI = [{"role": "user", "content": "Hi"}]


def _in_pool(tmp_path, sim, work, **top):
    """``work(pool, http)`` with the pool open and an httpx2 client over its transport."""
    path = write_profile(
        tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool", **top
    )

    async def main():
        pool = rrcli.Pool.from_profile(path, traces=tmp_path / "t.jsonl")
        async with pool, httpx2.AsyncClient(transport=rrcli.PoolTransport(pool)) as http:
            return await work(pool, http)

    return asyncio.run(main())


def _openai(http):
    return openai.AsyncOpenAI(base_url="http://pool/v1", api_key="-", http_client=http)


def test_the_openai_sdk_chats_streams_and_embeds_in_process(tmp_path, sim_server):
    """The async OpenAI SDK over the transport: a whole chat completion (its backend named in
    ``x-rrcli-deployment``), a stream whose text equals it, embeddings; each call traced."""
    sim = sim_server(ttft_ms=2, tokens_per_s=5000)

    async def work(pool, http):
        client = _openai(http)
        raw = await client.chat.completions.with_raw_response.create(model="pool", messages=HI)
        stream = await client.chat.completions.create(model="pool", messages=HI, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        vectors = await client.embeddings.create(model="pool", input=["a", "b"])
        return raw.headers["x-rrcli-deployment"], raw.parse(), text, vectors

    deployment, plain, text, vectors = _in_pool(tmp_path, sim, work)
    assert ("b0", plain.choices[0].message.content) == (deployment, text)
    assert 2 == len(vectors.data)
    assert 3 == len(calls(tmp_path / "t.jsonl"))


def test_a_stream_arrives_as_the_backend_sends_it(tmp_path, sim_server):
    """A backend streaming for about 2 s: the first text reaches the SDK long before the
    stream's end."""
    sim = sim_server(ttft_ms=20, tokens_per_s=16, output_tokens=32)

    async def work(pool, http):
        started = time.monotonic()
        stream = await _openai(http).chat.completions.create(model="pool", messages=HI, stream=True)
        times = [time.monotonic() - started async for c in stream if c.choices]
        return times[0], times[-1]

    first, last = _in_pool(tmp_path, sim, work)
    assert last > 1.5 and first < last / 3


def test_a_stream_closed_early_cancels_its_call(tmp_path, sim_server):
    """An SDK stream closed after its first text: the backend's call is dropped and traced
    ``cancelled`` by the client, and the pool takes the next call."""
    sim = sim_server(ttft_ms=20, tokens_per_s=8, output_tokens=64)

    async def work(pool, http):
        client = _openai(http)
        stream = await client.chat.completions.create(model="pool", messages=HI, stream=True)
        async for _ in stream:
            break
        await stream.close()
        deadline = time.monotonic() + 5
        while sim.stats()["concurrency"] and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        after = await client.chat.completions.create(model="pool", messages=HI)
        return sim.stats()["concurrency"], after

    left, after = _in_pool(tmp_path, sim, work)
    seen = [(c["outcome"], c["error_type"]) for c in calls(tmp_path / "t.jsonl")]
    assert (0, "stop") == (left, after.choices[0].finish_reason)
    assert [("cancelled", "client_disconnected"), ("ok", None)] == seen


def test_the_anthropic_sdk_and_errors_in_its_shape(tmp_path, sim_server):
    """The async Anthropic SDK over the transport: a message, a stream whose text equals it,
    and an unknown model raised as the SDK's NotFoundError."""
    sim = sim_server(ttft_ms=2, tokens_per_s=5000)

    async def work(pool, http):
        client = anthropic.AsyncAnthropic(base_url="http://pool", api_key="-", http_client=http)
        plain = await client.messages.create(model="pool", max_tokens=64, messages=HI)
        async with client.messages.stream(model="pool", max_tokens=64, messages=HI) as stream:
            text = "".join([t async for t in stream.text_stream])
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.create(model="nope", max_tokens=8, messages=HI)
        return plain, text

    plain, text = _in_pool(tmp_path, sim, work)
    assert ("end_turn", plain.content[0].text) == (plain.stop_reason, text)


def test_a_pydantic_ai_agent_calls_a_tool_in_process(tmp_path, sim_server):
    """A pydantic-ai Agent whose OpenAI model sends through the transport calls its tool and
    ends with text, its two requests both the pool's calls."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    sim = sim_server(ttft_ms=2, tokens_per_s=5000)
    asked: list[str] = []

    async def work(pool, http):
        provider = OpenAIProvider(openai_client=_openai(http))
        agent = Agent(OpenAIChatModel("pool", provider=provider))

        @agent.tool_plain
        def weather(city: str) -> str:
            """The weather in a city."""
            asked.append(city)
            return "sunny"

        return await agent.run("What is the weather in Paris?")

    result = _in_pool(tmp_path, sim, work)
    assert isinstance(result.output, str) and result.output
    assert (1, 2) == (len(asked), len(calls(tmp_path / "t.jsonl")))
