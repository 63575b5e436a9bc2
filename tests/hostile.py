"""A server that misbehaves on purpose, for attacks through the CLI (docs/reliability.md).

An asyncio server on a free loopback port, in a background thread, that reads each HTTP/1.1
request itself (request line, headers, a Content-Length body) and answers with what the test's
``answer(request)`` returns: a ``Canned`` status, headers and body, held ``delay`` seconds before
it is written. Nothing is normalised on the way: a header is sent as the test wrote it, so a
server can say ``Retry-After: inf`` or claim ``prompt_tokens`` of 10^12. The server counts what it
saw: every request, the calls in flight at once, and when each call started and ended.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest


@dataclass(frozen=True, slots=True)
class Request:
    """One request as received: its path, headers (lower-case names) and raw body; ``lines``:
    each header as sent, name as written (a header sent twice is there twice)."""

    path: str
    headers: dict[str, str]
    body: bytes
    lines: tuple[tuple[str, str], ...] = ()

    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass(frozen=True, slots=True)
class Canned:
    """An answer: ``delay`` seconds of silence (and, with ``hold``, until the test sets it), then
    the status line (its reason phrase ``reason``), headers and body. With ``chunks`` the body is
    those pieces instead, sent chunked, ``gap`` seconds apart (an endless iterator makes an
    endless body)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay: float = 0.0
    hold: threading.Event | None = None
    chunks: Iterable[bytes] | None = None
    gap: float = 0.0
    reason: str = "Hostile"


Answer = Callable[[Request], Canned]


def chat(usage: dict[str, Any] | None = None, **kw: Any) -> Canned:
    """An OpenAI chat completion saying "ok", with ``usage`` when given."""
    body: dict[str, Any] = {
        "id": "chatcmpl-hostile",
        "model": "m",
        "choices": [{"index": 0, "message": {"content": "ok"}, "finish_reason": "stop"}],
    }
    if usage is not None:
        body["usage"] = usage
    return Canned(200, {"content-type": "application/json"}, orjson.dumps(body), **kw)


def error(status: int, headers: dict[str, str] | None = None, **kw: Any) -> Canned:
    """An OpenAI-shaped error answer with ``status`` and extra ``headers``."""
    body = orjson.dumps({"error": {"message": f"status {status}", "type": "hostile"}})
    return Canned(status, {"content-type": "application/json", **(headers or {})}, body, **kw)


class HostileServer:
    """One server; ``url`` is ``http://127.0.0.1:PORT``, ``openai_url`` adds ``/v1``.

    ``requests``: every request received, in order. ``spans``: (start, end) monotonic seconds
    of each answered request. ``peak``: the most requests in flight at once. ``connections``: how
    many connections clients opened. ``idle_close``: seconds a connection may idle after an
    answer before the server closes it (None: never)."""

    def __init__(self, answer: Answer, idle_close: float | None = None) -> None:
        self.answer = answer
        self.idle_close = idle_close
        self.requests: list[Request] = []
        self.spans: list[tuple[float, float]] = []
        self.peak = 0
        self.connections = 0
        self._in_flight = 0
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), daemon=True)
        self._thread.start()
        if not started.wait(10.0):
            raise RuntimeError("the hostile server did not start")
        self.url = f"http://127.0.0.1:{self._port}"
        self.openai_url = self.url + "/v1"

    def _serve(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._connection, "127.0.0.1", 0)
        )
        self._port = server.sockets[0].getsockname()[1]
        started.set()
        self._loop.run_forever()
        server.close()
        # connections still answering (an endless body) end here, not in a finalizer after the
        # loop is gone
        tasks = asyncio.all_tasks(self._loop)
        for task in tasks:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self._loop.run_until_complete(server.wait_closed())
        self._loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        wait = None  # the first request may take its time; then ``idle_close`` applies
        try:
            while (request := await _read_request(reader, wait)) is not None:
                await self._respond(request, writer)
                wait = self.idle_close
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()

    async def _respond(self, request: Request, writer: asyncio.StreamWriter) -> None:
        self.requests.append(request)
        start = time.monotonic()
        self._in_flight += 1
        self.peak = max(self.peak, self._in_flight)
        try:
            canned = self.answer(request)
            if canned.delay:
                await asyncio.sleep(canned.delay)
            while canned.hold is not None and not canned.hold.is_set():
                await asyncio.sleep(0.01)
        finally:
            self._in_flight -= 1
        self.spans.append((start, time.monotonic()))
        head = [f"HTTP/1.1 {canned.status} {canned.reason}"]
        head += [f"{name}: {value}" for name, value in canned.headers.items()]
        if canned.chunks is None:
            head.append(f"content-length: {len(canned.body)}")
        else:
            head.append("transfer-encoding: chunked")
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + canned.body)
        await writer.drain()
        if canned.chunks is not None:
            await _write_chunks(writer, canned.chunks, canned.gap)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10.0)


async def _write_chunks(writer: asyncio.StreamWriter, chunks: Iterable[bytes], gap: float) -> None:
    """A chunked body of ``chunks``, ``gap`` seconds apart, then its end."""
    for chunk in chunks:
        writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        await writer.drain()
        if gap:
            await asyncio.sleep(gap)
    writer.write(b"0\r\n\r\n")
    await writer.drain()


async def _read_request(reader: asyncio.StreamReader, wait: float | None) -> Request | None:
    """The next request on a connection, None when the client closed it; TimeoutError when its
    first line does not come within ``wait`` seconds."""
    line = await asyncio.wait_for(reader.readline(), wait)
    if not line:
        return None
    path = line.split(b" ")[1].decode("latin-1")
    headers: dict[str, str] = {}
    lines = []
    while (raw := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
        lines.append((name.strip(), value.strip()))
    body = await reader.readexactly(int(headers.get("content-length") or 0))
    return Request(path, headers, body, tuple(lines))


@pytest.fixture
def hostile_server() -> Iterator[Callable[[Answer], HostileServer]]:
    """A factory of hostile servers answering with ``answer``; all stopped after the test."""
    servers: list[HostileServer] = []

    def start(answer: Answer, idle_close: float | None = None) -> HostileServer:
        server = HostileServer(answer, idle_close)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
