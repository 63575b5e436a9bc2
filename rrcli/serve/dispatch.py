"""The gateway's ASGI app: each request's path looked up once in a table and handed to its
endpoint, with no router walking patterns and no middleware layers around it.

A path is exact (``/v1/chat/completions``) or the same under a session's prefix
(``/s/{session}/v1/chat/completions``: the session is the request's ``path_params``). A path
not served is answered 404 and a method an endpoint does not take 405 (with ``Allow``), in the
error shape of the API the path belongs to (Anthropic's under ``/v1/messages``, else
OpenAI's); an endpoint that fails unexpectedly is answered 500 in that shape, and the error
goes on to the server, which logs it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from rrcli.serve.wires import ANTHROPIC, OPENAI, Wire

__all__ = ["ON_GONE", "Endpoint", "Json", "Routes", "header_of"]

#: the scope's key of a list of callables its server calls when the client leaves before the
#: answer is complete (``serve.protocol``); a scope without it (in-process) has none
ON_GONE = "rrcli.on_gone"

Endpoint = Callable[[Request], Awaitable[Response]]
Scope = MutableMapping[str, Any]
_SESSION = "/s/"


class Routes:
    """The ASGI app of a table ``{path: (methods, endpoint)}``; ``sessioned`` are the paths
    also served under ``/s/{session}``."""

    def __init__(
        self, table: dict[str, tuple[frozenset[str], Endpoint]], sessioned: frozenset[str]
    ) -> None:
        self._table = table
        self._sessioned = sessioned

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":  # lifespan is off; a websocket is refused by the server
            return
        path, session = _split(scope["path"])
        entry = self._table.get(path)
        if entry is not None and session is not None:
            if path not in self._sessioned:
                entry = None
            else:
                scope["path_params"] = {"session": session}
        wire = ANTHROPIC if path.startswith("/v1/messages") else OPENAI
        if entry is None:
            response = _error(wire, 404, f"no such path: {scope['path']}")
        elif scope["method"] not in entry[0]:
            allowed = ", ".join(sorted(entry[0]))
            response = _error(wire, 405, f"{scope['method']} is not served here; use {allowed}")
            response.headers["allow"] = allowed
        else:
            try:
                response = await entry[1](Request(scope, receive))
            except Exception:
                await _error(wire, 500, "the server failed; see its log")(scope, receive, send)
                raise
        await response(scope, receive, send)


def _split(path: str) -> tuple[str, str | None]:
    """(the path without a session's prefix, the session or None)."""
    if not path.startswith(_SESSION):
        return path, None
    end = path.find("/", len(_SESSION))
    if end <= len(_SESSION):
        return path, None
    return path[end:], path[len(_SESSION) : end]


def _error(wire: Wire, status: int, message: str) -> Response:
    return Json(wire.error(status, message), status)


class Json(Response):
    """A JSON answer (``body`` already encoded), its head made at once: starlette's Response
    looks at and encodes each header on its own. ``refused``: (reason, message) of a request
    refused before any backend was asked, for the gateway's counts."""

    refused: tuple[str, str] | None = None

    def __init__(
        self, body: bytes, status: int = 200, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status_code = status
        self.body = body
        self.background = None
        raw = [(b"content-length", b"%d" % len(body)), (b"content-type", b"application/json")]
        if headers:
            raw += [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.raw_headers = raw


def header_of(response: Response, name: bytes) -> str | None:
    """The value of the header ``name`` (lowercase) of ``response``, or None."""
    for key, value in response.raw_headers:
        if key == name:
            return value.decode("latin-1")
    return None
