"""A gateway's budget outlives its process: ``rrcli serve`` keeps its spend in the ledger file
beside its traces, under the profile's budget key, so restarts and processes side by side on one
host never spend past it; a budget with a period spends again once the period is over. A spent
budget is the API's quota error, a request too big for what is left a 400 naming the cap, and a
request whose output nothing bounds a 400 naming max_tokens, never a health event."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import threading
import time

import anthropic
import httpx2
import openai
import pytest
import redis
from runkit import write_profile
from servekit import Served
from test_redis_gate import _server

import rrcli
from rrcli.records.ledger import LEDGER_NAME, period_of


@pytest.fixture
def redis_server():
    yield from _server()


HI = [{"role": "user", "content": "Hi"}]
PRICE = {"input": 1000.0, "output": 1000.0}  # USD a million tokens: $0.001 a token


def _profile(tmp_path, url, **budget):
    backends = [{"id": "b0", "base_url": url, "endpoints": ["chat"], "price": PRICE}]
    return write_profile(tmp_path / "pool.toml", backends, name="pool", budget=budget)


def _spend(url: str, most: int = 80, model: str = "pool") -> list[int]:
    """Chat requests through the OpenAI SDK until the budget is spent (429), each asking
    max_tokens 20 until one is too big for what is left (400), then 1: the statuses."""
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=30)
    statuses, cap = [], 20
    for _ in range(most):
        try:
            client.chat.completions.create(model=model, messages=HI, max_tokens=cap)
        except openai.APIStatusError as exc:
            statuses.append(exc.status_code)
            if exc.status_code != 400:
                break
            cap = 1
            continue
        statuses.append(200)
    return statuses


def _starts(count: int, path, tmp_path, *args: str) -> tuple[list[list[int]], httpx2.Response]:
    """``count`` starts of ``rrcli serve`` one after the other, each sending until refused
    (``_spend``): their statuses, and the last start's answer to one more request."""
    runs = []
    for _ in range(count):
        served = Served(path, tmp_path, "--no-auth", *args)
        try:
            runs.append(_spend(served.url))
            spent = httpx2.post(
                served.url + "/v1/chat/completions",
                json={"model": "pool", "messages": HI, "max_tokens": 1},
                timeout=30,
            )
        finally:
            served.stop()
    return runs, spent


def test_three_serve_restarts_on_one_budget_never_spend_past_it(tmp_path, billing_server):
    """Three starts of ``rrcli serve`` on one profile and trace file, each sending until its
    budget refuses: what the server billed stays within the budget, and the later starts are
    refused at once (429 insufficient_quota, no Retry-After)."""
    server = billing_server(writes=5)
    path = _profile(tmp_path, server.openai_url, max_cost_usd=0.2)
    traces = tmp_path / "traces.jsonl"
    runs, spent = _starts(3, path, tmp_path, "--traces", str(traces))
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


def _ledger(folder) -> tuple[float, list[float]]:
    """What the ledger file in ``folder`` holds: the spend and the reservations in flight."""
    with sqlite3.connect(folder / LEDGER_NAME) as db:
        spent = db.execute("SELECT COALESCE(SUM(spent), 0) FROM budgets").fetchone()[0]
        held = [cost for (cost,) in db.execute("SELECT cost FROM held")]
    return spent, held


def test_a_daily_budget_on_a_redis_gate_is_kept_per_day(tmp_path, billing_server, redis_server):
    """``period = "day"`` on a Redis gate: serve spends until refused with the API's quota
    error and Retry-After the seconds to the next UTC midnight, Redis holding the spend under
    that day's keys; a second gateway started on the same Redis is refused at once."""
    server = billing_server(writes=5)
    backends = [{"id": "b0", "base_url": server.openai_url, "endpoints": ["chat"], "price": PRICE}]
    gate = {"kind": "redis", "url": redis_server.url, "lease": 2.0}
    budget = {"max_cost_usd": 0.05, "period": "day"}
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", gate=gate, budget=budget)
    runs, spent = _starts(2, path, tmp_path)
    day = period_of("day", time.time())[0]
    with redis.Redis(port=redis_server.port) as client:
        shares = client.hvals(f"rrcli:{{budget:pool@{day}}}:shares")
    assert 200 == runs[0][0] and [429] == runs[1]
    assert 429 == spent.status_code
    assert "insufficient_quota" == spent.json()["error"]["type"]
    assert 0 < int(spent.headers["retry-after"]) <= 86400
    assert 0.04 < sum(float(share) for share in shares) <= 0.05
    assert 0.04 < server.billed(PRICE) <= 0.05


def test_a_call_in_flight_when_serve_is_killed_is_charged_once_it_expires(
    tmp_path, sim_server, billing_server
):
    """A gateway killed (SIGKILL) with a call in flight to a slow backend leaves its
    reservation in the ledger file: the next gateway on the same folder and budget key counts
    it as held while it may still be billed, and once its time is past (written into the past
    here) as spent, never given back; spending to the end, both together stay within the
    budget."""
    slow = sim_server(latency_ms=60_000)
    fast = billing_server(writes=5)
    profiles = []
    for name, url in (("slow", slow.openai_url), ("fast", fast.openai_url)):
        backends = [{"id": "b0", "base_url": url, "endpoints": ["chat"], "price": PRICE}]
        budget = {"max_cost_usd": 0.1, "key": "team"}
        profiles.append(
            write_profile(tmp_path / f"{name}.toml", backends, name=name, budget=budget)
        )
    traces = str(tmp_path / "t.jsonl")
    doomed = Served(profiles[0], tmp_path, "--no-auth", "--traces", traces)
    cut: list[Exception] = []

    def send() -> None:
        try:
            httpx2.post(
                doomed.url + "/v1/chat/completions",
                json={"model": "slow", "messages": HI, "max_tokens": 40},
                timeout=120,
            )
        except httpx2.TransportError as exc:  # the gateway died under it
            cut.append(exc)

    sending = threading.Thread(target=send)
    sending.start()
    deadline = time.monotonic() + 30
    while not (tmp_path / LEDGER_NAME).is_file() or not _ledger(tmp_path)[1]:
        assert time.monotonic() < deadline, "the call was never in flight"
        time.sleep(0.05)
    os.kill(doomed.proc.pid, signal.SIGKILL)
    doomed.proc.communicate(timeout=30)
    sending.join(timeout=30)
    [left] = _ledger(tmp_path)[1]
    served = Served(profiles[1], tmp_path, "--no-auth", "--traces", traces)
    try:
        held = _ledger(tmp_path)
        with sqlite3.connect(tmp_path / LEDGER_NAME) as db:
            db.execute("UPDATE held SET expires = 0")  # its owner's time ran out
        statuses = _spend(served.url, model="fast")
    finally:
        served.stop()
    spent, after = _ledger(tmp_path)
    assert 1 == len(cut)
    assert 0.04 < left < 0.05
    assert (0.0, [left]) == held
    assert [] == after
    assert 200 == statuses[0] and 429 == statuses[-1]
    assert fast.billed(PRICE) + left <= 0.1
    assert spent == pytest.approx(fast.billed(PRICE) + left)


def test_serve_and_a_pool_on_one_host_share_one_budget_key(tmp_path, billing_server):
    """``rrcli serve`` and an ``rrcli.Pool`` (in the test's own process), their traces in one
    folder and their profiles naming one budget key, both sending at once until refused:
    together they are billed no more than the budget, and each was served before it was
    refused."""
    server = billing_server(writes=5, latency_s=0.02)
    backends = [{"id": "b0", "base_url": server.openai_url, "endpoints": ["chat"], "price": PRICE}]
    budget = {"max_cost_usd": 0.3, "key": "team"}
    paths = [
        write_profile(tmp_path / f"{name}.toml", backends, name=name, budget=budget)
        for name in ("gateway", "library")
    ]

    ready = threading.Barrier(2, timeout=60)  # both front-ends up before either sends

    def gateway() -> list[int]:
        ready.wait()
        return _spend(served.url, 200, "gateway")

    async def pool() -> list[str]:
        outcomes = []
        async with rrcli.Pool.from_profile(paths[1], traces=tmp_path / "pool.jsonl") as pool:
            ready.wait()
            for cap in [20] * 80 + [1] * 20:
                try:
                    await pool.chat(HI, max_tokens=cap)
                except rrcli.CallError as exc:
                    outcomes.append(exc.type)
                    if exc.type == "budget":
                        break
                    continue
                outcomes.append("ok")
        return outcomes

    served = Served(paths[0], tmp_path, "--no-auth", "--traces", str(tmp_path / "serve.jsonl"))
    results: dict[str, list] = {}
    try:
        threads = [
            threading.Thread(target=lambda: results.update(serve=gateway())),
            threading.Thread(target=lambda: results.update(pool=asyncio.run(pool()))),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        served.stop()
    assert server.billed(PRICE) <= 0.3
    assert 200 in results["serve"] and results["serve"][-1] in (400, 429)
    assert "ok" in results["pool"] and "budget" == results["pool"][-1]
    assert 0.25 < _ledger(tmp_path)[0] <= 0.3
