"""A real OTLP/HTTP trace receiver for tests: POST /v1/traces on a free loopback port.

Each body is decoded with the official protobuf message (``ExportTraceServiceRequest`` from
opentelemetry-proto), so a test sees what a collector would: every span with its ids, times,
kind, status and attributes as plain Python values. ``delay`` makes a slow collector (each POST
sleeps that long before it answers); the standard library's threaded server carries it.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass(frozen=True)
class Span:
    """One received span, its protobuf fields as Python values (times in epoch nanoseconds)."""

    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    start: int
    end: int
    status: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def _value(any_value: Any) -> Any:
    return getattr(any_value, any_value.WhichOneof("value"))


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs}


def decode(body: bytes) -> list[Span]:
    """The spans of one ExportTraceServiceRequest body."""
    request = ExportTraceServiceRequest()
    request.ParseFromString(body)
    spans = []
    for rs in request.resource_spans:
        resource = _attributes(rs.resource.attributes)
        for scope in rs.scope_spans:
            for s in scope.spans:
                spans.append(
                    Span(
                        s.name, s.trace_id.hex(), s.span_id.hex(), s.parent_span_id.hex(),
                        s.kind, s.start_time_unix_nano, s.end_time_unix_nano, s.status.code,
                        _attributes(s.attributes), resource,
                    )
                )  # fmt: skip
    return spans


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        server: Any = self.server
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        if self.headers.get("content-encoding") == "gzip":
            raw = gzip.decompress(raw)
        if server.delay:
            time.sleep(server.delay)
        if self.path != "/v1/traces":
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        with server.lock:
            server.headers.append({k.lower(): v for k, v in self.headers.items()})
            server.spans.extend(decode(raw))
            server.posts += 1
        payload = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


class Receiver:
    """One receiver; ``url`` is its base (``http://127.0.0.1:PORT``), ``spans`` what arrived."""

    def __init__(self, delay: float = 0.0) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        server: Any = self._server
        server.delay, server.lock = delay, threading.Lock()
        server.spans, server.headers, server.posts = [], [], 0
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def spans(self) -> list[Span]:
        return list(self._server.spans)  # type: ignore[attr-defined]

    @property
    def headers(self) -> list[dict[str, str]]:
        return list(self._server.headers)  # type: ignore[attr-defined]

    @property
    def posts(self) -> int:
        return self._server.posts  # type: ignore[attr-defined]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def otlp_receiver() -> Iterator[Callable[..., Receiver]]:
    """A factory of receivers: ``receiver = otlp_receiver()`` (``delay=`` for a slow one)."""
    running: list[Receiver] = []

    def start(delay: float = 0.0) -> Receiver:
        receiver = Receiver(delay)
        running.append(receiver)
        return receiver

    yield start
    for receiver in running:
        receiver.stop()
