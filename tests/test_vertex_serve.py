"""``rrcli serve`` in front of vertex backends: the official anthropic and openai SDKs call the
gateway, which calls a Gemini and a Claude model on the sim speaking Vertex AI's wire."""

from __future__ import annotations

import anthropic
import openai
from runkit import write_profile
from servekit import Served

TOKEN = "ya29.vertex-serve-token-0123456789"
CLAUDE = "claude-3-5-haiku@20241022"
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def test_sdks_call_vertex_backends_through_serve(tmp_path, sim_server):
    """A pool of a Gemini and a Claude model: the anthropic SDK's messages (plain, streamed,
    a tool call) and the openai SDK's chat completions are answered, every call on the pool,
    each at its publisher's path with the bearer token."""
    sim = sim_server(api_keys=(TOKEN,))
    backends = [
        {
            "id": model.partition("-")[0],
            "provider": "vertex",
            "model": model,
            "project": "my-project-1",
            "region": "us-east5",
            "base_url": sim.url,
            "credentials": {"token_env": "RR_TEST_VERTEX_TOKEN"},
        }
        for model in ("gemini-2.5-flash", CLAUDE)
    ]
    profile = write_profile(tmp_path / "p.toml", backends, strategy="round_robin")
    env = {"RR_TEST_VERTEX_TOKEN": TOKEN}
    served = Served(profile, tmp_path, "--no-auth", env=env)
    try:
        client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        ask = [{"role": "user", "content": "Weather in Oslo?"}]
        tools = [{"name": "weather", "input_schema": WEATHER}]
        answers = []
        for _ in range(2):
            answers.append(client.messages.create(model="p", max_tokens=8, messages=ask))
            with client.messages.stream(model="p", max_tokens=8, messages=ask) as stream:
                answers.append(stream.get_final_message())
        used = [
            client.messages.create(model="p", max_tokens=64, messages=ask, tools=tools)
            for _ in range(2)
        ]
        chat = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        completions = [
            chat.chat.completions.create(model="p", messages=ask, max_tokens=8) for _ in range(2)
        ]
    finally:
        served.stop()
    assert all(a.content[0].text for a in answers)
    assert [("tool_use", "weather")] * 2 == [(u.stop_reason, u.content[-1].name) for u in used]
    assert all(c.choices[0].message.content for c in completions)
    paths = [r["path"] for r in sim.received()]
    publishers = {p.split("/publishers/")[1].partition("/")[0] for p in paths}
    streamed = [p for p in paths if p.endswith((":streamGenerateContent", ":streamRawPredict"))]
    assert ({"google", "anthropic"}, 8, 2) == (publishers, len(paths), len(streamed))
    assert {"authorization:" + fingerprint(TOKEN): 8} == sim.stats()["credentials"]


def fingerprint(key: str) -> str:
    from rrcli.sim.behaviour import key_fingerprint

    return key_fingerprint(key)
