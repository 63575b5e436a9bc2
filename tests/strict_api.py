"""Strict servers of the two chat APIs on loopback, for the translation table's tests: each
answers 400, with the real API's words, exactly where the real API refuses a request
(tests/strict_anthropic.py, tests/strict_openai.py), and a plain answer otherwise.

``strict_servers()`` starts one server of each on loopback; each keeps every body it received
and the 400s it gave.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from strict_anthropic import anthropic_problem
from strict_openai import openai_problem

# --- the servers --------------------------------------------------------------------------


def _anthropic_answer(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "msg_strict", "type": "message", "role": "assistant", "model": body["model"],
        "content": [{"type": "text", "text": "strict ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }  # fmt: skip


def _openai_answer(body: dict[str, Any]) -> dict[str, Any]:
    message = {"role": "assistant", "content": "strict ok"}
    return {
        "id": "chatcmpl-strict", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }  # fmt: skip


class StrictAPI(ThreadingHTTPServer):
    """One strict server; ``url`` is its backend's base_url. ``bodies``: every request body
    received; ``refused``: the message of each 400 it answered."""

    daemon_threads = True

    def __init__(self, api: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api
        self.path_ = "/v1/messages" if api == "anthropic" else "/v1/chat/completions"
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []
        self.refused: list[str] = []

    @property
    def url(self) -> str:
        port = self.server_address[1]
        return f"http://127.0.0.1:{port}" + ("" if self.api == "anthropic" else "/v1")

    def answer(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        if path != self.path_:
            return 404, {"error": {"type": "not_found_error", "message": f"no {path}"}}
        check = anthropic_problem if self.api == "anthropic" else openai_problem
        problem = check(body) if isinstance(body, dict) else "the body is not a JSON object"
        with self.lock:
            self.bodies.append(body)
            if problem is not None:
                self.refused.append(problem)
        if problem is not None:
            if self.api == "anthropic":
                error = {
                    "type": "error",
                    "error": {"type": "invalid_request_error", "message": problem},
                }
                return 400, error
            return 400, {
                "error": {"message": problem, "type": "invalid_request_error", "code": None}
            }
        answer = _anthropic_answer if self.api == "anthropic" else _openai_answer
        return 200, answer(body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: StrictAPI

    def setup(self) -> None:
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("content-length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        status, answer = self.server.answer(self.path, body)
        payload = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        return None


@contextmanager
def strict_servers() -> Iterator[tuple[StrictAPI, StrictAPI]]:
    """(a strict OpenAI server, a strict Anthropic server), stopped at the end."""
    servers = (StrictAPI("openai"), StrictAPI("anthropic"))
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield servers
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
