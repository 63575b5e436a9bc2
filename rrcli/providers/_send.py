"""Sending a backend's request straight to its client's transport.

``AsyncClient.send`` runs, for every request, an auth flow, the redirect loop, the event hooks
and a timer round the body, and ``build_request`` merges the client's settings into each
request anew; a backend's client uses none of that but its headers, cookies and timeouts (no
auth, redirects not followed, no hooks, no proxy: a client given a transport mounts none).
``Sender`` builds the request from those and hands it to the transport, and keeps the cookies
an answer sets, as the client would.
"""

from __future__ import annotations

import httpx2

__all__ = ["Sender"]


class Sender:
    """``client``'s requests, sent on ``transport`` (the one the client was made with)."""

    __slots__ = ("_client", "_timeouts", "_transport")

    def __init__(self, client: httpx2.AsyncClient, transport: httpx2.AsyncBaseTransport) -> None:
        self._client = client
        self._transport = transport
        self._timeouts = client.timeout.as_dict()

    def post(self, url: httpx2.URL | str, content: bytes) -> httpx2.Request:
        """A POST of ``content`` to ``url`` with the client's headers, cookies and timeouts."""
        cookies = self._client.cookies
        return httpx2.Request(
            "POST",
            url,
            headers=self._client.headers,
            content=content,
            cookies=cookies if cookies else None,
            extensions={"timeout": self._timeouts},
        )

    async def send(self, request: httpx2.Request) -> httpx2.Response:
        """The answer's head; its body is read as it comes (then close the answer)."""
        response = await self._transport.handle_async_request(request)
        response.request = request
        if "set-cookie" in response.headers:
            self._client.cookies.extract_cookies(response)
        return response
