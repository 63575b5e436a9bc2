"""A backend client's connection pools (providers/_lean.py's and _pool.py's) against a real
loopback server: more requests than connections wait their turn on the connections there are,
and the pool reuses its connections rather than opening new ones."""

from __future__ import annotations

import asyncio

import httpx2
import pytest
from hostile import chat

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
