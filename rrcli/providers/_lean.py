"""A backend client's transport: HTTP/1.1 on bare asyncio connections (``_wire.py``).

httpx2's own transport turns each request into httpcore2's request model, walks httpcore2's
HTTP/1.1 connection (h11's state machine and header checks, anyio's streams) and turns the
answer back into httpx2's. This one writes the httpx2 request's bytes itself and builds the
``httpx2.Response`` from httptools' parse, with a streaming body; the client above it (its
headers, timeouts, error types) is unchanged.

The pool keeps the idle connections of each origin on a stack, as ``_pool.StackPool`` does: the
one released last is taken first, a connection closed, past its keep-alive or closed by the
server is dropped when taken, each release ages out the oldest idle one, and a request finding
every connection busy waits its turn (``pool`` timeout). A connection's peer is checked against
the address policy (``allow_private``, ``peer.py``) before its first request is written.

TLS is asyncio's, with the context httpx2's transport made. What it does not speak goes to
``fallback``, httpx2's transport on the stack pool: a streamed request body, a HEAD request.
"""

from __future__ import annotations

import asyncio
import math
import os
import ssl
from typing import Any

import httpx2

from rrcli.providers._pool import Turns, stack_transport
from rrcli.providers._wire import Body, Wire
from rrcli.providers.peer import check_peer

__all__ = ["LeanTransport", "lean_transport"]

_Key = tuple[str, bytes, int]  # an origin's scheme, host and port
_PORTS = {"http": 80, "https": 443}
_HTTP11 = {"http_version": b"HTTP/1.1"}


class LeanTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport for http backends, and https ones given ``tls`` (the context
    connections are verified with); ``fallback`` carries everything else.
    ``allow_private``: the address policy of new connections (None: unchecked)."""

    def __init__(
        self,
        limits: httpx2.Limits,
        fallback: httpx2.AsyncBaseTransport,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.fallback = fallback
        self._tls = tls
        if tls is not None:
            tls.set_alpn_protocols(["http/1.1"])
        self.allow_private: bool | None = None
        self._max = limits.max_connections or math.inf
        self._keep = limits.max_keepalive_connections
        self._keep = math.inf if self._keep is None else self._keep
        self._expiry = limits.keepalive_expiry
        self._idle: dict[_Key, list[Wire]] = {}
        self._idle_count = 0
        self._open = 0  # connections open or being opened
        self._turns = Turns()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        scheme = url.scheme
        data = _encode(request) if scheme == "http" or (scheme == "https" and self._tls) else None
        if data is None:
            return await self.fallback.handle_async_request(request)
        key = (scheme, url.raw_host, url.port or _PORTS[scheme])
        timeouts = request.extensions.get("timeout") or {}
        wire = await self._take(key, timeouts)
        try:
            status = await wire.send(data, timeouts)
        except BaseException:
            self._drop(wire)
            raise
        extensions = {**_HTTP11, "reason_phrase": wire.reason}
        body = Body(wire, timeouts.get("read"), self._release_for(key))
        return httpx2.Response(status, headers=wire.headers, stream=body, extensions=extensions)

    # --- the pool ----------------------------------------------------------------------------

    async def _take(self, key: _Key, timeouts: dict[str, Any]) -> Wire:
        """An idle connection to ``key`` still good, else a new one while there is room, else
        the first released once this request's turn comes (PoolTimeout past ``pool``)."""
        first = True
        while True:
            stack = self._idle.get(key)
            while stack:
                wire = stack.pop()
                self._idle_count -= 1
                if not (wire.closed or self._expired(wire)):
                    return wire
                self._drop(wire)
            if self._open >= self._max:
                self._close_an_idle_one()
            if self._open < self._max:
                return await self._connect(key, timeouts.get("connect"))
            await self._turns.wait(timeouts.get("pool"), first, httpx2.PoolTimeout)
            first = False

    async def _connect(self, key: _Key, timeout: float | None) -> Wire:
        self._open += 1
        host = key[1].decode("ascii")
        loop = asyncio.get_running_loop()
        tls = {"ssl": self._tls, "server_hostname": host} if key[0] == "https" else {}
        try:
            async with asyncio.timeout(timeout):
                transport, wire = await loop.create_connection(
                    lambda: Wire(loop), host, key[2], **tls
                )
        except TimeoutError:
            self._gone()
            raise httpx2.ConnectTimeout("the connection was not made in time") from None
        except OSError as exc:
            self._gone()
            raise httpx2.ConnectError(_refusal(exc, host, key[2])) from exc
        except BaseException:
            self._gone()
            raise
        if self.allow_private is not None:
            try:
                check_peer(host, transport.get_extra_info("peername"), self.allow_private)
            except BaseException:
                self._drop(wire)
                raise
        return wire

    def _release_for(self, key: _Key) -> Any:
        def release(wire: Wire) -> None:
            self._release(wire, key)

        return release

    def _release(self, wire: Wire, key: _Key) -> None:
        """The answer on ``wire`` was read or given up: the wire back on its stack if it can
        take the next request, else closed; a waiting request is woken either way."""
        wire.finished()
        if not wire.reusable or wire.closed or self._idle_count >= self._keep:
            self._drop(wire)
            return
        stack = self._idle.setdefault(key, [])
        stack.append(wire)
        self._idle_count += 1
        oldest = stack[0]
        if oldest is not wire and self._expired(oldest):  # one aged out at a time
            del stack[0]
            self._idle_count -= 1
            self._drop(oldest)
        self._turns.wake()

    def _expired(self, wire: Wire) -> bool:
        expiry = self._expiry
        return expiry is not None and wire.idle_since + expiry < asyncio.get_running_loop().time()

    def _drop(self, wire: Wire) -> None:
        wire.close()
        self._gone()

    def _gone(self) -> None:
        self._open -= 1
        self._turns.wake()

    def _close_an_idle_one(self) -> None:
        """Room for a connection to another origin: the oldest idle connection closed."""
        for stack in self._idle.values():
            if stack:
                self._idle_count -= 1
                self._drop(stack.pop(0))
                return

    def close_idle(self) -> None:
        """Close every idle connection (the next request opens a new one)."""
        for stack in self._idle.values():
            while stack:
                self._idle_count -= 1
                self._drop(stack.pop())

    async def aclose(self) -> None:
        self.close_idle()
        await self.fallback.aclose()


def lean_transport(limits: httpx2.Limits) -> LeanTransport:
    """The lean transport, httpx2's on the stack pool as its fallback (both within ``limits``),
    https verified with the fallback's context (httpx2's defaults: ``SSL_CERT_FILE``...)."""
    fallback = stack_transport(limits)
    return LeanTransport(limits, fallback, fallback._pool._ssl_context)


def _encode(request: httpx2.Request) -> bytes | None:
    """The request's bytes on the wire; None when the fallback sends it. LocalProtocolError for
    a header that would break the head (a line break or NUL in it, a name that is no token)."""
    url = request.url
    if request.method == "HEAD":
        return None
    try:
        content = request.content
    except httpx2.RequestNotRead:  # a streamed body
        return None
    lines = [b"%s %s HTTP/1.1" % (request.method.encode("ascii"), url.raw_path)]
    for name, value in request.headers.raw:
        if name not in _TOKENS:
            _check_name(name)
        lines.append(b"%s: %s" % (name, value))
    lines.append(b"\r\n")
    head = b"\r\n".join(lines)
    breaks = len(lines)
    if head.count(b"\n") != breaks or head.count(b"\r") != breaks or b"\0" in head:
        raise httpx2.LocalProtocolError("a request header holds a line break or a NUL byte")
    return head + content


_TOKENS: set[bytes] = set()  # header names already checked
_TOKEN_CHARS = frozenset(
    b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def _check_name(name: bytes) -> None:
    if not name or not _TOKEN_CHARS.issuperset(name):
        raise httpx2.LocalProtocolError(f"Illegal header name {name!r}")
    if len(_TOKENS) < 1024:
        _TOKENS.add(name)


def _refusal(exc: OSError, host: str, port: int) -> str:
    """Why a connection was not made, in the system's words, with the address tried."""
    if isinstance(exc.errno, int) and exc.errno > 0:
        reason = os.strerror(exc.errno)
    else:
        reason = exc.strerror or str(exc) or type(exc).__name__
    return f"{reason} ({host}:{port})"
