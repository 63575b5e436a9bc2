"""The HTTP/1.1 protocol ``rrcli serve`` runs on: uvicorn's httptools parser (C, about a tenth
less CPU a request than h11 in pure Python), with the bound on a request's head that it lacks.

A request's head (request line and headers) may take ``HEAD_LIMIT`` bytes: past them before the
head is complete, the client is answered 431 and the connection closed, so a client trickling
headers without end holds no memory beyond the limit. Bytes that arrive together with the end
of a head are not counted (the parser has them already, as h11 with the same limit does).

An answer's head is written together with its body's first part, in one write (uvicorn writes
each on its own: a second system call and a second TCP segment for every answer, the client
woken twice).

A request's scope carries ``dispatch.ON_GONE``, a list the app may put callables in: each is called
when the connection is lost before the request's answer is complete, so the app learns that its
client left the moment it happens, without a task of its own waiting for ``http.disconnect``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from rrcli.serve.dispatch import ON_GONE

Message = Any  # an ASGI message (a dict)

__all__ = ["HEAD_LIMIT", "BoundedHttpTools"]

#: the most bytes of a request's head still incomplete (h11's limit in uvicorn's other mode)
HEAD_LIMIT = 64 * 1024

_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s"
)
_WHY = b"the request's headers are over %d bytes" % HEAD_LIMIT


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, a request's incomplete head bounded to ``HEAD_LIMIT``,
    each request's scope with its ``ON_GONE`` list."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._in_head = True
        self._head_bytes = 0
        self._unanswered: deque[list[Callable[[], object]]] = deque()  # oldest request first
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        while self._unanswered:
            for gone in self._unanswered.popleft():
                gone()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > HEAD_LIMIT and not self.transport.is_closing():
            self.transport.write(_TOO_LARGE % (len(_WHY), _WHY))
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        gone: list[Callable[[], object]] = []
        self.scope[ON_GONE] = gone  # type: ignore[literal-required]
        self._unanswered.append(gone)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and self.scope["method"] != "HEAD":  # a HEAD's answer is its head
            cycle.send = _head_with_body(cycle)  # type: ignore[method-assign]

    def on_response_complete(self) -> None:
        if self._unanswered:
            self._unanswered.popleft()
        super().on_response_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0


def _head_with_body(cycle: RequestResponseCycle) -> Callable[[Message], Awaitable[None]]:
    """``cycle.send``, the head it writes at ``http.response.start`` held back and written
    in front of the first body part (uvicorn writes at every body message, an empty one too)."""
    send = cycle.send

    async def held(message: Message) -> None:
        if message["type"] == "http.response.start" and not cycle.response_started:
            transport = cycle.transport
            cycle.transport = _HeldHead(cycle, transport)  # type: ignore[assignment]
            try:
                await send(message)
            except BaseException:
                cycle.transport = transport
                raise
            return
        await send(message)

    return held


class _HeldHead:
    """A cycle's transport while its answer's head is held: the first write (the head) is
    kept, the next goes out after it in one write, and the cycle has its transport back."""

    def __init__(self, cycle: RequestResponseCycle, transport: asyncio.Transport) -> None:
        self._cycle = cycle
        self._transport = transport
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._head is None:
            self._head = data
            return
        self._cycle.transport = self._transport
        self._transport.write(self._head + data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
