"""A canned HTTP server for tests: answers every POST with what the test says, over real sockets.

The standard library's threaded HTTP server on a free loopback port: the test hands it an
``Answer`` (a function of the ``Request`` it received returning status, headers and body bytes),
so a body's every field, a header or a broken stream can be chosen exactly. Each server keeps
the requests it received (``server.requests``) for tests of what rrcli sends.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest


@dataclass(frozen=True)
class Request:
    """One POST the server received: its path, headers (lower-case names) and JSON body."""

    path: str
    headers: dict[str, str]
    body: Any

    @property
    def stream(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("stream"))


#: (status, headers, body) for the request received
Answer = Callable[[Request], tuple[int, dict[str, str], bytes]]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        request = Request(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        self.server.requests.append(request)  # type: ignore[attr-defined]
        status, headers, payload = self.server.answer(request)  # type: ignore[attr-defined]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


class CannedServer:
    """One canned server; ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, answer: Answer) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.answer = answer  # type: ignore[attr-defined]
        self.requests: list[Request] = []
        self._server.requests = self.requests  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def canned_server() -> Iterator[Callable[[Answer], CannedServer]]:
    """A factory of canned servers answering with ``answer``; all stopped after the test."""
    servers: list[CannedServer] = []

    def start(answer: Answer) -> CannedServer:
        server = CannedServer(answer)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def canned(canned_server) -> Callable[[Answer], str]:
    """Start a canned server answering with ``answer``; returns its base URL."""
    return lambda answer: canned_server(answer).url


def json_answer(status: int, body: object, headers: dict[str, str] | None = None) -> Answer:
    """Always ``body`` as JSON with ``status``."""
    payload = orjson.dumps(body)
    return lambda _: (status, {"content-type": "application/json", **(headers or {})}, payload)


def sse_bytes(events: list[tuple[str | None, object]]) -> bytes:
    """A ``text/event-stream`` body of ``(event name or None, data)`` events; data that is not a
    string is written as JSON."""
    lines = []
    for name, data in events:
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        lines.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return "".join(lines).encode()


def sse_answer(events: list[tuple[str | None, object]], headers: dict[str, str]) -> Answer:
    """Always the stream of ``events``."""
    payload = sse_bytes(events)
    return lambda _: (200, {"content-type": "text/event-stream", **headers}, payload)


def plain_or_streamed(body: object, events: list[tuple[str | None, object]]) -> Answer:
    """``body`` as JSON to a plain request, the stream of ``events`` to a streaming one."""
    payload, stream = orjson.dumps(body), sse_bytes(events)

    def answer(request: Request) -> tuple[int, dict[str, str], bytes]:
        if request.stream:
            return 200, {"content-type": "text/event-stream"}, stream
        return 200, {"content-type": "application/json"}, payload

    return answer
