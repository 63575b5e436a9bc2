"""A backend client's HTTP/1.1 connections (providers/_lean.py, _wire.py) against servers on
127.0.0.1 that write their answers byte for byte: connections reused and given up when they
must be, bodies read as they come and within their limits, and every failure the same error
as httpx2's own transport gives (the kinds retries and traces go by)."""

from __future__ import annotations

import asyncio
import itertools
import socket
import ssl
import subprocess
from collections.abc import Awaitable, Callable

import httpx2
import orjson
import pytest

from rrcli.config.profile import Backend, RetrySettings
from rrcli.errors import ProviderError
from rrcli.providers import make_provider
from rrcli.providers._lean import lean_transport
from rrcli.providers._pool import stack_transport
from rrcli.providers.base import Call, translate_transport_error

ANSWER = orjson.dumps(
    {"id": "c1", "model": "m", "choices": [{"index": 0, "message": {"content": "ok"}}]}
)
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)
MESSAGES = [{"role": "user", "content": "Hi"}]
TRANSPORTS = {"lean": lean_transport, "httpx2": stack_transport}

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class RawServer:
    """A server in the test's own event loop; ``handler(reader, writer, n)`` serves its n-th
    connection (from 1). ``requests`` counts the request heads read by ``read_request``."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.connections = 0
        self.requests = 0
        self.heads: list[bytes] = []
        self.url = ""

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"https://localhost:{port}" if self.tls else f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bool:
        """One request read whole; False when the client closed the connection instead."""
        head = await reader.readuntil(b"\r\n\r\n") if not reader.at_eof() else b""
        if not head:
            return False
        self.requests += 1
        self.heads.append(head)
        length = next(
            (
                int(line[15:])
                for line in head.split(b"\r\n")
                if line.lower()[:15] == b"content-length:"
            ),
            0,
        )
        await reader.readexactly(length)
        return True


async def _keep_answering(server: RawServer, reader, writer, answer: bytes = OK) -> None:
    while await server.read_request(reader):
        writer.write(answer)
        await writer.drain()


def _backend(url: str, **fields: object) -> Backend:
    url += "/v1"
    return Backend(id="b", provider="openai", base_url=url, model="m", allow_private=True, **fields)


async def _sends(url: str, n: int, **fields: object) -> list[str]:
    """``n`` chat calls one after the other through one provider: each reply's output, or
    its error's type."""
    provider = make_provider(_backend(url, **fields), "sk-test", retry=RetrySettings(), seed=None)
    seen = []
    try:
        for _ in range(n):
            try:
                seen.append((await provider.send(Call(MESSAGES))).output)
            except ProviderError as error:
                seen.append(error.type)
    finally:
        await provider.aclose()
    return seen


def test_calls_one_after_the_other_travel_on_one_connection() -> None:
    """Five calls one after the other to a server that keeps its connection open: every one
    answered, all on the connection the first opened."""

    async def go() -> tuple[list[str], int]:
        async with RawServer(lambda r, w, n: _keep_answering(server, r, w)) as server:
            return await _sends(server.url, 5), server.connections

    assert (["ok"] * 5, 1) == asyncio.run(go())


def test_a_reused_connection_closed_before_its_answer_is_sent_again_on_a_fresh_one() -> None:
    """A server that reads the second request on a kept connection and closes it without a
    byte of answer (the keep-alive race): the call is sent once more on a new connection and
    answered, costing no attempt; the server saw three requests on two connections."""

    async def handler(reader, writer, n: int) -> None:
        if n == 1:
            await server.read_request(reader)
            writer.write(OK)
            await writer.drain()
            await server.read_request(reader)  # ... and closed unanswered
            return
        await _keep_answering(server, reader, writer)

    async def go() -> tuple[list[str], int, int]:
        nonlocal server
        async with RawServer(handler) as server:
            return await _sends(server.url, 2), server.requests, server.connections

    server: RawServer
    assert (["ok", "ok"], 3, 2) == asyncio.run(go())


def test_a_cookie_the_backend_sets_is_sent_back_with_the_next_calls() -> None:
    """A backend whose first answer sets a cookie (a load balancer's stickiness, say): the
    calls after it carry the cookie, as an httpx2 client's would."""
    cookie = b"HTTP/1.1 200 OK\r\nset-cookie: lb=b7; Path=/\r\n" + OK[len(b"HTTP/1.1 200 OK\r\n") :]

    async def handler(reader, writer, n: int) -> None:
        await server.read_request(reader)
        writer.write(cookie)
        await _keep_answering(server, reader, writer)

    async def go() -> tuple[list[str], list[bool]]:
        nonlocal server
        async with RawServer(handler) as server:
            outputs = await _sends(server.url, 3)
            return outputs, [b"\r\ncookie: lb=b7\r\n" in head.lower() for head in server.heads]

    server: RawServer
    assert (["ok"] * 3, [False, True, True]) == asyncio.run(go())


def test_answers_that_close_their_connection_are_read_whole_and_it_is_not_reused() -> None:
    """Answers marked ``Connection: close`` (one with a length, one whose body ends with the
    connection, one after an interim 100 answer): each is read whole, and each call opens
    a connection of its own."""
    close = OK.replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n", 1)
    unbounded = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n"
    answers = [[close], [unbounded, ANSWER], [b"HTTP/1.1 100 Continue\r\n\r\n", close]]

    async def handler(reader, writer, n: int) -> None:
        await server.read_request(reader)
        for piece in answers[n - 1]:  # each piece read by the client before the next comes
            writer.write(piece)
            await writer.drain()
            await asyncio.sleep(0.05)

    async def go() -> tuple[list[str], int]:
        nonlocal server
        async with RawServer(handler) as server:
            return await _sends(server.url, 3), server.connections

    server: RawServer
    assert (["ok"] * 3, 3) == asyncio.run(go())


def test_an_answer_nobody_asked_for_ends_its_connection() -> None:
    """A server that answers one request twice in one write: the call reads the first
    answer, the connection is given up (the second answer never taken for the next call), and
    the calls after it are answered on a new one."""

    async def handler(reader, writer, n: int) -> None:
        await server.read_request(reader)
        writer.write(OK + (OK if n == 1 else b""))
        await _keep_answering(server, reader, writer)

    async def go() -> tuple[list[str], int, int]:
        nonlocal server
        async with RawServer(handler) as server:
            return await _sends(server.url, 3), server.requests, server.connections

    server: RawServer
    assert (["ok"] * 3, 3, 2) == asyncio.run(go())


def _chunked_forever(chunk: bytes) -> Handler:
    async def handler(reader, writer, n: int) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in itertools.count():
            writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            await writer.drain()
            await asyncio.sleep(0.001)

    return handler


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_an_endless_chunked_body_is_read_as_it_comes_and_its_connection_closed(kind) -> None:
    """An endless chunked body: the client reads its first pieces as they come, closes the
    answer, and the server sees its connection closed (not kept for a next request)."""

    async def go() -> tuple[bytes, bool]:
        async with RawServer(_chunked_forever(b"abc")) as server:
            limits = httpx2.Limits(max_connections=4, max_keepalive_connections=4)
            async with httpx2.AsyncClient(transport=TRANSPORTS[kind](limits), timeout=10) as client:
                async with client.stream("POST", server.url + "/x", content=b"{}") as reply:
                    pieces = b""
                    async for piece in reply.aiter_bytes():
                        pieces += piece
                        if len(pieces) >= 9:
                            break
                await asyncio.sleep(0.2)  # the server's next write meets the closed socket
                return pieces[:9], all(
                    t.done() for t in asyncio.all_tasks() if t is not asyncio.current_task()
                )

    assert (b"abcabcabc", True) == asyncio.run(go())


def test_a_body_past_max_response_bytes_ends_the_call_and_its_connection() -> None:
    """An endless chunked answer with ``max_response_bytes = 5000``: the call fails as
    ``response_too_large``, and the next call opens a new connection."""

    async def go() -> tuple[list[str], int]:
        async with RawServer(_chunked_forever(b"x" * 1000)) as server:
            return await _sends(server.url, 2, max_response_bytes=5000), server.connections

    assert (["response_too_large"] * 2, 2) == asyncio.run(go())


async def _failure(
    kind: str, url: str, timeout: httpx2.Timeout, **request: object
) -> tuple[str, bool]:
    """One POST through a client on transport ``kind``: its error as (type, transient)."""
    limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx2.AsyncClient(transport=TRANSPORTS[kind](limits), timeout=timeout) as client:
        try:
            async with client.stream("POST", url + "/x", content=b"{}", **request) as reply:
                await reply.aread()
        except httpx2.HTTPError as exc:
            error = translate_transport_error(exc)
            return error.type, error.transient
    raise AssertionError("no error")


def _stalls_mid_body(reader, writer, n: int) -> Awaitable[None]:
    async def handler() -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        await writer.drain()
        await asyncio.sleep(5)

    return handler()


def _cut_mid_body(reader, writer, n: int) -> Awaitable[None]:
    async def handler() -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
        await writer.drain()

    return handler()


def _endless_head(reader, writer, n: int) -> Awaitable[None]:
    async def handler() -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\n")
        for i in itertools.count():
            writer.write(b"x-%d: %s\r\n" % (i, b"y" * 1000))
            await writer.drain()

    return handler()


FAILURES = {
    "read timeout mid-body": (_stalls_mid_body, httpx2.Timeout(10, read=0.2), ("timeout", True)),
    "cut mid-body": (_cut_mid_body, httpx2.Timeout(10), ("remote_protocol_error", True)),
    "endless head": (_endless_head, httpx2.Timeout(10), ("remote_protocol_error", True)),
}


@pytest.mark.parametrize("kind", TRANSPORTS)
@pytest.mark.parametrize("case", FAILURES)
def test_a_failing_answer_is_the_same_error_on_either_transport(kind, case) -> None:
    """A body that stalls past the read timeout, one cut short by the server, a head that
    never ends: the same error kind (and transience) through the lean transport as through
    httpx2's own."""
    handler, timeout, expected = FAILURES[case]

    async def go() -> tuple[str, bool]:
        async with RawServer(handler) as server:
            return await _failure(kind, server.url, timeout)

    assert expected == asyncio.run(go())


@pytest.mark.parametrize("kind", TRANSPORTS)
def test_refused_connections_busy_pools_and_broken_headers_are_the_same_errors(kind) -> None:
    """Nothing listening is ``connect_error``; a pool of one connection, busy, past its pool
    timeout is ``pool_timeout``; a header holding a line break is refused before a byte is
    sent (``local_protocol_error``, not transient): on either transport alike."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"

    async def go() -> list[tuple[str, bool]]:
        seen = [await _failure(kind, closed, httpx2.Timeout(5))]
        async with RawServer(_stalls_mid_body) as server:
            limits = httpx2.Limits(max_connections=1, max_keepalive_connections=1)
            timeout = httpx2.Timeout(5, pool=0.2)
            async with (
                httpx2.AsyncClient(transport=TRANSPORTS[kind](limits), timeout=timeout) as client,
                client.stream("POST", server.url + "/x", content=b"{}"),
            ):
                try:
                    await client.post(server.url + "/x", content=b"{}")
                except httpx2.HTTPError as exc:
                    error = translate_transport_error(exc)
                    seen.append((error.type, error.transient))
            evil = {"x-evil": "a\r\nx-injected: 1"}
            seen.append(await _failure(kind, server.url, httpx2.Timeout(5), headers=evil))
            return seen

    expected = [("connect_error", True), ("pool_timeout", True), ("local_protocol_error", False)]
    assert expected == asyncio.run(go())


@pytest.fixture(scope="module")
def certificate(tmp_path_factory) -> tuple[str, str]:
    """A self-signed certificate for localhost: (its file, its key's file)."""
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", key, "-out", cert],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.mark.parametrize("trusted", [True, False])
def test_https_calls_are_verified_and_share_one_connection(certificate, monkeypatch, trusted):
    """An https backend whose certificate the client trusts (``SSL_CERT_FILE``): three
    calls answered on one TLS connection. Not trusted: each call is a ``connect_error``, and
    none reaches the server's handler."""
    cert, key = certificate
    if trusted:
        monkeypatch.setenv("SSL_CERT_FILE", cert)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)

    async def go() -> tuple[list[str], int]:
        async with RawServer(lambda r, w, n: _keep_answering(server, r, w), tls) as server:
            return await _sends(server.url, 3), server.connections

    outputs, connections = asyncio.run(go())
    expected = (["ok"] * 3, 1) if trusted else (["connect_error"] * 3, 0)
    assert expected == (outputs, connections)
