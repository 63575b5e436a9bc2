"""The HTTP/1.1 protocol ``rrcli serve`` runs on: uvicorn's httptools parser (C, about a tenth
less CPU a request than h11 in pure Python), with the bounds on a connection that it lacks, so
that clients holding connections open without finishing a request cannot lock others out.

Deadlines: a request's head must be complete within ``head_timeout`` seconds of the
connection's opening, or of its first byte on a kept-alive connection (else the connection is
closed, a 408 written first when part of a head came); a kept-alive connection idle for
``idle_timeout`` seconds after an answer is closed (uvicorn's keep-alive timer).

Open connections: at most ``total``, and ``per_address`` from one client address. A new
connection past either bound closes the oldest connection (of its address, or of all) that has
no request in progress: idle between requests, or still receiving its head. So a flood of
connections that never finish a head (from one address or many, loopback's clients all
sharing one) only ever pushes out the flood's own oldest, and a client that sends its request
at once is served. Only when every connection counted has a request in progress is the new
one answered 503 and closed. The total is bounded by three quarters of the process's
open-files limit (``allowed_connections``), so accepting never runs out of files (which would
stop the server accepting anyone) and the backends' connections and the trace files keep the
rest.

An answer that starts before its request's body was received whole (a 401, a 404, a 413, by
its ``content-length`` or at the limit) closes the connection once written: the rest of the
body is never read, and the connection cannot be kept alive past it.

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
import resource
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from rrcli.serve.dispatch import ON_GONE

Message = Any  # an ASGI message (a dict)

__all__ = ["HEAD_LIMIT", "BoundedHttpTools", "Connections", "allowed_connections"]

#: the most bytes of a request's head still incomplete (h11's limit in uvicorn's other mode)
HEAD_LIMIT = 64 * 1024

_TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s"
)
_WHY = b"the request's headers are over %d bytes" % HEAD_LIMIT
_LATE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s"
)
_WHY_LATE = b"the request's head did not arrive in time"
_FULL = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"content-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
    b"retry-after: 1\r\nconnection: close\r\n\r\n%s"
)
_WHY_FULL = b"every connection the server may hold has a request in progress"


def allowed_connections(wanted: int) -> int:
    """The most connections to hold open: ``wanted``, at most three quarters of the soft
    open-files limit (the rest for the backends' connections, the traces, the listener)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft * 3 // 4))


class Connections:
    """The open connections, oldest first, all (at most ``total``) and by client address (at
    most ``per_address``); ``head_timeout`` is the seconds a request's head may take."""

    def __init__(self, total: int, per_address: int, head_timeout: float) -> None:
        self.total = total
        self.per_address = per_address
        self.head_timeout = head_timeout
        self._all: dict[BoundedHttpTools, None] = {}  # a dict keeps the order of opening
        self._by_address: dict[str, dict[BoundedHttpTools, None]] = {}

    def admit(self, connection: BoundedHttpTools, address: str) -> bool:
        """Count ``connection``, first closing the oldest without a request in progress
        where a bound is reached; False (not counted) when none can be closed."""
        mine = self._by_address.get(address)
        if mine is not None and len(mine) >= self.per_address and not self._close_oldest(mine):
            return False
        if len(self._all) >= self.total and not self._close_oldest(self._all):
            return False
        self._all[connection] = None
        self._by_address.setdefault(address, {})[connection] = None
        return True

    def leave(self, connection: BoundedHttpTools, address: str) -> None:
        if self._all.pop(connection, 0) is None:
            mine = self._by_address[address]
            del mine[connection]
            if not mine:
                del self._by_address[address]

    def _close_oldest(self, among: dict[BoundedHttpTools, None]) -> bool:
        oldest = next((c for c in among if not c.in_progress), None)
        if oldest is None:
            return False
        oldest.close()
        return True


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol, a request's incomplete head bounded to ``HEAD_LIMIT``
    bytes and ``connections.head_timeout`` seconds, the connection counted in
    ``connections``, each request's scope with its ``ON_GONE`` list."""

    def __init__(self, *args: Any, connections: Connections, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connections = connections

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._in_head = True
        self._head_bytes = 0
        self._unanswered: deque[list[Callable[[], object]]] = deque()  # oldest request first
        self._head_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._address = self.client[0] if self.client else ""
        if not self._connections.admit(self, self._address):
            transport.write(_FULL % (len(_WHY_FULL), _WHY_FULL))
            transport.close()
            return
        self._time_head()

    @property
    def in_progress(self) -> bool:
        """Whether a request has its head and not yet its whole answer."""
        return bool(self._unanswered)

    def close(self) -> None:
        """Close the connection at once (a newer one needs its place)."""
        self._connections.leave(self, self._address)
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.leave(self, self._address)
        self._untime_head()
        super().connection_lost(exc)
        while self._unanswered:
            for gone in self._unanswered.popleft():
                gone()

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_timer is None:  # the first byte of a kept-alive connection's request
                self._time_head()
        super().data_received(data)
        if self._in_head and self._head_bytes > HEAD_LIMIT and not self.transport.is_closing():
            self.transport.write(_TOO_LARGE % (len(_WHY), _WHY))
            self.transport.close()

    def _time_head(self) -> None:
        self._head_timer = self.loop.call_later(self._connections.head_timeout, self._head_late)

    def _untime_head(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._in_head and not self.in_progress and not self.transport.is_closing():
            if self._head_bytes:
                self.transport.write(_LATE % (len(_WHY_LATE), _WHY_LATE))
            self.close()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._untime_head()
        gone: list[Callable[[], object]] = []
        self.scope[ON_GONE] = gone  # type: ignore[literal-required]
        self._unanswered.append(gone)
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None:
            cycle.send = _answered(cycle)  # type: ignore[method-assign]

    def on_response_complete(self) -> None:
        if self._unanswered:
            self._unanswered.popleft()
        super().on_response_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0


def _answered(cycle: RequestResponseCycle) -> Callable[[Message], Awaitable[None]]:
    """``cycle.send``: an answer started before its request's body was whole closes the
    connection once written; the head it writes at ``http.response.start`` is held back and
    written in front of the first body part (uvicorn writes at every body message, an empty
    one too), except a HEAD's, whose answer is its head."""
    send = cycle.send
    hold = cycle.scope["method"] != "HEAD"

    async def held(message: Message) -> None:
        if message["type"] == "http.response.start" and not cycle.response_started:
            if cycle.more_body:
                cycle.keep_alive = False
            if not hold:
                await send(message)
                return
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
