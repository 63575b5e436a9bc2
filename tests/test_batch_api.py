"""rrcli's Batch API client (``rrcli.providers.batch_api``) against ``rrcli sim`` over real
HTTP: submit, state, results, cancel and list, one normalized record whichever API (OpenAI,
Azure OpenAI, Anthropic) answered, through the backend's own provider and key."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import orjson
import pytest

from rrcli.config.profile import Backend, Credentials, RetrySettings
from rrcli.errors import ProviderError
from rrcli.providers import make_provider
from rrcli.providers.batch_api import PAGE, batch_client

KEY = "sk-batch-key-0123456789"


def _client(provider: str, url: str, key: str = KEY, **fields: Any) -> Any:
    backend = Backend(
        id=f"{provider}-1",
        provider=provider,
        base_url=url,
        model="m",
        credentials=Credentials(api_key=key),
        allow_private=True,
        **fields,
    )
    made = make_provider(backend, key, retry=RetrySettings(), seed=None)
    client = batch_client(made)
    assert client is not None
    return client


def _chat(count: int) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"job-{i}", {"model": "m", "messages": [{"role": "user", "content": f"say {i}"}]})
        for i in range(count)
    ]


def _anthropic(count: int) -> list[tuple[str, dict[str, Any]]]:
    return [(custom_id, {**body, "max_tokens": 32}) for custom_id, body in _chat(count)]


def _advance(server: Any, seconds: float) -> None:
    request = urllib.request.Request(
        f"{server.url}/sim/batches/advance?seconds={seconds}", method="POST"
    )
    urllib.request.urlopen(request, timeout=10).close()


async def _lines(client: Any, state: Any) -> dict[str, Any]:
    return {line.custom_id: line async for line in client.results(state)}


@pytest.mark.parametrize(
    ("provider", "path", "fields"),
    [
        ("openai", "/v1", {}),
        ("azure", "", {}),
        ("azure", "", {"deployment": "gpt-batch"}),
        ("anthropic", "", {}),
    ],
    ids=["openai", "azure-v1", "azure-deployment", "anthropic"],
)
def test_a_batch_runs_to_results_on_each_api(sim_server, provider, path, fields):
    """submit → state (ended, counts) → results: one ok line a job with the API's answer,
    a failed line with its status; the batch in this key's list."""
    server = sim_server(batch_failure_rate=0.3, seed=3, api_keys=[KEY])

    async def scenario() -> tuple[Any, Any, dict[str, Any], list[str]]:
        client = _client(provider, server.url + path, **fields)
        lines = _anthropic(20) if provider == "anthropic" else _chat(20)
        made = await client.submit(lines)
        state = await client.state(made.id)
        results = await _lines(client, state)
        listed = [b.id for b in await client.batches()]
        await client.aclose()
        return made, state, results, listed

    made, state, results, listed = asyncio.run(scenario())
    assert ("completed", 20, 20) == (state.status, state.total, state.succeeded + state.errored)
    assert 0 < state.errored < 20
    assert {f"job-{i}" for i in range(20)} == set(results)
    ok = [r for r in results.values() if r.ok]
    assert state.succeeded == len(ok)
    assert all(r.body["usage"] for r in ok)
    assert {500} == {r.status for r in results.values() if not r.ok}
    assert all(r.transient for r in results.values() if not r.ok)
    assert [made.id] == listed


def test_the_state_follows_the_timeline_and_cancel_ends_it(sim_server):
    """While it runs a batch's state says in_progress with lines pending; a cancel ends it
    and its lines not done come back ``cancelled``, each once."""
    server = sim_server(batch_delay_ms=100_000)

    async def scenario() -> list[Any]:
        out = []
        for provider, path in (("openai", "/v1"), ("anthropic", "")):
            client = _client(provider, server.url + path)
            lines = _anthropic(10) if provider == "anthropic" else _chat(10)
            made = await client.submit(lines)
            _advance(server, 50)
            running = await client.state(made.id)
            await client.cancel(made.id)
            ended = await client.state(made.id)
            results = await _lines(client, ended)
            kinds = sorted("ok" if r.ok else r.error for r in results.values())
            out.append((running.status, running.pending, ended.status, ended.cancelled, kinds))
            await client.aclose()
        return out

    expected = ("in_progress", 5, "cancelled", 5, ["cancelled"] * 5 + ["ok"] * 5)
    assert [expected, expected] == asyncio.run(scenario())


def test_expired_lines_come_back_expired(sim_server):
    """Lines not done within the window: the batch is expired, those lines ``expired``."""
    server = sim_server(batch_delay_ms=100_000, batch_window_ms=50_000)

    async def scenario() -> list[tuple[str, int, int]]:
        out = []
        for provider, path in (("openai", "/v1"), ("anthropic", "")):
            client = _client(provider, server.url + path)
            lines = _anthropic(10) if provider == "anthropic" else _chat(10)
            made = await client.submit(lines)
            _advance(server, 60)
            state = await client.state(made.id)
            results = await _lines(client, state)
            expired = sum(1 for r in results.values() if r.error == "expired")
            out.append((state.status, state.expired, expired))
            await client.aclose()
        return out

    assert [("expired", 5, 5), ("expired", 5, 5)] == asyncio.run(scenario())


def test_the_enqueued_limit_is_told_apart(sim_server):
    """OpenAI: a batch past the key's enqueued tokens fails, ``limit_refused``; Anthropic's
    create is a ProviderError with status 429. The key never appears in either."""
    server = sim_server(batch_delay_ms=100_000, batch_enqueued_tokens=50)

    async def scenario() -> tuple[Any, ProviderError]:
        openai = _client("openai", server.url + "/v1")
        await openai.submit(_chat(8))
        second = await openai.submit(_chat(8))
        refused = await openai.state(second.id)
        claude = _client("anthropic", server.url)
        await claude.submit(_anthropic(8))
        try:
            await claude.submit(_anthropic(8))
        except ProviderError as exc:
            error = exc
        await openai.aclose()
        await claude.aclose()
        return refused, error

    refused, error = asyncio.run(scenario())
    assert (True, "failed") == (refused.limit_refused, refused.status)
    assert 429 == error.status_code
    assert KEY not in str(error)


def test_a_part_past_the_api_limits_is_refused_before_sending(sim_server):
    """More lines than one batch may hold: ValueError naming the limit, nothing sent."""
    server = sim_server()

    async def scenario() -> str:
        client = _client("openai", server.url + "/v1")
        try:
            await client.submit(_chat(1) * (client.limits.requests + 1))
        except ValueError as exc:
            return str(exc)
        finally:
            await client.aclose()
        return ""

    assert "50,000 requests" in asyncio.run(scenario())
    assert 0 == server.stats()["requests"]


def test_a_backend_without_a_batch_api_has_no_client():
    """Only OpenAI, Azure and Anthropic backends get a client."""
    backend = Backend(id="s", provider="sim")
    assert batch_client(make_provider(backend, None, retry=RetrySettings(), seed=0)) is None


def test_the_list_reads_every_page(sim_server):
    """More batches than one page holds: ``batches()`` reads them all, newest first, each
    once; ``batches(limit)`` the newest ``limit``."""
    server = sim_server()

    async def scenario() -> list[tuple[int, int, bool]]:
        out = []
        for provider, path in (("openai", "/v1"), ("anthropic", "")):
            client = _client(provider, server.url + path)
            lines = _anthropic(1) if provider == "anthropic" else _chat(1)
            made = [(await client.submit(lines)).id for _ in range(PAGE + 3)]
            every = [b.id for b in await client.batches()]
            newest = [b.id for b in await client.batches(limit=3)]
            out.append((len(every), len(set(every)), every == made[::-1] and newest == every[:3]))
            await client.aclose()
        return out

    assert [(PAGE + 3, PAGE + 3, True)] * 2 == asyncio.run(scenario())


def test_a_credential_the_server_echoes_is_masked(canned):
    """A server that echoes a credential header's value (not the key) in its error and its
    answer: neither the ProviderError nor the state shows it."""
    token = "tok-secret-0123456789abcdef"

    def answer(request: Any) -> tuple[int, dict[str, str], bytes]:
        said = request.headers.get("x-auth-token", "")
        if request.body.get("requests", [{}])[0].get("custom_id") == "bad":
            body = {"type": "error", "error": {"type": "invalid_request_error", "message": said}}
            return 400, {"content-type": "application/json"}, orjson.dumps(body)
        batch = {"id": f"msgbatch_{said}", "processing_status": "in_progress"}
        return 200, {"content-type": "application/json"}, orjson.dumps(batch)

    url = canned(answer)
    client = _client("anthropic", url, headers={"x-auth-token": token})

    async def scenario() -> tuple[str, str]:
        made = await client.submit([("ok", {"model": "m"})])
        try:
            await client.submit([("bad", {"model": "m"})])
        except ProviderError as exc:
            error = str(exc)
        await client.aclose()
        return made.id, error

    made, error = asyncio.run(scenario())
    assert token not in made
    assert token not in error
    assert "invalid_request_error" in error or "HTTP 400" in error
