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

    __slots__ = ("_client", "_heads", "_timeouts", "_transport")

    def __init__(self, client: httpx2.AsyncClient, transport: httpx2.AsyncBaseTransport) -> None:
        self._client = client
        self._transport = transport
        self._timeouts = client.timeout.as_dict()
        self._heads: dict[bytes, httpx2.Headers] = {}  # an origin's Host and the client's headers

    def post(self, url: httpx2.URL | str, content: bytes) -> httpx2.Request:
        """A POST of ``content`` to ``url`` with the client's headers, cookies and timeouts:
        the headers httpx2 would add (Host, Content-Length) set here, from a copy of the
        client's made once an origin, not looked for and added one by one."""
        url = httpx2.URL(url) if isinstance(url, str) else url
        head = self._heads.get(url.netloc)
        if head is None:  # what httpx2 puts in every request to this origin
            made = httpx2.Request("GET", url, headers=self._client.headers)
            head = self._heads[url.netloc] = made.headers
        headers = httpx2.Headers(head)
        headers["Content-Length"] = str(len(content))
        request = httpx2.Request(
            "POST",
            url,
            headers=headers,
            stream=httpx2.ByteStream(content),
            extensions={"timeout": self._timeouts},
        )
        request.read()
        cookies = self._client.cookies
        if cookies:
            cookies.set_cookie_header(request)
        return request

    def refresh(self) -> None:
        """Take the client's headers anew from the next request on (a renewed token)."""
        self._heads.clear()

    async def send(self, request: httpx2.Request) -> httpx2.Response:
        """The answer's head; its body is read as it comes (then close the answer)."""
        response = await self._transport.handle_async_request(request)
        response.request = request
        if "set-cookie" in response.headers:
            self._client.cookies.extract_cookies(response)
        return response
