"""The address policy at connect time: a connection to a forbidden peer is closed unused.

Validation checks where a base_url's host resolves (``config.addresses``); a name can resolve
elsewhere later (DNS rebinding: public when checked, the metadata address when connected). So
every new connection of a backend's client is checked too, by the address its socket actually
reached, before a byte of the request (and its key) is written: the cloud metadata addresses
always, the loopback, private, link-local and carrier-grade NAT ones unless the backend has
``allow_private``. A refusal is the call's error, naming the address and the rule, and is not
retried. One check per new connection: a pooled connection costs nothing.

The connection's stream is handed on as ``_Stream``: the pool asks every idle connection on
each request whether the server closed it (``is_readable``), and anyio answers that by building
the dict of all of a socket's attributes each time (about a tenth of a gateway's CPU at 64 in
flight); ``_Stream`` polls the socket it kept instead, and passes all else on untouched.

The lean transport (``_lean.py``) checks its own connections' peers with ``check_peer``;
``guard_connections`` sets its policy and wraps its fallback's network backend.

A request sent through a proxy (``HTTPS_PROXY``...) connects to the proxy, whose own policy
decides where it goes; its connections are not checked here.
"""

from __future__ import annotations

import select
import socket
from collections.abc import Iterable
from typing import Any

import httpcore2
import httpx2

from rrcli.config.addresses import address_kind, forbidden
from rrcli.errors import ProviderError

__all__ = ["PeerCheck", "check_peer", "guard_connections"]


class PeerCheck(httpcore2.AsyncNetworkBackend):
    """A network backend that refuses a connection whose peer is a forbidden address."""

    def __init__(self, inner: httpcore2.AsyncNetworkBackend, allow_private: bool) -> None:
        self.inner = inner
        self.allow_private = allow_private

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        stream = await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            check_peer(host, stream.get_extra_info("server_addr"), self.allow_private)
        except ProviderError:
            await stream.aclose()
            raise
        return _Stream(stream)

    async def connect_unix_socket(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.connect_unix_socket(*args, **kwargs)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class _Stream(httpcore2.AsyncNetworkStream):
    """``inner`` with a cheap idle check: its read, write and close are inner's own."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = inner.get_extra_info("socket")
        self.read = inner.read  # type: ignore[method-assign]
        self.write = inner.write  # type: ignore[method-assign]
        self.aclose = inner.aclose  # type: ignore[method-assign]

    async def start_tls(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return _Stream(await self._inner.start_tls(*args, **kwargs))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


def _readable(sock: socket.socket | None) -> bool:
    """Whether a read would not wait: data, or the server's close; a socket gone counts."""
    fd = -1 if sock is None else sock.fileno()
    if fd < 0:
        return True
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(0))


def check_peer(host: str, peer: object, allow_private: bool) -> None:
    """Raise the policy's refusal when ``peer`` (a socket's address) is forbidden."""
    address = str(peer[0]) if isinstance(peer, tuple) and peer else None
    try:
        kind = None if address is None else address_kind(address)
    except ValueError:
        kind = None
    if forbidden(kind, allow_private):
        raise refused(host, str(address), str(kind), allow_private)


def refused(host: str, address: str, kind: str, allow_private: bool) -> ProviderError:
    """The error of a connection refused by the address policy (not transient)."""
    if kind == "metadata":
        rule = "the cloud metadata address is refused always, even with allow_private"
    else:
        rule = f"a {kind} address needs allow_private = true on this backend"
    return ProviderError(
        f'forbidden address: "{host}" connected to {address} — {rule} (checked at connect '
        "time: the name resolved elsewhere when the profile was validated?)",
        type="forbidden_address",
        transient=False,
    )


def guard_connections(client: httpx2.AsyncClient, allow_private: bool) -> None:
    """Check every new connection ``client`` makes without a proxy (a test's mock transport,
    which makes none, is left alone)."""
    transport = getattr(client, "_transport", None)
    if hasattr(transport, "allow_private"):  # the lean transport checks its own, and the
        transport.allow_private = allow_private  # type: ignore[union-attr]
        transport = transport.fallback  # type: ignore[union-attr]  # fallback's through here
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if inner is not None:
        pool._network_backend = PeerCheck(inner, allow_private)  # type: ignore[union-attr]
