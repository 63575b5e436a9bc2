"""One HTTP/1.1 connection to a backend on a bare asyncio protocol, its answers parsed by httptools.

The lean transport (``_lean.py``) sends each request on a ``Wire``: the request's bytes in one
write, the answer's head awaited, then its body read as it arrives (``Body``, an httpx2 byte
stream: httpx2 decompresses it and our readers count it against ``max_response_bytes``). The
parser's callbacks run inside ``data_received``, so an answer that came in one packet is whole
before its reader wakes, and a reader that falls behind pauses the socket (at most ``_HIGH``
bytes are held). A server that closes an idle connection is seen when it does
(``connection_lost``), not polled for. A connection is reused only when its last answer came
whole and allowed it; any failure, a timeout or a cancelled read closes it.

Errors are httpx2's, with httpcore2's wording, so the translation in ``base.py`` and the retry
classification see what they saw before. One raised because a reused connection was closed
before any byte of its answer came carries ``unanswered_reuse`` (the keep-alive race,
``_body.dropped_while_idle``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import httptools
import httpx2

__all__ = ["Body", "Wire"]

_HIGH = 256 * 1024  # bytes of body held before the socket is paused
_LOW = 64 * 1024  # ... and resumed once the reader took it below this
MAX_HEAD = 100 * 1024  # bytes of an answer's head (h11's limit)

_IDLE, _SENT, _BODY, _DONE = range(4)
_DROPPED = "Server disconnected without sending a response."
_CUT = "peer closed connection without sending complete message body"


class Wire(asyncio.Protocol):
    """One connection: ``send`` a request and get the answer's head; ``Body`` reads the rest."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self.closed = False
        self.requests = 0  # requests sent on this connection
        self.idle_since = loop.time()
        self.reusable = False  # the last answer came whole and the server keeps the connection
        self._state = _IDLE
        self._waiter: asyncio.Future[None] | None = None
        self._error: Exception | None = None
        self._writable: asyncio.Future[None] | None = None
        self._received = False  # a byte of the current answer came
        self._interim = False  # a 1xx answer is being skipped
        self._delimited = False  # the answer says where its body ends
        self._head_size = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.chunks: deque[bytes] = deque()
        self._held = 0
        self._paused = False

    # --- asyncio's protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._state == _IDLE:  # bytes nobody asked for: the connection is not reused
            self._close()
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(httpx2.RemoteProtocolError("the server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(httpx2.RemoteProtocolError(f"malformed answer: {exc.__context__ or exc}"))
        self._wake()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._state == _BODY and not self._delimited and exc is None:
            self._state = _DONE  # a body that ends with the connection
            self.reusable = False
        elif self._state in (_SENT, _BODY):
            self._error = self._lost_error(exc)
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._wake()

    def pause_writing(self) -> None:
        self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        self._writable = None

    # --- httptools' callbacks -------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._state == _DONE:  # a second answer to one request: the connection is not reused
            raise httptools.HttpParserError("the server sent an answer nobody asked for")

    def on_status(self, reason: bytes) -> None:
        self.reason = reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value)
        if self._head_size > MAX_HEAD:
            raise httptools.HttpParserError("the answer's head is too long")
        self.headers.append((name, value))
        lowered = name.lower()
        if lowered == b"content-length" or lowered == b"transfer-encoding":
            self._delimited = True

    def on_headers_complete(self) -> None:
        if 100 <= self._parser.get_status_code() < 200:  # an interim answer: the real one follows
            self._interim = True
            self.headers = []
            self._delimited = False
            return
        self._state = _BODY

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self._held += len(body)
        if self._held > _HIGH and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        self._state = _DONE
        self.reusable = self._parser.should_keep_alive()

    # --- one exchange -----------------------------------------------------------------------

    async def send(self, data: bytes, timeouts: dict[str, Any]) -> int:
        """Write a request's bytes and wait for its answer's head: its status (headers and
        reason on the wire). Raises httpx2's errors; the caller closes the wire on any."""
        if self.closed or self._transport is None:
            raise _unanswered(httpx2.RemoteProtocolError(_DROPPED), self.requests > 0)
        self._begin()
        self._transport.write(data)
        if self._writable is not None:
            await self._drained(timeouts.get("write"))
        read = timeouts.get("read")
        while self._state == _SENT and self._error is None:
            await self.wait(read)
        if self._state == _SENT:  # the head never came whole
            raise self._error  # type: ignore[misc]
        return self._parser.get_status_code()

    def _begin(self) -> None:
        self.requests += 1
        self._state = _SENT
        self._received = self._interim = self._delimited = self.reusable = False
        self._head_size = 0
        self.headers = []
        self.reason = b""
        self.chunks.clear()
        self._held = 0

    async def _drained(self, timeout: float | None) -> None:
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(self._writable)  # type: ignore[arg-type]
        except TimeoutError:
            raise httpx2.WriteTimeout("the request could not be written in time") from None
        if self.closed and self._error is None:
            raise httpx2.WriteError("the connection closed while the request was written")

    async def wait(self, timeout: float | None) -> None:
        """Until the parser has more (or the connection ends); ReadTimeout after ``timeout``."""
        waiter = self._waiter = self._loop.create_future()
        if timeout is None:
            await waiter
            return
        timer = self._loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            timer.cancel()

    def take(self) -> bytes:
        """The body bytes that came since the last take."""
        chunks = self.chunks
        data = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self._held = 0
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return data

    @property
    def done(self) -> bool:
        """The answer came whole; raises the failure that ended it otherwise, if one did."""
        if self._state == _DONE:
            return True
        if self._error is not None:
            raise self._error
        return False

    def finished(self) -> None:
        """The answer was read (or given up): idle from now on."""
        if self._state != _DONE:
            self.reusable = False
        self._state = _IDLE
        self.idle_since = self._loop.time()

    def close(self) -> None:
        self.reusable = False
        self._close()

    # --- inside -------------------------------------------------------------------------------

    def _close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _fail(self, error: Exception) -> None:
        self._error = error
        self._close()

    def _lost_error(self, exc: Exception | None) -> Exception:
        if self._received:
            if exc is not None:
                return httpx2.ReadError(str(exc) or type(exc).__name__)
            return httpx2.RemoteProtocolError(_CUT)
        error = httpx2.ReadError(str(exc)) if exc is not None else None
        return _unanswered(error or httpx2.RemoteProtocolError(_DROPPED), self.requests > 1)


def _unanswered(error: Exception, reused: bool) -> Exception:
    error.unanswered_reuse = reused  # type: ignore[attr-defined]
    return error


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx2.ReadTimeout("no bytes of the answer came in time"))


class Body(httpx2.AsyncByteStream):
    """An answer's body as it comes; closing it hands the wire to ``release``."""

    __slots__ = ("_read", "_release", "_wire")

    def __init__(self, wire: Wire, read: float | None, release: Callable[[Wire], None]) -> None:
        self._wire = wire
        self._read = read
        self._release: Callable[[Wire], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        wire = self._wire
        while True:
            if wire.chunks:
                yield wire.take()
            elif wire.done:
                return
            else:
                await wire.wait(self._read)

    async def aclose(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release(self._wire)
