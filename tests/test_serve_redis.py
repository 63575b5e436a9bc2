"""Several ``rrcli serve`` processes on one Redis gate: the caps and the budget are the pool's,
not each process's. Two real servers, a real redis-server, backends on 127.0.0.1 that check."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from billing import GPT_4O
from runkit import write_profile
from servekit import Served, openai_backends
from test_redis_gate import _server

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
