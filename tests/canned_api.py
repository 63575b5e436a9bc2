"""A small OpenAI-compatible server for end-to-end tests of the endpoints besides chat.

The standard library's threaded HTTP server on a free loopback port, answering ``/v1/chat/
completions``, ``/v1/embeddings`` (vectors of whole numbers, exact in float32, in reverse
order of their index), ``/v1/responses`` and ``/v1/completions`` (plain and streamed, in words)
and ``/v1/moderations``. It counts the requests of each path (as requested, its query too), so
a test asserts from the server's side. The mode ``fail-first`` answers 503 to the first request
for each input.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = tuple[int, str, bytes]


def vector(text: str, position: int) -> list[float]:
    """The embedding this server gives ``text`` at ``position`` of its request's inputs: whole
    numbers, so float32 (base64) holds them exactly."""
    return [float(sum(map(ord, text)) % 997), float(position), 0.5]


def _json(status: int, body: object) -> Answer:
    return status, "application/json", json.dumps(body).encode()


def _sse(events: list[tuple[str | None, object]]) -> Answer:
    text = "".join(
        (f"event: {name}\n" if name else "")
        + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        for name, data in events
    )
    return 200, "text/event-stream", text.encode()


def _pieces(text: str) -> list[str]:
    """``text`` as stream pieces, a word each, joining back to it."""
    words = text.split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words)]


def _texts(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


class CannedAPI(ThreadingHTTPServer):
    """One server; ``url`` is an openai backend's base_url."""

    daemon_threads = True

    def __init__(self, name: str, modes: tuple[str, ...] = ()) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.name = name
        self.modes = set(modes)
        self.lock = threading.Lock()
        self.paths: Counter[str] = Counter()
        self.seen: Counter[str] = Counter()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def answer(self, path: str, body: dict[str, Any]) -> Answer:
        handler = {
            "/v1/chat/completions": self._chat,
            "/v1/embeddings": self._embeddings,
            "/v1/responses": self._responses,
            "/v1/completions": self._completions,
            "/v1/moderations": self._moderations,
        }.get(path.partition("?")[0])
        if handler is None:
            return _json(404, {"error": {"message": f"no {path}", "type": "not_found"}})
        if "fail-first" in self.modes:
            with self.lock:
                self.seen[json.dumps(body.get("input"))] += 1
                first = self.seen[json.dumps(body.get("input"))] == 1
            if first:
                return _json(503, {"error": {"message": "busy", "type": "server_error"}})
        return handler(body)

    def _chat(self, body: dict[str, Any]) -> Answer:
        message = {"role": "assistant", "content": f"{self.name} chat"}
        usage = {"prompt_tokens": 3, "completion_tokens": 2}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return _json(200, {"id": "c1", "model": body["model"], "choices": [choice], "usage": usage})

    def _embeddings(self, body: dict[str, Any]) -> Answer:
        texts = _texts(body["input"])
        data = []
        for i, text in enumerate(texts):
            values = vector(text, i)
            if body.get("encoding_format") == "base64":
                packed = struct.pack(f"<{len(values)}f", *values)
                data.append({"index": i, "embedding": base64.b64encode(packed).decode()})
            else:
                data.append({"index": i, "embedding": values})
        data.reverse()  # in any order: the index says which input each answers
        usage = {"prompt_tokens": 7 * len(texts), "total_tokens": 7 * len(texts)}
        return _json(200, {"object": "list", "data": data, "model": body["model"], "usage": usage})

    def _responses(self, body: dict[str, Any]) -> Answer:
        response_id = f"resp_{self.name}_{body['input']}"
        text = f"{self.name} answers {body['input']}"
        part = {"type": "output_text", "text": text, "annotations": []}
        output = [{"type": "message", "role": "assistant", "content": [part]}]
        usage = {"input_tokens": 5, "output_tokens": 4, "total_tokens": 9}
        response = {"id": response_id, "object": "response", "status": "completed",
                    "model": body["model"], "output": output, "usage": usage}  # fmt: skip
        if not body.get("stream"):
            return _json(200, response)
        kind = "response.output_text.delta"
        deltas = [(kind, {"type": kind, "delta": piece}) for piece in _pieces(text)]
        created = {**response, "status": "in_progress", "output": []}
        completed = ("response.completed", {"type": "response.completed", "response": response})
        return _sse([("response.created", {"type": "response.created", "response": created}),
                     *deltas, completed])  # fmt: skip

    def _completions(self, body: dict[str, Any]) -> Answer:
        prompts = _texts(body["prompt"])
        n = body.get("n", 1)
        texts = [f"{self.name} completes {p} #{j}" for p in prompts for j in range(n)]
        usage = {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
        head = {"id": "cmpl-1", "object": "text_completion", "model": body["model"]}
        if not body.get("stream"):
            choices = [
                {"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)
            ]
            return _json(200, {**head, "choices": choices[::-1], "usage": usage})
        events: list[tuple[str | None, object]] = []
        for i, text in enumerate(texts):
            for piece in _pieces(text):
                choice = {"index": i, "text": piece, "finish_reason": None}
                events.append((None, {**head, "choices": [choice]}))
            events.append((None, {**head, "choices": [{"index": i, "text": "",
                                                          "finish_reason": "stop"}]}))  # fmt: skip
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append((None, {**head, "choices": [], "usage": usage}))
        return _sse([*events, (None, "[DONE]")])

    def _moderations(self, body: dict[str, Any]) -> Answer:
        results = [{"flagged": "bad" in t, "categories": {"violence": "bad" in t}}
                   for t in _texts(body["input"])]  # fmt: skip
        return _json(200, {"id": "modr-1", "model": body["model"], "results": results})


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: CannedAPI

    def setup(self) -> None:
        super().setup()
        # the head and the body go out in two writes: without this, Nagle's algorithm holds
        # the body until the client's delayed ACK (40 ms a request on Linux)
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        with server.lock:
            server.paths[self.path] += 1
        status, content_type, payload = server.answer(self.path, body)
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def canned_apis(*specs: tuple[str, tuple[str, ...]]) -> Iterator[list[CannedAPI]]:
    """Start one CannedAPI per (name, modes); stop them all at the end."""
    servers = [CannedAPI(name, modes) for name, modes in specs]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
