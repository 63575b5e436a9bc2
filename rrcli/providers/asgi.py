"""An httpx2 transport that hands each request to an ASGI app in this process and streams its
answer back as the app sends it.

httpx2's own ``ASGITransport`` gathers the whole body before it returns, so a stream arrives
at its end, and the app is never told its client left. Here the response is returned at the
app's ``http.response.start``, each ``http.response.body`` is the next chunk the client reads,
and a client that closes the answer early (or is cancelled before it) makes the app's
``receive`` say ``http.disconnect``, as a server does when the connection drops.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

import httpx2

__all__ = ["StreamingASGITransport"]

Message = MutableMapping[str, Any]
App = Callable[
    [Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]
_END = b""  # the queue's mark that the app sent its last body part


class _Exchange:
    """One request's traffic with the app: its body to read once, the head and the body
    parts it sends, and whether the client is gone."""

    def __init__(self, body: bytes) -> None:
        self.body: bytes | None = body
        self.head: asyncio.Future[Message] = asyncio.get_running_loop().create_future()
        self.parts: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self.gone = asyncio.Event()

    async def receive(self) -> Message:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.head.set_result(message)
        elif message["type"] == "http.response.body":
            part = message.get("body", b"")
            if part:
                self.parts.put_nowait(part)
            if not message.get("more_body", False):
                self.parts.put_nowait(_END)

    def ended(self, error: BaseException | None) -> None:
        """The app returned (``error`` None) or failed: a reader waiting for more is let go."""
        if not self.head.done():
            self.head.set_exception(error or RuntimeError("the app sent no response"))
        self.parts.put_nowait(_END if error is None else error)


class _Body(httpx2.AsyncByteStream):
    def __init__(self, exchange: _Exchange) -> None:
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (part := await self._exchange.parts.get()) is not _END:
            if isinstance(part, BaseException):
                raise httpx2.ReadError(f"the app failed mid-answer: {part!r}") from part
            yield part

    async def aclose(self) -> None:
        """The client is done reading: an app still sending is told the client left."""
        self._exchange.gone.set()


class StreamingASGITransport(httpx2.AsyncBaseTransport):
    """Requests to ``app`` in this process, answers streamed (see the module docstring);
    ``before`` is called as each request comes in."""

    def __init__(self, app: App, before: Callable[[], None] | None = None) -> None:
        self._app = app
        self._before = before
        self._open: dict[asyncio.Task[None], _Exchange] = {}

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._before is not None:
            self._before()
        exchange = _Exchange(await request.aread())
        task = asyncio.create_task(self._run(_scope(request), exchange))
        self._open[task] = exchange
        task.add_done_callback(self._open.pop)
        try:
            head = await asyncio.shield(exchange.head)
        except asyncio.CancelledError:  # the client gave up waiting: the app is told so
            exchange.gone.set()
            raise
        headers = [(bytes(k), bytes(v)) for k, v in head.get("headers", ())]
        return httpx2.Response(head["status"], headers=headers, stream=_Body(exchange))

    async def _run(self, scope: Message, exchange: _Exchange) -> None:
        try:
            await self._app(scope, exchange.receive, exchange.send)
        except BaseException as exc:
            exchange.ended(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            exchange.ended(None)

    async def aclose(self) -> None:
        """The requests still being answered told their clients left, and waited for."""
        for exchange in self._open.values():
            exchange.gone.set()
        if self._open:
            await asyncio.gather(*self._open, return_exceptions=True)


def _scope(request: httpx2.Request) -> Message:
    url = request.url
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "headers": [(k.lower(), v) for k, v in request.headers.raw],
        "scheme": url.scheme,
        "path": url.path,
        "raw_path": url.raw_path.split(b"?")[0],
        "query_string": url.query,
        "server": (url.host, url.port),
        "client": ("127.0.0.1", 0),
        "root_path": "",
    }
