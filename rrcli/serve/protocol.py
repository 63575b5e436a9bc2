"""The HTTP/1.1 protocol ``rrcli serve`` runs on: uvicorn's httptools parser (C, about a tenth
less CPU a request than h11 in pure Python), with the bound on a request's head that it lacks.

A request's head (request line and headers) may take ``HEAD_LIMIT`` bytes: past them before the
head is complete, the client is answered 431 and the connection closed, so a client trickling
headers without end holds no memory beyond the limit. Bytes that arrive together with the end
of a head are not counted (the parser has them already, as h11 with the same limit does).

A request's scope carries ``dispatch.ON_GONE``, a list the app may put callables in: each is called
when the connection is lost before the request's answer is complete, so the app learns that its
client left the moment it happens, without a task of its own waiting for ``http.disconnect``.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from rrcli.serve.dispatch import ON_GONE

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

    def on_response_complete(self) -> None:
        if self._unanswered:
            self._unanswered.popleft()
        super().on_response_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0
