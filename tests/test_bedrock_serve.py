"""``rrcli serve`` in front of a bedrock backend: the official anthropic and openai SDKs call
the gateway, which signs each call to the sim speaking Bedrock's wire."""

from __future__ import annotations

import anthropic
import openai
from bedrockkit import AWS_ENV, MODEL, SECRET, bedrock_profile
from servekit import Served

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_sdks_call_a_bedrock_backend_through_serve(tmp_path, sim_server):
    """The anthropic SDK's message (plain, streamed, with a tool call) and the openai SDK's
    chat completion are answered through Converse; every call signed and served."""
    sim = sim_server(api_keys=[SECRET])
    served = Served(
        bedrock_profile(tmp_path / "p.toml", sim.url), tmp_path, "--no-auth", env=AWS_ENV
    )
    try:
        client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        ask = [{"role": "user", "content": "Weather in Oslo?"}]
        plain = client.messages.create(model=MODEL, max_tokens=8, messages=ask)
        with client.messages.stream(model=MODEL, max_tokens=8, messages=ask) as stream:
            streamed = stream.get_final_message()
        tools = [{"name": "weather", "input_schema": WEATHER}]
        used = client.messages.create(model=MODEL, max_tokens=64, messages=ask, tools=tools)
        chat = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        completion = chat.chat.completions.create(model=MODEL, messages=ask, max_tokens=8)
    finally:
        served.stop()
    assert ("max_tokens", 8) == (plain.stop_reason, plain.usage.output_tokens)
    assert plain.content[0].text == streamed.content[0].text
    assert ("tool_use", "weather") == (used.stop_reason, used.content[-1].name)
    assert isinstance(used.content[-1].input["city"], str)
    assert plain.content[0].text == completion.choices[0].message.content
    paths = [r["path"] for r in sim.received()]
    converse = f"/model/{MODEL}/converse"
    assert [converse, converse + "-stream", converse, converse] == paths
    assert {200: 4} == {int(k): v for k, v in sim.stats()["statuses"].items()}
