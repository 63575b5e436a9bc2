"""``rrcli serve`` driven by the official SDKs (openai, anthropic) in front of sim servers."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from runkit import calls, write_profile
from servekit import Served, openai_backends

openai = pytest.importorskip("openai")
anthropic = pytest.importorskip("anthropic")

HI = [{"role": "user", "content": "Hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


@pytest.fixture
def served(tmp_path, sim_server):
    sim = sim_server(ttft_ms=2, tokens_per_s=5000)
    path = write_profile(tmp_path / "pool.toml", openai_backends(sim.openai_url), name="pool")
    server = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "serve.traces.jsonl"))
    yield server
    server.stop()


def _openai(served: Served):
    return openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)


def test_openai_sdk_chat_plain_and_streamed(served, tmp_path):
    """The OpenAI SDK gets a whole chat completion, and a stream whose text equals it."""
    client = _openai(served)
    raw = client.chat.completions.with_raw_response.create(model="pool", messages=HI)
    plain = raw.parse()
    assert "b0" == raw.headers["x-rrcli-deployment"]
    assert plain.choices[0].message.content and "stop" == plain.choices[0].finish_reason
    stream = client.chat.completions.create(model="pool", messages=HI, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert plain.choices[0].message.content == text
    served.stop()
    assert 2 == len(calls(tmp_path / "serve.traces.jsonl"))


def test_openai_sdk_async_tool_calls(served):
    """The async OpenAI SDK gets tool calls, plain and streamed, in OpenAI's shape."""

    async def main():
        client = openai.AsyncOpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        plain = await client.chat.completions.create(
            model="pool", messages=HI, tools=[WEATHER], tool_choice="required"
        )
        stream = await client.chat.completions.create(
            model="pool", messages=HI, tools=[WEATHER], tool_choice="required", stream=True
        )
        names = [
            call.function.name
            async for chunk in stream
            if chunk.choices
            for call in chunk.choices[0].delta.tool_calls or ()
        ]
        return plain, names

    plain, streamed_names = asyncio.run(main())
    assert "weather" == plain.choices[0].message.tool_calls[0].function.name
    assert ["weather"] == streamed_names


def test_openai_sdk_embeddings_and_responses(served):
    """Embeddings come back one vector per input; the Responses API answers with text."""
    client = _openai(served)
    vectors = client.embeddings.create(model="pool", input=["a", "b"])
    assert [0, 1] == [d.index for d in vectors.data]
    response = client.responses.create(model="pool", input="Hello")
    assert response.output_text


def test_anthropic_sdk_messages_plain_and_streamed(served):
    """The Anthropic SDK gets a whole message, and a stream whose text equals it."""
    client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
    plain = client.messages.create(model="pool", max_tokens=64, messages=HI)
    assert "end_turn" == plain.stop_reason and plain.content[0].text
    with client.messages.stream(model="pool", max_tokens=64, messages=HI) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert plain.content[0].text == text
    assert "end_turn" == final.stop_reason


def test_anthropic_sdk_tool_use(served):
    """A tool the model must call comes back as a tool_use block, plain and streamed."""
    client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
    tool = {"name": "weather", "input_schema": WEATHER["function"]["parameters"]}
    plain = client.messages.create(
        model="pool", max_tokens=64, messages=HI, tools=[tool], tool_choice={"type": "any"}
    )
    assert ["tool_use"] == [b.type for b in plain.content if b.type == "tool_use"]
    with client.messages.stream(
        model="pool", max_tokens=64, messages=HI, tools=[tool], tool_choice={"type": "any"}
    ) as stream:
        final = stream.get_final_message()
    assert "weather" == next(b.name for b in final.content if b.type == "tool_use")


def test_errors_in_each_apis_shape(served):
    """An unknown model is a 404 in the client's API's error shape, naming what is served."""
    with pytest.raises(openai.NotFoundError) as caught:
        _openai(served).chat.completions.create(model="nope", messages=HI)
    assert "pool" in str(caught.value)
    client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.create(model="nope", max_tokens=8, messages=HI)


def test_pydantic_ai_agent_calls_a_tool_over_several_steps(served):
    """A pydantic-ai Agent on the pool calls its tool, gets the result back to the model and
    ends with text: plain and streamed."""
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=served.url + "/v1", api_key="none")
    agent = Agent(OpenAIChatModel("pool", provider=provider))
    asked: list[str] = []

    @agent.tool_plain
    def weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return "sunny"

    result = agent.run_sync("What is the weather in Paris?")
    requests = [m for m in result.all_messages() if m.kind == "request"]
    assert isinstance(result.output, str) and result.output
    assert 2 == len(requests) and 1 == len(asked)

    async def streamed():
        async with agent.run_stream("And in Rome?") as run:
            return await run.get_output()

    assert asyncio.run(streamed())
    assert 2 == len(asked)


def test_anthropic_sdk_counts_tokens(served):
    """``messages.count_tokens`` where no backend counts (an OpenAI-wire pool) is answered
    with rrcli's estimate, four characters a token and four a message, the system text and
    the tools counted too; an unknown model is a 404."""
    client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
    text = [{"role": "user", "content": "x" * 400}]
    plain = client.messages.count_tokens(model="pool", messages=text)
    tool = {"name": "weather", "input_schema": WEATHER["function"]["parameters"]}
    fuller = client.messages.count_tokens(
        model="pool", messages=text, system="y" * 40, tools=[tool]
    )
    tools = len(orjson.dumps(tool)) // 4
    assert (104, 104 + 10 + tools) == (plain.input_tokens, fuller.input_tokens)
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="nope", messages=HI)


def test_anthropic_sdk_counts_tokens_at_an_anthropic_backend(tmp_path, billing_server):
    """A pool with an Anthropic backend that counts: ``messages.count_tokens`` is its count,
    asked for the backend's model and naming it in ``x-rrcli-deployment``; counting bills
    nothing and leaves no call in the trace."""
    server = billing_server()
    backend = {"id": "an", "provider": "anthropic", "base_url": server.url, "model": "claude-x"}
    path = write_profile(tmp_path / "pool.toml", [backend], name="pool")
    traces = tmp_path / "serve.traces.jsonl"
    served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
    try:
        client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        text = [{"role": "user", "content": "x" * 400}]
        raw = client.messages.with_raw_response.count_tokens(model="pool", messages=text)
    finally:
        served.stop()
    seen = (raw.parse().input_tokens, raw.headers["x-rrcli-deployment"], server.requests[-1])
    assert (400, "an", {"model": "claude-x", "messages": text}) == seen
    assert (0.0, []) == (server.billed(), calls(traces))
