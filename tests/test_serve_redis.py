"""Several ``rrcli serve`` processes on one Redis gate: the caps and the budget are the pool's,
not each process's. Two real servers, a real redis-server, backends on 127.0.0.1 that check."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest
from billing import GPT_4O
from conftest import RunningSim
from runkit import read_jsonl, write_profile
from servekit import Served, openai_backends
from test_redis_gate import _server

from rrcli.sim.behaviour import config_from_options

CHAT = {"model": "pool", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.fixture
def redis_server():
    yield from _server()


async def _hammer(urls: list[str], each: int, body: dict) -> list[int]:
    """``each`` requests at once to every server; their statuses."""
    async with httpx2.AsyncClient(timeout=60) as client:
        sent = [client.post(f"{url}/v1/chat/completions", json=body) for url in urls * each]
        return [r.status_code for r in await asyncio.gather(*sent)]


def _two(path, tmp_path):
    first = Served(path, tmp_path, "--no-auth")
    try:
        return first, Served(path, tmp_path, "--no-auth")
    except BaseException:
        first.stop()
        raise


def test_two_servers_share_one_cap(tmp_path, sim_server, redis_server):
    """A backend capped at 3 on a Redis gate, behind two servers each sent 12 requests at once:
    the backend (which refuses a 4th call with 429) never has more than 3 in flight, and every
    request is answered."""
    sim = sim_server(cap=3, latency_ms=100)
    gate = {"kind": "redis", "url": redis_server.url, "lease": 5.0}
    backends = openai_backends(sim.openai_url, max_concurrency=3)
    path = write_profile(tmp_path / "pool.toml", backends, name="pool", gate=gate)
    first, second = _two(path, tmp_path)
    try:
        statuses = asyncio.run(_hammer([first.url, second.url], 12, CHAT))
    finally:
        first.stop()
        second.stop()
    stats = sim.stats()
    assert [200] * 24 == statuses
    assert (3, 0) == (stats["peak_concurrency"], stats["rate_limited"])


def test_two_servers_share_one_budget(tmp_path, billing_server, redis_server):
    """A budget of $0.1 in the profile, two servers on one Redis gate, far more requests than
    it pays for: the provider billed no more than the limit over both, the budget was nearly
    spent, and the requests past it were refused (429 once spent, 400 while what is left is
    less than a request's worst case)."""
    server = billing_server(writes=500, latency_s=0.05)
    entry = {"id": "b0", "base_url": server.openai_url, "model": "gpt-4o", "price": GPT_4O,
             "max_concurrency": 8}  # fmt: skip
    gate = {"kind": "redis", "url": redis_server.url, "lease": 5.0}
    path = write_profile(
        tmp_path / "pool.toml", [entry], name="pool", gate=gate, budget={"max_cost_usd": 0.1}
    )
    first, second = _two(path, tmp_path)
    body = {**CHAT, "max_tokens": 500}
    try:
        statuses = asyncio.run(_hammer([first.url, second.url], 30, body))
    finally:
        first.stop()
        second.stop()
    assert 200 in statuses
    assert set(statuses) <= {200, 400, 429}  # past it: too big for what is left, or spent
    assert 0.07 < server.billed() <= 0.1


def _sent(url: str, session: str | None = None, **body) -> httpx2.Response:
    headers = {} if session is None else {"x-rrcli-session": session}
    with httpx2.Client(timeout=30, headers=headers) as client:
        return client.post(f"{url}/v1/chat/completions", json={**CHAT, **body})


def test_two_servers_keep_a_session_on_one_backend_and_one_budget(
    tmp_path, sim_server, redis_server
):
    """Two servers on one Redis gate, sessions bound, round robin; the second server's round
        robin moved on by a request of no session: a session whose turns alternate between the two
        servers is answered by one backend throughout (the one the first server bound it to), and
        each server's budget counts the other's calls too: one budget, whose spend at the end is
    the sum of every call's cost in both traces."""
    sims = sim_server(), sim_server()
    gate = {"kind": "redis", "url": redis_server.url, "lease": 5.0}
    backends = [{**b, "price": GPT_4O} for b in openai_backends(*(s.openai_url for s in sims))]
    path = write_profile(
        tmp_path / "pool.toml",
        backends,
        name="pool",
        gate=gate,
        binding="session",
        strategy="round_robin",
        budget={"max_cost_usd": 5.0},
    )
    first = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "a.jsonl"))
    try:
        second = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "b.jsonl"))
    except BaseException:
        first.stop()
        raise
    try:
        moved = _sent(second.url, max_tokens=20).headers["x-rrcli-deployment"]
        turns = [
            _sent(url, "s-1", max_tokens=20).headers["x-rrcli-deployment"]
            for url in [first.url, second.url] * 3
        ]
    finally:
        codes = first.stop()[0], second.stop()[0]
    own, spent = [], []
    for name in ("a.jsonl", "b.jsonl"):
        traced = read_jsonl(tmp_path / name)
        own.append(sum(r["cost_usd"] for r in traced if r["event"] == "call"))
        spent += [r["budget"]["spent"] for r in traced if r["event"] == "run_end"]
    assert ((0, 0), "b0", ["b0"] * 6) == (codes, moved, turns)
    # each server's budget counts the other's calls; the last one to stop, every call
    assert [True, True] == [s > mine for s, mine in zip(spent, own, strict=True)]
    assert sum(own) == pytest.approx(max(spent), abs=1e-6)


def test_a_backend_down_for_one_server_is_down_for_the_other(tmp_path, sim_server, redis_server):
    """Two servers on one Redis gate; b0's server refuses the profile's key. A request through
    the first server meets b0's 401 (b0 goes down there; the request is answered by b1): the
    second server sends b0 nothing from its very next request, its trace saying b0 went down.
    Then b0's server is restarted accepting the key: one probe, by one of them, brings b0 back
    for both servers, each of them answering from b0 again."""
    refusing = sim_server(api_keys=("sk-the-servers-key-0123",))
    port = int(refusing.url.rsplit(":", 1)[1])
    good = sim_server(latency_ms=50)
    gate = {"kind": "redis", "url": redis_server.url, "lease": 5.0}
    backends = [
        {"id": "b0", "base_url": refusing.openai_url, "auth": "key",
         "credentials": {"api_key": "sk-another-key-4567"}},
        {"id": "b1", "base_url": good.openai_url},
    ]  # fmt: skip
    path = write_profile(
        tmp_path / "pool.toml", backends, name="pool", gate=gate, health={"recover_after": 2}
    )
    first = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "a.jsonl"))
    try:
        second = Served(path, tmp_path, "--no-auth", "--traces", str(tmp_path / "b.jsonl"))
    except BaseException:
        first.stop()
        raise
    restored = None
    try:
        met = _sent(first.url)
        after = [_sent(second.url).headers["x-rrcli-deployment"] for _ in range(4)]
        refused = refusing.stats()["requests"]
        refusing.stop()
        restored = RunningSim(config_from_options(api_keys=("sk-another-key-4567",)), port=port)
        back = [_back(url, "b0") for url in (first.url, second.url)]
        probes = restored.stats()["requests"]
    finally:
        first.stop()
        second.stop()
        if restored is not None:
            restored.stop()
    traced = read_jsonl(tmp_path / "a.jsonl") + read_jsonl(tmp_path / "b.jsonl")
    answered = [r for r in traced if r["event"] == "call" and r["outcome"] == "ok"]
    probes -= sum(r["deployment"] == "b0" for r in answered)  # the rest of its requests
    seen = [
        [
            (r["deployment"], r["state"])
            for r in read_jsonl(tmp_path / name)
            if r["event"] == "backend"
        ]
        for name in ("a.jsonl", "b.jsonl")
    ]
    assert (200, "b1", ["b1"] * 4, 1) == (met.status_code, met.headers["x-rrcli-deployment"],
                                          after, refused)  # fmt: skip
    assert ([True, True], 1) == (back, probes)  # one probe, by one server, for both
    assert [[("b0", "down"), ("b0", "up")]] * 2 == seen


def _back(url: str, deployment: str) -> bool:
    """Whether requests to ``url`` reach ``deployment`` again within 15 s."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if _sent(url).headers["x-rrcli-deployment"] == deployment:
            return True
        time.sleep(0.1)
    return False
