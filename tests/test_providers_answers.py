"""What the providers keep of a server's answer: its request id.

A canned server (the standard library's threaded HTTP server on a free loopback port) answers
every POST with what the test says, so the body's id and the request-id header can each be
chosen; the providers talk to it over real sockets.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
import pytest

from rrcli.config.profile import Backend, RetrySettings
from rrcli.providers import make_provider
from rrcli.providers.base import Call, Reply

KEY = "sk-canned-secret-0123456789"
MESSAGES = [{"role": "user", "content": "hi"}]
#: (status, headers, body) for the request headers the server received
Answer = Callable[[dict[str, str]], tuple[int, dict[str, str], bytes]]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        received = {k.lower(): v for k, v in self.headers.items()}
        status, headers, body = self.server.answer(received)  # type: ignore[attr-defined]
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def canned() -> Iterator[Callable[[Answer], str]]:
    """Start a canned server answering with ``answer``; returns its base URL."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: Answer) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.answer = answer  # type: ignore[attr-defined]
        servers.append(server)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def json_answer(status: int, body: object, headers: dict[str, str] | None = None) -> Answer:
    payload = orjson.dumps(body)
    return lambda _: (status, {"content-type": "application/json", **(headers or {})}, payload)


def sse_answer(events: list[tuple[str | None, object]], headers: dict[str, str]) -> Answer:
    lines = []
    for name, data in events:
        text = data if isinstance(data, str) else orjson.dumps(data).decode()
        lines.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    payload = "".join(lines).encode()
    return lambda _: (200, {"content-type": "text/event-stream", **headers}, payload)


def send(provider: str, url: str, call: Call, key: str | None = KEY) -> Reply:
    backend = Backend(id="b", provider=provider, base_url=url, model="m")

    async def go() -> Reply:
        adapter = make_provider(backend, key, retry=RetrySettings(), seed=None)
        try:
            return await adapter.send(call)
        finally:
            await adapter.aclose()

    return asyncio.run(go())


OPENAI_BODY = {
    "model": "m",
    "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1},
}
ANTHROPIC_BODY = {
    "type": "message",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
PLAIN = {
    "openai": ("/v1", OPENAI_BODY, "x-request-id"),
    "anthropic": ("", ANTHROPIC_BODY, "request-id"),
}


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_bodys_id_is_the_request_id_before_the_header(canned, provider: str) -> None:
    """A plain answer's request id is the body's ``id``; a body without one gives the
    provider's request-id header (``x-request-id`` for OpenAI, ``request-id`` for Anthropic)."""
    suffix, body, header = PLAIN[provider]
    with_id = canned(json_answer(200, {**body, "id": "body-id"}, {header: "header-id"}))
    without_id = canned(json_answer(200, body, {header: "header-id"}))
    ids = [send(provider, url + suffix, Call(MESSAGES)).request_id for url in (with_id, without_id)]
    assert ["body-id", "header-id"] == ids


def test_an_openai_stream_takes_the_first_chunks_id(canned) -> None:
    """A streamed OpenAI answer's request id is its first chunk's ``id``, not a later chunk's
    nor the ``x-request-id`` header; chunks without ids fall back to the header."""

    def chunk(id_: str | None, content: str, finish: str | None = None) -> dict:
        delta = {"content": content}
        return {"id": id_, "model": "m", "choices": [{"delta": delta, "finish_reason": finish}]}

    header = {"x-request-id": "header-id"}
    with_ids = [(None, chunk("first-id", "o")), (None, chunk("later-id", "k", "stop"))]
    without = [(None, chunk(None, "o")), (None, chunk(None, "k", "stop"))]
    urls = [
        canned(sse_answer([*events, (None, "[DONE]")], header)) for events in (with_ids, without)
    ]
    replies = [send("openai", url + "/v1", Call(MESSAGES, stream=True)) for url in urls]
    assert [("ok", "first-id"), ("ok", "header-id")] == [(r.output, r.request_id) for r in replies]


def test_an_anthropic_stream_takes_the_messages_id(canned) -> None:
    """A streamed Anthropic answer's request id is message_start's ``message.id``, not the
    ``request-id`` header; without one, the header's."""

    def events(message_id: str | None) -> list[tuple[str, object]]:
        return [
            ("message_start", {"type": "message_start", "message": {"id": message_id}}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": "ok"}}),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip

    header = {"request-id": "header-id"}
    urls = [canned(sse_answer(events(i), header)) for i in ("msg-id", None)]
    replies = [send("anthropic", url, Call(MESSAGES, stream=True)) for url in urls]
    assert [("stop", "msg-id"), ("stop", "header-id")] == [
        (r.finish_reason, r.request_id) for r in replies
    ]
