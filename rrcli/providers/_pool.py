"""A backend client's connection pool that does not walk its connections on every request.

httpcore2's pool re-plans every connection on each request and on each release: it asks each
one whether it is closed, idle or expired (an expiry check polls the socket), twice a request,
so at 32 connections a backend that walk was about a sixth of a gateway's CPU. This pool keeps
the idle connections of each origin on a stack and checks only the one it takes (closed, past
its keep-alive, or closed by the server while it idled: then it is closed and the next taken);
the one released last is taken first, so the connections a steady load needs stay warm, and
each release looks at the oldest idle one, closed once past its keep-alive. When every
connection is busy a request waits its turn (``pool`` timeout), as in httpcore2. Connections
are httpcore2's own (HTTP/1.1, TLS, the address check of ``peer.py``): only the choice of one
changes. Backends send on the lean transport (``_lean.py``); this pool carries what it hands
on (a streamed request body, a HEAD request), and ``Turns`` is the queue of waiting requests
both pools share.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpcore2
import httpx2

__all__ = ["StackPool", "Turns", "stack_transport"]

_Connection = httpcore2.AsyncConnectionInterface
_Key = tuple[bytes, bytes, int]  # an origin's scheme, host and port (Origin is no dict key)


class StackPool(httpcore2.AsyncConnectionPool):
    """httpcore2's connection pool (the same arguments), its idle connections on stacks."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._idle: dict[_Key, list[_Connection]] = {}
        self._turns = Turns()

    async def handle_async_request(self, request: httpcore2.Request) -> httpcore2.Response:
        if request.url.scheme not in (b"http", b"https"):
            raise httpcore2.UnsupportedProtocol(
                f"Request URL has an unsupported protocol '{request.url.scheme.decode()}://'."
            )
        timeout = request.extensions.get("timeout", {}).get("pool")
        origin = request.url.origin
        while True:
            connection = await self._take(origin, timeout)
            try:
                response = await connection.handle_async_request(request)
            except httpcore2.ConnectionNotAvailable:
                await self.give_back(connection, origin)
                continue
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self.give_back(connection, origin)
                raise
            return httpcore2.Response(
                status=response.status,
                headers=response.headers,
                content=_Held(response.stream, self, connection, origin),
                extensions=response.extensions,
            )

    async def _take(self, origin: httpcore2.Origin, timeout: float | None) -> _Connection:
        """An idle connection to ``origin`` still good, else a new one while there is room,
        else the first released once this request's turn comes (PoolTimeout after
        ``timeout`` seconds)."""
        first = True
        while True:
            stack = self._idle.get(_key(origin))
            while stack:
                connection = stack.pop()
                if not (connection.is_closed() or connection.has_expired()):
                    return connection
                await self._drop(connection)
            if len(self._connections) >= self._max_connections:
                await self._close_an_idle_one()
            if len(self._connections) < self._max_connections:
                connection = self.create_connection(origin)
                self._connections.append(connection)
                return connection
            await self._turns.wait(timeout, first, httpcore2.PoolTimeout)
            first = False

    async def give_back(self, connection: _Connection, origin: httpcore2.Origin) -> None:
        """``connection`` is free again: on its stack if it can take the next request, else
        out of the pool; a waiting request is woken either way."""
        kept = sum(len(s) for s in self._idle.values()) < self._max_keepalive_connections
        if connection.is_connected() and connection.is_idle() and kept:
            stack = self._idle.setdefault(_key(origin), [])
            stack.append(connection)
            oldest = stack[0]
            if oldest is not connection and oldest.has_expired():  # one aged out at a time
                del stack[0]
                await self._drop(oldest)
        else:
            await self._drop(connection)
        self._turns.wake()

    async def _drop(self, connection: _Connection) -> None:
        if connection in self._connections:
            self._connections.remove(connection)
        await connection.aclose()

    async def _close_an_idle_one(self) -> None:
        """Room for a connection to another origin: the oldest idle connection closed."""
        for stack in self._idle.values():
            if stack:
                await self._drop(stack.pop(0))
                return


class Turns:
    """The requests waiting for a connection, in the order they came."""

    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()

    async def wait(self, timeout: float | None, first: bool, error: type[Exception]) -> None:
        """Until a connection is released (``error`` past ``timeout`` seconds); a request woken
        that found none taken already (not ``first``) waits again ahead of those after it."""
        waiter = asyncio.get_running_loop().create_future()
        if first:
            self._waiting.append(waiter)
        else:
            self._waiting.appendleft(waiter)
        try:
            await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            raise error("no connection came free in time") from None
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.wake()  # the turn this request was given goes to the next
            raise
        finally:
            if not waiter.done():
                self._waiting.remove(waiter)

    def wake(self) -> None:
        """The first request still waiting gets the connection released."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def _key(origin: httpcore2.Origin) -> _Key:
    return origin.scheme, origin.host, origin.port


class _Held:
    """A response's body whose connection goes back to the pool once the body is closed."""

    def __init__(
        self, stream: Any, pool: StackPool, connection: _Connection, origin: httpcore2.Origin
    ) -> None:
        self._stream = stream
        self._pool = pool
        self._connection = connection
        self._origin = origin
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                await self._stream.aclose()
            finally:
                await self._pool.give_back(self._connection, self._origin)


def stack_transport(limits: httpx2.Limits) -> httpx2.AsyncHTTPTransport:
    """An httpx2 transport (no proxy: the client mounts those) on a ``StackPool``."""
    transport = httpx2.AsyncHTTPTransport(limits=limits)
    made = transport._pool
    transport._pool = StackPool(
        ssl_context=made._ssl_context,  # the transport's, its certificates loaded once
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
    )
    return transport
