"""A gateway's budget outlives its process: ``rrcli serve`` keeps its spend in the ledger file
beside its traces, under the profile's budget key, so restarts and processes side by side on one
host never spend past it; a budget with a period spends again once the period is over. A spent
budget is the API's quota error, a request too big for what is left a 400 naming the cap, and a
request whose output nothing bounds a 400 naming max_tokens, never a health event."""

from __future__ import annotations

import sqlite3
import threading

import anthropic
import httpx2
import openai
import pytest
from runkit import write_profile
from servekit import Served

from rrcli.records.ledger import LEDGER_NAME

HI = [{"role": "user", "content": "Hi"}]
PRICE = {"input": 1000.0, "output": 1000.0}  # USD a million tokens: $0.001 a token


def _profile(tmp_path, url, **budget):
    backends = [{"id": "b0", "base_url": url, "endpoints": ["chat"], "price": PRICE}]
    return write_profile(tmp_path / "pool.toml", backends, name="pool", budget=budget)


def _spend(url: str, most: int = 80) -> list[int]:
    """Chat requests through the OpenAI SDK until the budget is spent (429), each asking
    max_tokens 20 until one is too big for what is left (400), then 1: the statuses."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    statuses, cap = [], 20
    for _ in range(most):
        try:
            client.chat.completions.create(model="pool", messages=HI, max_tokens=cap)
        except openai.APIStatusError as exc:
            statuses.append(exc.status_code)
            if exc.status_code != 400:
                break
            cap = 1
            continue
        statuses.append(200)
    return statuses


def test_three_serve_restarts_on_one_budget_never_spend_past_it(tmp_path, billing_server):
    """Three starts of ``rrcli serve`` on one profile and trace file, each sending until its
    budget refuses: what the server billed stays within the budget, and the later starts are
    refused at once (429 insufficient_quota, no Retry-After)."""
    server = billing_server(writes=5)
    path = _profile(tmp_path, server.openai_url, max_cost_usd=0.2)
    traces = tmp_path / "traces.jsonl"
    runs = []
    for _ in range(3):
        served = Served(path, tmp_path, "--no-auth", "--traces", str(traces))
        try:
            runs.append(_spend(served.url))
            spent = httpx2.post(
                served.url + "/v1/chat/completions",
                json={"model": "pool", "messages": HI, "max_tokens": 1},
                timeout=30,
            )
        finally:
            served.stop()
    billed = server.billed(PRICE)
    assert 0.19 < billed <= 0.2
    assert [[429], [429]] == runs[1:]
    assert 429 == runs[0][-1]
    assert 429 == spent.status_code
    assert None is spent.headers.get("retry-after")
    error = spent.json()["error"]
    assert ("insufficient_quota", "insufficient_quota") == (error["type"], error["code"])
    assert (tmp_path / LEDGER_NAME).is_file()


def test_a_daily_budget_refuses_then_serves_once_its_day_is_over(tmp_path, billing_server):
    """``period = "day"``: a spent budget answers 429 with Retry-After the seconds to the next
    UTC midnight (Anthropic's billing_error to an Anthropic client); once the ledger's day is
    over (its day written into the past) the same gateway serves again."""
    server = billing_server(writes=5)
    path = _profile(tmp_path, server.openai_url, max_cost_usd=0.05, period="day")
    served = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "t.jsonl"))
    try:
        first = _spend(served.url)
        spent = httpx2.post(
            served.url + "/v1/chat/completions",
            json={"model": "pool", "messages": HI, "max_tokens": 1},
            timeout=30,
        )
        claude = anthropic.Anthropic(base_url=served.url, api_key="none", max_retries=0)
        with pytest.raises(anthropic.RateLimitError) as refused:
            claude.messages.create(model="pool", messages=HI, max_tokens=1)
        with sqlite3.connect(tmp_path / LEDGER_NAME) as db:
            db.execute("UPDATE budgets SET period = '2000-01-01' WHERE key = 'pool'")
        again = _spend(served.url, most=1)
    finally:
        served.stop()
    assert 200 == first[0] and 429 == first[-1]
    assert 429 == spent.status_code
    assert 0 < int(spent.headers["retry-after"]) <= 86400
    assert "billing_error" == refused.value.body["error"]["type"]
    assert [200] == again


def test_a_request_too_big_for_what_is_left_is_a_400_naming_its_cap(tmp_path, billing_server):
    """A request whose worst case alone passes what is left of the budget (though its input
    fits) is a 400 naming max_tokens and the largest that fits; a smaller one is served."""
    server = billing_server(writes=300)
    path = _profile(tmp_path, server.openai_url, max_cost_usd=0.5)
    served = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "t.jsonl"))
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
    try:
        client.chat.completions.create(model="pool", messages=HI, max_tokens=300)  # $0.30
        with pytest.raises(openai.BadRequestError) as big:
            client.chat.completions.create(model="pool", messages=HI, max_tokens=400)
        small = client.chat.completions.create(model="pool", messages=HI, max_tokens=20)
        ready = httpx2.get(served.url + "/ready", timeout=10)
    finally:
        served.stop()
    message = big.value.body["message"]
    assert "left of the budget" in message
    assert "lower its max_tokens to" in message
    assert small.choices[0].message.content
    assert 200 == ready.status_code


def test_no_cap_where_none_is_known_is_a_400_naming_max_tokens(tmp_path, sim_server):
    """A request without max_tokens over a model whose most output rrcli does not know is a
    400 naming max_tokens; the backend stays up (/ready 200) and a request with a cap is
    served."""
    sim = sim_server(output_tokens=5)
    path = _profile(tmp_path, sim.openai_url, max_cost_usd=1.0)
    served = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "t.jsonl"))
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="none", max_retries=0)
    try:
        with pytest.raises(openai.BadRequestError) as uncapped:
            client.chat.completions.create(model="pool", messages=HI)
        ready = httpx2.get(served.url + "/ready", timeout=10)
        capped = client.chat.completions.create(model="pool", messages=HI, max_tokens=5)
    finally:
        served.stop()
    assert uncapped.value.body["message"].startswith("max_tokens is required")
    assert 200 == ready.status_code
    assert capped.choices[0].message.content


def test_two_gateways_on_one_host_share_one_budget_key(tmp_path, billing_server):
    """Two ``rrcli serve`` processes whose traces share a folder and whose profiles name one
    budget key, each sent requests at once until refused: together they never bill past it."""
    server = billing_server(writes=5, latency_s=0.02)
    gateways = []
    for name in ("a", "b"):
        backends = [
            {"id": "b0", "base_url": server.openai_url, "endpoints": ["chat"], "price": PRICE}
        ]
        folder = tmp_path / name
        folder.mkdir()
        path = write_profile(
            folder / "pool.toml", backends, name="pool", budget={"max_cost_usd": 0.2, "key": "team"}
        )
        traces = tmp_path / f"{name}.jsonl"
        gateways.append(Served(path, folder, "--no-auth", "--traces", str(traces)))
    results: list[list[int]] = []
    try:
        threads = [
            threading.Thread(target=lambda u=g.url: results.append(_spend(u))) for g in gateways
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for gateway in gateways:
            gateway.stop()
    assert server.billed(PRICE) <= 0.2
    assert all(statuses[-1] in (400, 429) for statuses in results)
    assert sum(s == 200 for statuses in results for s in statuses) > 10


def test_a_pool_keeps_its_spend_in_the_ledger_beside_its_traces(tmp_path, billing_server):
    """``rrcli.Pool`` with a trace file spends until its budget refuses (CallError ``budget``,
    the gateway's words, ``retry_after`` the seconds to the period's end); a pool opened again
    on the same traces is refused at its first call, and nothing was billed past the limit."""
    import asyncio

    import rrcli

    server = billing_server(writes=5)
    path = _profile(tmp_path, server.openai_url, max_cost_usd=0.05, period="month")
    traces = tmp_path / "pool.jsonl"

    async def spend() -> list[rrcli.CallError]:
        errors = []
        async with rrcli.Pool.from_profile(path, traces=traces) as pool:
            for cap in [20] * 40 + [1] * 10:
                try:
                    await pool.chat(HI, max_tokens=cap)
                except rrcli.CallError as exc:
                    errors.append(exc)
                    if exc.type == "budget":
                        break
        return errors

    first = asyncio.run(spend())
    again = asyncio.run(spend())
    assert "budget" == first[-1].type
    assert first[-1].message.startswith("the budget of $0.05 is spent")
    assert 0 < first[-1].retry_after <= 31 * 86400
    assert ["budget"] == [error.type for error in again]
    assert server.billed(PRICE) <= 0.05
