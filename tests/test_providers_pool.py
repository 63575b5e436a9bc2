"""A backend client's connection pools (providers/_lean.py's and _pool.py's) against a real
loopback server: more requests than connections wait their turn on the connections there are,
and the pool reuses its connections rather than opening new ones."""

from __future__ import annotations

import asyncio
import threading

import httpx2
import pytest
from hostile import Canned, chat, error

from rrcli.providers._lean import lean_transport
from rrcli.providers._pool import stack_transport

TRANSPORTS = {"lean": lean_transport, "stack": stack_transport}


async def _post_all(
    kind: str, url: str, requests: int, connections: int, waves: int = 1
) -> list[int]:
    """``waves`` rounds of ``requests`` POSTs at once through one client of ``connections``
    connections: every status."""
    limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
    statuses: list[int] = []
    async with httpx2.AsyncClient(transport=TRANSPORTS[kind](limits), timeout=30) as client:
        for _ in range(waves):
            replies = await asyncio.gather(
                *(client.post(url + "/chat/completions", json={}) for _ in range(requests))
            )
            statuses += [r.status_code for r in replies]
    return statuses


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_more_requests_than_connections_wait_for_one(hostile_server, kind):
    """64 requests at once through a client of 8 connections: every one is answered, and the
    server never sees more than 8 connections, nor more than 8 requests at once."""
    server = hostile_server(lambda _: chat(delay=0.02))
    statuses = asyncio.run(_post_all(kind, server.openai_url, 64, 8))
    assert ([200] * 64, 8, 8) == (statuses, server.connections, server.peak)


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_waves_of_requests_reuse_the_connections(hostile_server, kind):
    """Three waves of 6 requests through a client of 8 connections open 6 connections in all:
    the second and third waves travel on the first one's."""
    server = hostile_server(lambda _: chat(delay=0.02))
    statuses = asyncio.run(_post_all(kind, server.openai_url, 6, 8, waves=3))
    assert ([200] * 18, 6) == (statuses, server.connections)


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_requests_cancelled_or_refused_give_their_connections_back(hostile_server, kind):
    """Through a client of 2 connections, 6 rounds of: a 500 whose body is never read, a request
    cancelled while it waits for the answer's head, and one cancelled mid-body. Then 8 requests
    at once are all answered (a connection kept by one of those would leave them waiting past
    the pool timeout)."""
    release = threading.Event()

    def answer(request) -> Canned:
        what = request.path.rsplit("/", 1)[1]
        if what == "head":
            return chat(hold=release)
        if what == "body":
            return Canned(200, {"content-type": "text/plain"}, chunks=[b"a", b"b"], gap=60)
        return error(500) if what == "refused" else chat()

    server = hostile_server(answer)
    limits = httpx2.Limits(max_connections=2, max_keepalive_connections=2)

    async def cancelled(client: httpx2.AsyncClient, what: str) -> None:
        """A request to ``what`` cancelled once the server has it (``body``: once the first
        byte of the answer's body came)."""
        sent, read = len(server.requests) + 1, asyncio.Event()

        async def go() -> None:
            async with client.stream("POST", f"{server.url}/{what}", json={}) as response:
                async for _ in response.aiter_bytes():
                    read.set()
                    await asyncio.sleep(60)

        task = asyncio.ensure_future(go())
        while not task.done() and (
            len(server.requests) < sent or (what == "body" and not read.is_set())
        ):
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def go() -> list[int]:
        async with httpx2.AsyncClient(transport=TRANSPORTS[kind](limits), timeout=5) as client:
            try:
                for _ in range(6):
                    async with client.stream("POST", f"{server.url}/refused", json={}) as refused:
                        assert 500 == refused.status_code
                    await cancelled(client, "head")
                    await cancelled(client, "body")
                replies = await asyncio.gather(
                    *(client.post(f"{server.url}/ok", json={}) for _ in range(8))
                )
            finally:
                release.set()
        return [r.status_code for r in replies]

    assert [200] * 8 == asyncio.run(go())
