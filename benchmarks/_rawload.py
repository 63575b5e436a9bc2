"""A lean load generator for bench_serve.py: raw asyncio streams, one keep-alive HTTP/1.1
connection a worker and an upstream, the request's bytes made once, each answer read by its
Content-Length. It spends a small fraction of an httpx2 client's CPU a request, so on a machine
whose cores the generator shares with the servers it measures, more of them is left to what is
measured (direct, the forwarder, serve), and the same for each.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import orjson

__all__ = ["raw_load"]


def _request(url: str, body: dict[str, object]) -> tuple[str, int, bytes]:
    """(host, port, the bytes of a POST of ``body`` to ``url``/chat/completions)."""
    parts = urlsplit(url + "/chat/completions")
    content = orjson.dumps(body)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(content)}\r\n\r\n"
    )
    return parts.hostname or "127.0.0.1", parts.port or 80, head.encode() + content


async def _exchange(
    streams: tuple[asyncio.StreamReader, asyncio.StreamWriter], request: bytes
) -> None:
    """One request on a kept connection; its answer read whole (AssertionError unless 200)."""
    reader, writer = streams
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = head[9:12]
    length = None
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
            break
    assert length is not None, head
    content = await reader.readexactly(length)
    assert status == b"200", content[:200]


async def raw_load(
    urls: list[str], body: dict[str, object], requests: int, in_flight: int
) -> tuple[float, list[float]]:
    """(requests per second, each request's seconds) for ``requests`` POSTs of ``body`` spread
    over ``urls`` as bench_serve's httpx2 generator spreads them, ``in_flight`` at a time."""
    targets = [_request(url, body) for url in urls]
    latencies: list[float] = []
    left = iter(range(requests))
    opened: list[asyncio.StreamWriter] = []

    async def worker() -> None:
        connections: dict[int, tuple[asyncio.StreamReader, asyncio.StreamWriter]] = {}
        for n in left:
            i = n % len(targets)
            host, port, request = targets[i]
            started = time.perf_counter()
            if i not in connections:
                connections[i] = await asyncio.open_connection(host, port)
                opened.append(connections[i][1])
            await _exchange(connections[i], request)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed = time.perf_counter() - started
    finally:
        for writer in opened:
            writer.close()
    return requests / elapsed, latencies
