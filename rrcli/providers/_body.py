"""Reading an answer within its limits, and telling the keep-alive race from a real failure.

A body is read in chunks as the HTTP client decompresses them (``aiter_bytes``) and counted as it
comes: past the backend's ``max_response_bytes`` the attempt ends as ``response_too_large``, so an
endless body, a huge one or a gzip bomb costs at most the limit (and one decompressed chunk) of
memory. An error answer is only read as far as its message needs.

The keep-alive race: a server may close an idle connection just as the pool hands it to a new
request. The request then fails before any byte of an answer came ("Server disconnected without
sending a response", or a reset). Browsers and the official SDKs send such a request again on a
fresh connection; ``dropped_while_idle`` recognises the case from the failed connection itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import h11
import httpcore2
import httpx2

from rrcli.errors import ResponseTooLargeError
from rrcli.providers._wire import Body

__all__ = [
    "ERROR_BODY_READ",
    "body_chunks",
    "dropped_while_idle",
    "fresh_connections",
    "read_body",
    "read_head",
    "too_large",
]

ERROR_BODY_READ = 64 * 1024  # bytes of an error answer read: its message is in the first ones

#: what a connection closed under a request raises before the answer's first byte
_DROPS = (httpx2.RemoteProtocolError, httpx2.ReadError, httpx2.WriteError)


def too_large(limit: int, status: int) -> ResponseTooLargeError:
    return ResponseTooLargeError(
        f"response too large: the body passed {limit:,} bytes (the backend's max_response_bytes, "
        "counted decompressed) — raise `max_response_bytes` in the profile if answers are longer",
        type="response_too_large",
        transient=False,
        status_code=status,
    )


def body_chunks(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The body's chunks, decompressed: the lean transport's own stream when there is nothing
    to decompress (httpx2's decoding and chunking layers have nothing to do then)."""
    if isinstance(response.stream, Body) and "content-encoding" not in response.headers:
        return response.stream.__aiter__()
    return response.aiter_bytes()


def _declared_too_large(response: httpx2.Response, limit: int) -> bool:
    """The body is plain (not compressed) and its Content-Length already says it is too large."""
    headers = response.headers
    length = headers.get("content-length", "")
    return length.isdigit() and int(length) > limit and "content-encoding" not in headers


async def read_body(response: httpx2.Response, limit: int) -> bytes:
    """The whole body, decompressed; ResponseTooLargeError as soon as it passes ``limit``."""
    if _declared_too_large(response, limit):
        raise too_large(limit, response.status_code)
    chunks: list[bytes] = []
    size = 0
    async for chunk in body_chunks(response):
        size += len(chunk)
        if size > limit:
            raise too_large(limit, response.status_code)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_head(response: httpx2.Response, size: int = ERROR_BODY_READ) -> bytes:
    """The body's first ``size`` bytes or so (all of a short one): the rest is never read."""
    chunks: list[bytes] = []
    read = 0
    async for chunk in body_chunks(response):
        chunks.append(chunk)
        read += len(chunk)
        if read >= size:
            break
    return b"".join(chunks)[:size]


def dropped_while_idle(exc: httpx2.HTTPError) -> bool:
    """Whether ``exc`` is the keep-alive race: the request went out on a pooled connection that
    had answered before, and the server closed it before any byte of this answer came."""
    if not isinstance(exc, _DROPS):
        return False
    reused = getattr(exc, "unanswered_reuse", None)  # the lean transport's (``_wire.py``)
    if reused is not None:
        return bool(reused)
    cause = exc.__cause__
    tb = cause.__traceback__ if cause is not None else exc.__traceback__
    while tb is not None:
        connection = tb.tb_frame.f_locals.get("self")
        if isinstance(connection, httpcore2.AsyncHTTP11Connection):
            return _reused_and_unanswered(connection)
        tb = tb.tb_next
    return False


def _reused_and_unanswered(connection: httpcore2.AsyncHTTP11Connection) -> bool:
    try:
        state = connection._h11_state
        unanswered = state.their_state is h11.SEND_RESPONSE and not state.trailing_data[0]
        return unanswered and connection._request_count > 1
    except AttributeError:  # another httpcore2 layout: never guess a resend
        return False


async def fresh_connections(transport: httpx2.AsyncBaseTransport) -> None:
    """Close the pool's idle connections, so the next request opens a new one (a server that
    closed one idle connection has likely closed the others of its age too)."""
    close_idle = getattr(transport, "close_idle", None)
    if close_idle is not None:  # the lean transport; then its fallback's pool
        close_idle()
        transport = transport.fallback  # type: ignore[attr-defined]
    pool = getattr(transport, "_pool", None)
    for connection in getattr(pool, "connections", ()):
        if connection.is_idle():
            await connection.aclose()
