"""One mixed pool behind ``rrcli serve``: two Azure OpenAI deployments, a Bedrock Claude, a
Gemini on Vertex AI (a project and region, a bearer token from ``credentials.token_env``), the
same Gemini on the Gemini API (a key), an OpenAI key and a vLLM server (the ``vllm`` preset), each
on ``rrcli sim`` speaking that provider's wire (one sim holds the clouds' keys, the Vertex token
and the AWS secret, a keyless one stands for vLLM). The official openai SDK (the
``x-rrcli-session`` header) and anthropic SDK (``/s/{session}``) hold two-turn sessions over the
pool, and a pydantic-ai agent makes a tool round trip in a session on each deployment. Every call
is served by the pool, each session stays on one deployment, each backend receives its own API's
bodies, translated exactly, every call is priced, and no key or token is written.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import tomli_w
from bedrockkit import ACCESS_KEY, AWS_ENV, SECRET
from conftest import RunningSim
from runkit import calls
from servekit import Served

from rrcli.config.prices import lookup_price
from rrcli.sim.behaviour import config_from_options, key_fingerprint

AZ_KEY = "azk-mixed-0123456789abcdef0123456789ab"
GM_KEY = "gm-mixed-key-0123456789abcdef"
OA_KEY = "sk-mixed-0123456789abcdef0123456789"
VX_TOKEN = "ya29.mixed-vertex-token-0123456789abcdef"
ENV = {
    **AWS_ENV,
    "AZ_KEY": AZ_KEY,
    "GM_KEY": GM_KEY,
    "OA_KEY": OA_KEY,
    "VX_TOKEN": VX_TOKEN,
    "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent.json",  # the token is the profile's only
}
VERSION = "2024-10-21"
CLAUDE = "us.anthropic.claude-3-5-haiku-20241022-v1:0"
GEMINI = "gemini-2.5-flash"
PROJECT, REGION = "mixed-project-1", "us-east5"
VERTEX = f"/v1/projects/{PROJECT}/locations/{REGION}/publishers/google/models/{GEMINI}:"
VLLM = "Qwen/Qwen2.5-7B-Instruct"  # the vllm preset's model
#: USD per million tokens, for the backends genai-prices cannot price at a loopback address
PRICE = {"input": 1.0, "output": 2.0}
DEPLOYMENTS = ("az-east", "az-west", "bedrock", "vertex", "gemini", "openai", "vllm")
SESSIONS = len(DEPLOYMENTS)  # the default round_robin binds one new session to each in turn
TURNS = 2
MAX_TOKENS = 16
SYSTEM = "Answer briefly."
#: the model each wire is sent (the body's ``model``, or the path's)
MODELS = {
    "az-east": "gpt-4o-mini",
    "az-west": "gpt-4o-mini",
    "bedrock": CLAUDE,
    "vertex": GEMINI,
    "gemini": GEMINI,
    "openai": "gpt-4o-mini",
    "vllm": VLLM,
}
OPENAI_WIRE = ("az-east", "az-west", "openai", "vllm")
GEMINI_WIRE = ("vertex", "gemini")


def mixed_profile(path: Path, cloud: RunningSim, local: RunningSim) -> Path:
    """The pool ``mixed`` (binding by session): Azure's deployments gpt4o-east and gpt4o-west
    by key, Gemini 2.5 Flash on Vertex AI by a token and on the Gemini API by a key (all priced
    by genai-prices), Bedrock's Claude 3.5 Haiku signed from the AWS environment, an OpenAI key
    and the vllm preset (priced here)."""
    azure = {
        "provider": "azure",
        "model": "gpt-4o-mini",
        "api_version": VERSION,
        "base_url": cloud.url,
        "credentials": {"api_key_env": "AZ_KEY"},
    }
    backends: list[dict[str, Any]] = [
        {**azure, "id": "az-east", "deployment": "gpt4o-east"},
        {**azure, "id": "az-west", "deployment": "gpt4o-west"},
        {
            "id": "bedrock",
            "provider": "bedrock",
            "model": CLAUDE,
            "region": "us-east-1",
            "base_url": cloud.url,
            "price": PRICE,
        },
        {
            "id": "vertex",
            "provider": "vertex",
            "model": GEMINI,
            "project": PROJECT,
            "region": REGION,
            "base_url": cloud.url,
            "credentials": {"token_env": "VX_TOKEN"},
        },
        {
            "id": "gemini",
            "provider": "gemini",
            "model": GEMINI,
            "base_url": cloud.url,
            "credentials": {"api_key_env": "GM_KEY"},
        },
        {
            "id": "openai",
            "provider": "openai",
            "model": "gpt-4o-mini",
            "base_url": cloud.openai_url,
            "credentials": {"api_key_env": "OA_KEY"},
            "price": PRICE,
        },
        {"id": "vllm", "provider": "vllm", "base_url": local.openai_url, "price": PRICE},
    ]
    for backend in backends:
        backend["allow_private"] = True
    retry = {"backoff_initial": 0.01, "backoff_max": 0.05}
    profile = {"name": "mixed", "binding": "session", "retry": retry, "backends": backends}
    path.write_bytes(tomli_w.dumps(profile).encode())
    return path


def wire_of(request: dict[str, Any], local: RunningSim) -> str:
    """The deployment a request the sims received was meant for, by its sim and path."""
    path = request["path"]
    if request["sim"] is local:
        return "vllm"
    for deployment, prefix in (
        ("az-east", "/openai/deployments/gpt4o-east/"),
        ("az-west", "/openai/deployments/gpt4o-west/"),
        ("bedrock", f"/model/{CLAUDE}/"),
        ("vertex", VERTEX),
        ("gemini", f"/v1beta/models/{GEMINI}:"),
        ("openai", "/v1/chat/completions"),
    ):
        if path.startswith(prefix):
            return deployment
    return f"none of the backends' paths: {path}"


def first_text(request: dict[str, Any]) -> str:
    """The first user text of a request the sims received, whatever its wire."""
    body = request["body"]
    if "contents" in body:
        return body["contents"][0]["parts"][0]["text"]
    first = next(m for m in body["messages"] if m["role"] == "user")["content"]
    return first if isinstance(first, str) else first[0]["text"]


def openai_chats(url: str) -> dict[str, list]:
    """Each openai SDK session's turns: (deployment answering, history sent, answer)."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    turns: dict[str, list] = defaultdict(list)
    for n in range(SESSIONS):
        history: list[dict[str, Any]] = []
        for turn in range(TURNS):
            history.append({"role": "user", "content": f"o{n} turn {turn}"})
            raw = client.chat.completions.with_raw_response.create(
                model="mixed",
                messages=history,
                max_tokens=MAX_TOKENS,
                extra_headers={"x-rrcli-session": f"o{n}"},
            )
            answer = raw.parse().choices[0]
            turns[f"o{n}"].append(
                (raw.headers["x-rrcli-deployment"], list(history), answer.finish_reason)
            )
            history.append({"role": "assistant", "content": answer.message.content})
    return turns


def anthropic_chats(url: str) -> dict[str, list]:
    """Each anthropic SDK session's turns (its session in the path): (deployment, stop
    reason, text)."""
    turns: dict[str, list] = defaultdict(list)
    for n in range(SESSIONS):
        client = anthropic.Anthropic(base_url=f"{url}/s/a{n}", api_key="none", max_retries=0)
        history: list[dict[str, Any]] = []
        for turn in range(TURNS):
            history.append({"role": "user", "content": f"a{n} turn {turn}"})
            raw = client.messages.with_raw_response.create(
                model="mixed", system=SYSTEM, max_tokens=MAX_TOKENS, messages=history
            )
            message = raw.parse()
            text = message.content[0].text
            turns[f"a{n}"].append((raw.headers["x-rrcli-deployment"], message.stop_reason, text))
            history.append({"role": "assistant", "content": text})
    return turns


def agent_run(url: str, session: str) -> tuple[str, list[str], int]:
    """A pydantic-ai agent with a weather tool in ``session``: (its output, the cities its
    tool was asked for, the requests it made). The tool is declared not ``strict``
    (pydantic-ai's default where the schema allows it), a guarantee Anthropic's API cannot
    give: rrcli would route a strict tool's call past the Bedrock Claude."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=f"{url}/s/{session}/v1", api_key="none")
    agent = Agent(OpenAIChatModel("mixed", provider=provider))
    asked: list[str] = []

    @agent.tool_plain(strict=False)
    def weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return "sunny"

    result = agent.run_sync(f"{session}: what is the weather in Oslo?")
    requests = [m for m in result.all_messages() if m.kind == "request"]
    return result.output, asked, len(requests)


@pytest.fixture(scope="module")
def pool(tmp_path_factory) -> dict[str, Any]:
    """The pool served and driven once by the three clients: what each saw, serve's traced
    calls, every request the sims received (each with its deployment by wire) and serve's
    exit."""
    pytest.importorskip("pydantic_ai")
    tmp_path = tmp_path_factory.mktemp("mixed")
    cloud = RunningSim(config_from_options(api_keys=[AZ_KEY, GM_KEY, OA_KEY, VX_TOKEN, SECRET]))
    local = RunningSim(config_from_options())
    traces = tmp_path / "serve.traces.jsonl"
    profile = mixed_profile(tmp_path / "mixed.toml", cloud, local)
    try:
        served = Served(profile, tmp_path, "--no-auth", "--traces", traces, env=ENV)
        try:
            seen = {
                "openai": openai_chats(served.url),
                "anthropic": anthropic_chats(served.url),
                "agent": {f"t{n}": agent_run(served.url, f"t{n}") for n in range(SESSIONS)},
            }
        finally:
            code, err = served.stop()
        received = [{**r, "sim": sim} for sim in (cloud, local) for r in sim.received()]
        credentials = {"cloud": cloud.stats()["credentials"], "local": local.stats()["credentials"]}
        for request in received:
            request["deployment"] = wire_of(request, local)
    finally:
        cloud.stop()
        local.stop()
    return {
        **seen,
        "calls": calls(traces),
        "received": received,
        "credentials": credentials,
        "exit": (code, err),
        "written": err + traces.read_text(),
    }


def by_session(pool: dict[str, Any], prefix: str) -> dict[str, list[dict[str, Any]]]:
    """The requests the sims received for each session whose name starts with ``prefix``."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for request in pool["received"]:
        session = first_text(request).split()[0].rstrip(":")
        if session.startswith(prefix):
            out[session].append(request)
    return out


def test_the_openai_sdk_keeps_each_session_on_one_deployment_of_the_pool(pool) -> None:
    """Seven two-turn sessions of the openai SDK, named by ``x-rrcli-session``: every turn
    answered, each session's turns on one deployment (as serve says and as the sims saw),
    every deployment serving one."""
    assert 0 == pool["exit"][0], pool["exit"][1]
    turns = pool["openai"]
    assert all(t[2] == "length" for ts in turns.values() for t in ts)
    said = {s: {t[0] for t in ts} for s, ts in turns.items()}
    got = {s: {r["deployment"] for r in rs} for s, rs in by_session(pool, "o").items()}
    assert said == got
    assert [1] * SESSIONS == [len(d) for d in said.values()]
    assert set(DEPLOYMENTS) == {d for ds in said.values() for d in ds}


def test_the_anthropic_sdk_keeps_each_session_on_one_deployment_of_the_pool(pool) -> None:
    """The same with the anthropic SDK, its session in the path (``/s/a0``...)."""
    turns = pool["anthropic"]
    assert all(t[1] == "max_tokens" and t[2] for ts in turns.values() for t in ts)
    said = {s: {t[0] for t in ts} for s, ts in turns.items()}
    got = {s: {r["deployment"] for r in rs} for s, rs in by_session(pool, "a").items()}
    assert said == got
    assert [1] * SESSIONS == [len(d) for d in said.values()]
    assert set(DEPLOYMENTS) == {d for ds in said.values() for d in ds}


def tool_round_trip(deployment: str, requests: list[dict[str, Any]]) -> tuple[Any, Any]:
    """(the tool declared in the first request, the tool's result sent in the second), read
    in the API the deployment speaks."""
    first, second = (r["body"] for r in requests)
    if deployment == "bedrock":
        declared = first["toolConfig"]["tools"][0]["toolSpec"]["name"]
        use = second["messages"][1]["content"][0]["toolUse"]
        result = second["messages"][2]["content"][0]["toolResult"]
        assert use["toolUseId"] == result["toolUseId"]
        return declared, (use["name"], result["content"])
    if deployment in GEMINI_WIRE:
        declared = first["tools"][0]["functionDeclarations"][0]["name"]
        call = second["contents"][1]["parts"][0]["functionCall"]
        response = second["contents"][2]["parts"][0]["functionResponse"]
        return declared, (call["name"], response["name"], response["response"])
    declared = first["tools"][0]["function"]["name"]
    call = second["messages"][1]["tool_calls"][0]
    result = second["messages"][2]
    assert (result["role"], result["tool_call_id"]) == ("tool", call["id"])
    return declared, (call["function"]["name"], result["content"])


def test_a_pydantic_ai_agent_makes_a_tool_round_trip_on_every_deployment(pool) -> None:
    """A pydantic-ai agent (OpenAIChatModel on serve, its session in the path) in seven
    sessions: each calls its tool once and ends with text, both requests on one deployment,
    every deployment used; each received the tool declared and its result sent back in its
    own API (Converse toolSpec and toolResult, Gemini's functionDeclarations and
    functionResponse on Vertex AI and the Gemini API, OpenAI tools and a tool message)."""
    for output, asked, requests in pool["agent"].values():
        assert isinstance(output, str) and output
        assert (1, 2) == (len(asked), requests)
    sessions = by_session(pool, "t")
    where = {s: {r["deployment"] for r in rs} for s, rs in sessions.items()}
    assert [1] * SESSIONS == [len(d) for d in where.values()]
    assert set(DEPLOYMENTS) == {d for ds in where.values() for d in ds}
    for requests in sessions.values():
        deployment = requests[0]["deployment"]
        declared, sent_back = tool_round_trip(deployment, requests)
        assert "weather" == declared
        expected = {
            "bedrock": ("weather", [{"text": "sunny"}]),
            "vertex": ("weather", "weather", {"result": "sunny"}),
            "gemini": ("weather", "weather", {"result": "sunny"}),
        }.get(deployment, ("weather", "sunny"))
        assert expected == sent_back, deployment


def expected_body(deployment: str, history: list[dict[str, str]]) -> dict[str, Any]:
    """What an openai SDK chat turn of ``history`` capped at MAX_TOKENS must be sent as on
    ``deployment``, in the API it speaks."""
    if deployment in OPENAI_WIRE:
        return {"max_tokens": MAX_TOKENS, "model": MODELS[deployment], "messages": history}
    if deployment == "bedrock":
        messages = [{"role": m["role"], "content": [{"text": m["content"]}]} for m in history]
        return {"messages": messages, "inferenceConfig": {"maxTokens": MAX_TOKENS}}
    roles = {"user": "user", "assistant": "model"}
    contents = [{"role": roles[m["role"]], "parts": [{"text": m["content"]}]} for m in history]
    return {"contents": contents, "generationConfig": {"maxOutputTokens": MAX_TOKENS}}


def test_each_backend_receives_its_own_api_exactly(pool) -> None:
    """Every openai SDK turn reached its deployment as exactly that API's body: Azure's at
    its deployment's path with its api-version and the key in ``api-key``, Bedrock's
    Converse body at the model's path signed with SigV4, Gemini's generateContent at Vertex
    AI's publisher path of the project and region with the token as a bearer, and at the
    Gemini API's with the key in ``x-goog-api-key``, OpenAI and vLLM the chat body as sent. An
    anthropic SDK turn's system text lands where each API keeps it."""
    for session, requests in by_session(pool, "o").items():
        turns = pool["openai"][session]
        assert len(turns) == len(requests)
        for (deployment, history, _), request in zip(turns, requests, strict=True):
            assert expected_body(deployment, history) == request["body"], deployment
    paths = defaultdict(set)
    for request in pool["received"]:
        paths[request["deployment"]].add((request["path"], request["query"]))
    assert {
        "az-east": {("/openai/deployments/gpt4o-east/chat/completions", f"api-version={VERSION}")},
        "az-west": {("/openai/deployments/gpt4o-west/chat/completions", f"api-version={VERSION}")},
        "bedrock": {(f"/model/{CLAUDE}/converse", "")},
        "vertex": {(f"{VERTEX}generateContent", "")},
        "gemini": {(f"/v1beta/models/{GEMINI}:generateContent", "")},
        "openai": {("/v1/chat/completions", "")},
        "vllm": {("/v1/chat/completions", "")},
    } == dict(paths)
    counts = defaultdict(int)
    for request in pool["received"]:
        counts[request["deployment"]] += 1
    assert {
        "api-key:" + key_fingerprint(AZ_KEY): counts["az-east"] + counts["az-west"],
        "aws:" + key_fingerprint(ACCESS_KEY): counts["bedrock"],
        "authorization:" + key_fingerprint(VX_TOKEN): counts["vertex"],
        "x-goog-api-key:" + key_fingerprint(GM_KEY): counts["gemini"],
        "authorization:" + key_fingerprint(OA_KEY): counts["openai"],
    } == pool["credentials"]["cloud"]
    assert {"none": counts["vllm"]} == pool["credentials"]["local"]  # the vllm preset: no key
    system = {}
    for requests in by_session(pool, "a").values():
        body = requests[0]["body"]
        deployment = requests[0]["deployment"]
        if deployment in OPENAI_WIRE:
            system[deployment] = body["messages"][0]
        elif deployment == "bedrock":
            system[deployment] = body["system"]
        else:
            system[deployment] = body["systemInstruction"]
    assert {
        **{d: {"role": "system", "content": SYSTEM} for d in OPENAI_WIRE},
        "bedrock": [{"text": SYSTEM}],
        **{d: {"parts": [{"text": SYSTEM}]} for d in GEMINI_WIRE},
    } == system


def test_every_call_is_on_the_pool_once_and_priced(pool) -> None:
    """serve's trace: one ok call, first attempt, for each request the sims received, on the
    deployment whose wire received it; each priced (cost_usd > 0) at its backend's price:
    genai-prices' for Azure's gpt-4o-mini and Gemini (on Vertex AI and the Gemini API), the
    profile's for Bedrock (genai-prices
    knows its models at AWS's endpoints only), the OpenAI key and vLLM."""
    records = pool["calls"]
    assert len(pool["received"]) == len(records) == SESSIONS * (2 * TURNS + 2)
    assert {("ok", 1)} == {(c["outcome"], c["attempt"]) for c in records}
    traced = defaultdict(int)
    for record in records:
        traced[record["deployment"]] += 1
    received = defaultdict(int)
    for request in pool["received"]:
        received[request["deployment"]] += 1
    assert dict(received) == dict(traced)
    assert set(DEPLOYMENTS) == set(traced)
    providers = {"az-east": "azure", "az-west": "azure", "vertex": "vertex", "gemini": "gemini"}
    for record in records:
        deployment = record["deployment"]
        if deployment in providers:
            price = lookup_price(providers[deployment], "http://127.0.0.1", MODELS[deployment])
            rates = (price.input, price.output)
        else:
            rates = (PRICE["input"], PRICE["output"])
        expected = (record["input_tokens"] * rates[0] + record["output_tokens"] * rates[1]) / 1e6
        assert (record["cost_usd"] or 0) > 0, deployment
        assert expected == pytest.approx(record["cost_usd"]), deployment


def test_no_key_or_token_is_written(pool) -> None:
    """serve's log and trace hold none of the pool's secrets: the Azure, Gemini and OpenAI
    keys, the Vertex token, the AWS secret."""
    for secret in (AZ_KEY, GM_KEY, OA_KEY, VX_TOKEN, SECRET):
        assert secret not in pool["written"]
