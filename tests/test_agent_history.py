"""An agent's history as agents send it: the assistant's tool call with no ``content`` key (a
pydantic message dumped with ``exclude_none=True``), then the tool's answer, taken by
``rrcli run``, ``rrcli serve`` (through the official openai SDK) and ``rrcli.Pool``, toward an
OpenAI backend as it is and toward an Anthropic one translated."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from runkit import read_jsonl, rrcli, write_profile
from servekit import Served

import rrcli as library

openai = pytest.importorskip("openai")

WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
}
PDF = "data:application/pdf;base64,JVBERi0xLjQK"
HISTORY = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]},
]


def _profile(tmp_path, sim, api):
    backend = {"id": "b0", "base_url": sim.openai_url}
    if api == "anthropic":
        backend = {"id": "b0", "provider": "anthropic", "base_url": sim.url}
    return write_profile(tmp_path / "pool.toml", [backend], name="pool")


def _sent(sim):
    """The messages the backend received on its last call."""
    return sim.received()[-1]["body"]["messages"]


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_run_takes_a_tool_call_without_content(tmp_path, sim_server, api):
    """A jobs line whose assistant message has tool_calls and no content is answered, and the
    backend receives the call in its own API."""
    sim = sim_server()
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text(
        f'{{"id": "a", "messages": {_json(HISTORY)}, "params": {{"max_tokens": 20}}}}\n'
    )
    done = rrcli("run", jobs, "-p", _profile(tmp_path, sim, api), "-q", cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    assert ["ok"] == [r["status"] for r in read_jsonl(tmp_path / "jobs.results.jsonl")]
    assert _called(_sent(sim), api)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_serve_takes_an_openai_sdk_agents_history(tmp_path, sim_server, api):
    """The openai SDK's agent loop: the reply's message dumped with exclude_none (no content
    key beside its tool calls) goes back with the tool's answer, and is answered."""
    sim = sim_server(ttft_ms=2, tokens_per_s=5000)
    served = Served(_profile(tmp_path, sim, api), tmp_path, "--no-auth")
    try:
        client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
        asked = [{"role": "user", "content": "What is the weather in Paris?"}]
        first = client.chat.completions.create(
            model="pool", messages=asked, tools=[WEATHER], tool_choice="required", max_tokens=20
        )
        message = first.choices[0].message
        assert message.tool_calls and message.content is None
        turn = message.model_dump(exclude_none=True)
        assert "content" not in turn
        answer = {"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "sunny"}
        second = client.chat.completions.create(
            model="pool", messages=[*asked, turn, answer], tools=[WEATHER], max_tokens=20
        )
    finally:
        served.stop()
    assert second.choices[0].finish_reason in ("stop", "length", "tool_calls")
    assert _called(_sent(sim), api)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_pool_takes_a_tool_call_without_content(tmp_path, sim_server, api):
    """``pool.chat`` answers a history whose assistant message has only tool_calls."""
    sim = sim_server()

    async def main():
        async with library.Pool.from_profile(_profile(tmp_path, sim, api)) as pool:
            return await pool.chat(HISTORY, max_tokens=20)

    record = asyncio.run(main())
    assert "ok" == record["status"]
    assert _called(_sent(sim), api)


def _called(messages, api) -> bool:
    """Whether the backend's history holds the assistant's weather call in its API's shape."""
    turn = messages[1]
    if api == "openai":
        return "weather" == turn["tool_calls"][0]["function"]["name"] and "content" not in turn
    return [("tool_use", "weather")] == [(b["type"], b.get("name")) for b in turn["content"]]


def _json(value) -> str:
    return orjson.dumps(value).decode()


def test_a_mixed_pool_sends_audio_where_it_is_taken_and_a_pdf_to_either(tmp_path, sim_server):
    """On a pool of an OpenAI and an Anthropic backend, jobs with an input_audio part all go
    to the OpenAI backend and are ok (none fails as untranslatable); jobs with a base64 PDF
    file part go to both, the Anthropic backend receiving it as a document block."""
    sim = sim_server()
    backends = [
        {"id": "oa", "base_url": sim.openai_url},
        {"id": "an", "provider": "anthropic", "base_url": sim.url},
    ]
    profile = write_profile(tmp_path / "pool.toml", backends, strategy="round_robin")
    audio = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    pdf = {"type": "file", "file": {"filename": "a.pdf", "file_data": PDF}}
    lines = [
        {"id": f"{kind}{i}", "messages": [{"role": "user", "content": [part]}]}
        for kind, part in (("audio", audio), ("pdf", pdf))
        for i in range(4)
    ]
    for line in lines:
        line["messages"][0]["content"].insert(0, {"type": "text", "text": "What is this?"})
        line["params"] = {"max_tokens": 20}
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    traces = tmp_path / "jobs.traces.jsonl"
    done = rrcli("run", jobs, "-p", profile, "-q", "--traces", traces, cwd=tmp_path)
    assert 0 == done.returncode, done.stderr
    results = {r["id"]: r for r in read_jsonl(tmp_path / "jobs.results.jsonl")}
    assert {"ok"} == {r["status"] for r in results.values()}
    assert {"oa"} == {results[f"audio{i}"]["deployment"] for i in range(4)}
    assert {"oa", "an"} == {results[f"pdf{i}"]["deployment"] for i in range(4)}
    documents = [
        block
        for request in sim.received("/v1/messages")
        for message in request["body"]["messages"]
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "document"
    ]
    assert documents and all("application/pdf" == d["source"]["media_type"] for d in documents)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_serve_takes_an_anthropic_sdk_agents_history(tmp_path, sim_server, api):
    """The anthropic SDK's agent loop: the reply's content blocks (the SDK's own models) go
    back as the assistant turn, then a tool_result with a content list, and are answered, on
    an Anthropic backend as they are and on an OpenAI one translated."""
    anthropic = pytest.importorskip("anthropic")
    sim = sim_server(ttft_ms=2, tokens_per_s=5000)
    served = Served(_profile(tmp_path, sim, api), tmp_path, "--no-auth")
    tool = {"name": "weather", "input_schema": WEATHER["function"]["parameters"]}
    asked = [{"role": "user", "content": "What is the weather in Paris?"}]
    try:
        client = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        first = client.messages.create(
            model="pool", max_tokens=20, messages=asked, tools=[tool], tool_choice={"type": "any"}
        )
        use = next(b for b in first.content if b.type == "tool_use")
        result = {
            "type": "tool_result",
            "tool_use_id": use.id,
            "content": [{"type": "text", "text": "sunny"}],
        }
        history = [
            *asked,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [result]},
        ]
        second = client.messages.create(model="pool", max_tokens=20, messages=history, tools=[tool])
    finally:
        served.stop()
    assert second.stop_reason in ("end_turn", "max_tokens", "tool_use")
    sent = _sent(sim)
    if api == "openai":
        assert ["user", "assistant", "tool"] == [m["role"] for m in sent]
        assert "sunny" == sent[2]["content"]
    else:
        assert "tool_result" == sent[2]["content"][0]["type"]
