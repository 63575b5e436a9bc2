"""Azure OpenAI deployments behind ``rrcli serve`` and ``rrcli.Pool``: the official openai SDK in
front of the gateway, two deployments on the Azure sim behind it (one at its deployment's path
with a key, one on the v1 API with an Entra ID token a command prints), sessions kept on their
deployment, and a content filter's refusal reaching the client as Azure's 400 in the client's
API shape, naming the category."""

from __future__ import annotations

import asyncio
import sys
from collections import defaultdict
from pathlib import Path

import openai
import pytest
from runkit import write_profile
from servekit import Served

import rrcli
from rrcli.errors import CallError

KEY = "azk-5f0e1d2c3b4a69788796a5b4c3d2e1f0"
TOKEN = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9-entra-serve-0123456789"
VERSION = "2024-10-21"
SESSIONS, TURNS = 6, 3


def azure_profile(tmp_path: Path, server, *, strict: bool = True) -> Path:
    """Two deployments of gpt-4o-mini (``east`` by key at its path, ``v1`` by token on the v1
    API); with ``strict`` a third, of model ``gpt-4o-strict``, whose content filter refuses
    every prompt (a deployment's filter policy is its own)."""
    script = tmp_path / "print_entra_token.py"
    script.write_text(f"import json\nprint(json.dumps({{'accessToken': {TOKEN!r}}}))\n")
    azure = {"provider": "azure", "model": "gpt-4o-mini", "api_version": VERSION}
    backends = [
        {
            **azure,
            "id": "east",
            "base_url": server.url,
            "deployment": "gpt4o-east",
            "credentials": {"api_key_env": "AZ_KEY"},
        },
        {
            **azure,
            "id": "v1",
            "base_url": f"{server.url}/openai/v1",
            "api_version": None,
            "credentials": {"token_command": f"{sys.executable} {script}"},
        },
    ]
    if strict:
        backends.append(
            {
                **azure,
                "id": "strict",
                "model": "gpt-4o-strict",
                "base_url": server.url,
                "deployment": "gpt4o-strict",
                "credentials": {"api_key_env": "AZ_KEY"},
                "headers": {"x-sim-mode": "content-filter"},
            }
        )
    for backend in backends:
        if backend.get("api_version") is None:
            backend.pop("api_version", None)
    return write_profile(tmp_path / "azure.toml", backends, name="azure", binding="session")


def conversation(client: openai.OpenAI, session: str) -> list[str]:
    """``TURNS`` turns of one session, each with the history so far: who answered each."""
    history: list[dict] = []
    served_by = []
    for turn in range(TURNS):
        history.append({"role": "user", "content": f"{session} turn {turn}"})
        raw = client.chat.completions.with_raw_response.create(
            model="gpt-4o-mini", messages=history, extra_headers={"x-session-id": session}
        )
        served_by.append(raw.headers["x-rrcli-deployment"])
        history.append({"role": "assistant", "content": raw.parse().choices[0].message.content})
    return served_by


def test_the_openai_sdk_through_serve_over_two_azure_deployments(tmp_path, sim_server) -> None:
    """The openai SDK asks ``serve`` for gpt-4o-mini in six sessions of three turns: every turn
    of a session answered by one deployment, both deployments used, each reached at its own
    address (the deployment's path with its api-version and ``api-key``; the v1 path with none
    and the command's token as bearer). A prompt sent to the strict deployment's model is a 400
    ``BadRequestError`` in OpenAI's shape whose message names the category, tried once; no
    key or token reaches the client."""
    server = sim_server(api_keys=[KEY, TOKEN], model="gpt-4o-mini")
    profile = azure_profile(tmp_path, server)
    served = Served(profile, tmp_path, "--no-auth", env={"AZ_KEY": KEY})
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
    try:
        served_by = {f"s{n}": conversation(client, f"s{n}") for n in range(SESSIONS)}
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.with_raw_response.create(
                model="gpt-4o-strict", messages=[{"role": "user", "content": "refuse me"}]
            )
    finally:
        code, err = served.stop()
    assert 0 == code, err
    assert [1] * SESSIONS == [len(set(d)) for d in served_by.values()]
    assert {"east", "v1"} == {d for ds in served_by.values() for d in ds}
    seen = defaultdict(int)
    for request in server.received():
        seen[(request["path"], request["query"])] += 1
    assert {
        ("/openai/deployments/gpt4o-east/chat/completions", f"api-version={VERSION}"),
        ("/openai/v1/chat/completions", ""),
        ("/openai/deployments/gpt4o-strict/chat/completions", f"api-version={VERSION}"),
    } == set(seen)
    assert (
        1 == seen[("/openai/deployments/gpt4o-strict/chat/completions", f"api-version={VERSION}")]
    )
    assert SESSIONS * TURNS + 1 == sum(seen.values())
    error = refused.value
    assert (400, "content_filter", "invalid_request_error") == (
        error.status_code,
        error.code,
        error.type,
    )
    assert "content filter refused the prompt: category hate (high)" in error.message
    assert ("strict", "1") == (
        error.response.headers["x-rrcli-deployment"],
        error.response.headers["x-rrcli-attempts"],
    )
    said = error.response.text + str(dict(error.response.headers))
    assert [] == [s for s in (KEY, TOKEN, KEY[:12], TOKEN[:12]) if s in said]


def test_rrcli_pool_keeps_sessions_on_azure_deployments_and_raises_a_filtered_prompt(
    tmp_path, sim_server
) -> None:
    """``rrcli.Pool`` over the same two deployments: each session's turns on one deployment,
    both used; over the strict deployment a refused prompt raises ``CallError`` of type
    ``content_filter``, status 400, naming the category, after one attempt."""
    server = sim_server(api_keys=[KEY, TOKEN], model="gpt-4o-mini")
    both = azure_profile(tmp_path, server, strict=False)
    environ = {"AZ_KEY": KEY}

    async def sessions() -> dict[str, set[str]]:
        served_by: dict[str, set[str]] = defaultdict(set)
        async with rrcli.Pool.from_profile(both, environ=environ) as pool:
            for n in range(SESSIONS):
                history = []
                for turn in range(TURNS):
                    history.append({"role": "user", "content": f"s{n} turn {turn}"})
                    record = await pool.chat(history, session=f"s{n}")
                    served_by[f"s{n}"].add(record["deployment"])
                    history.append({"role": "assistant", "content": record["output"]})
        return served_by

    served_by = asyncio.run(sessions())
    assert [1] * SESSIONS == [len(d) for d in served_by.values()]
    assert {"east", "v1"} == set().union(*served_by.values())

    strict = write_profile(
        tmp_path / "strict.toml",
        [
            {
                "id": "strict",
                "provider": "azure",
                "model": "gpt-4o-mini",
                "base_url": server.url,
                "deployment": "gpt4o-strict",
                "credentials": {"api_key_env": "AZ_KEY"},
                "headers": {"x-sim-mode": "content-filter"},
            }
        ],
    )

    async def refused() -> CallError:
        async with rrcli.Pool.from_profile(strict, environ=environ) as pool:
            with pytest.raises(CallError) as caught:
                await pool.chat([{"role": "user", "content": "refuse me"}])
            return caught.value

    error = asyncio.run(refused())
    assert ("content_filter", 400, 1) == (
        error.type,
        error.status_code,
        error.result["attempts"],
    )
    assert "category hate" in error.result["error"]["message"]
