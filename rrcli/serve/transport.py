"""``rrcli.PoolTransport``: the gateway of ``rrcli serve`` in-process, for the SDKs.

The official ``openai`` and ``anthropic`` SDKs (and pydantic-ai through them) send their
requests with an ``httpx2.AsyncClient``; given this transport, each request goes to the same
app ``rrcli serve`` runs, over pools this program opened, with no server and no socket::

    async with rrcli.Pool.from_profile("pool.toml") as pool:
        http = httpx2.AsyncClient(transport=rrcli.PoolTransport(pool))
        client = openai.AsyncOpenAI(base_url="http://pool/v1", api_key="-", http_client=http)

Everything the server does holds: the model picks the pool, sessions, both APIs, streams as
they arrive, errors in each API's shape, a stream closed early cancels its call. No client key
is asked (the caller is this program); a session idle past ``session_idle`` seconds is
forgotten at the next request. The pools answer in the event loop, so a sync client
(``httpx2.Client``, ``openai.OpenAI``) is refused with a UsageError naming the async client
and ``rrcli serve``.
"""

from __future__ import annotations

from typing import NoReturn

from rrcli.errors import UsageError
from rrcli.pool.pool import Pool
from rrcli.providers.asgi import StreamingASGITransport
from rrcli.serve.app import build_app
from rrcli.serve.gateway import Gateway, Settings

__all__ = ["PoolTransport"]

_SYNC = (
    "rrcli.PoolTransport serves async clients only: use httpx2.AsyncClient (and "
    "openai.AsyncOpenAI or anthropic.AsyncAnthropic over it), or run rrcli serve and point the "
    "sync client's base_url at it"
)


class PoolTransport(StreamingASGITransport):
    """An httpx2 transport whose requests are calls of ``pools`` (open; the caller closes
    them); any base URL serves, its host is not looked at."""

    def __init__(self, *pools: Pool, session_idle: float = 3600.0) -> None:
        self.gateway = Gateway(pools, Settings(session_idle=session_idle))
        super().__init__(build_app(self.gateway), before=self.gateway.forget_idle)

    def handle_request(self, request: object) -> NoReturn:
        """A sync client's request, refused: the pools answer in the event loop only."""
        raise UsageError(_SYNC)

    def __enter__(self) -> NoReturn:
        """A sync client opened (``with httpx2.Client(...)``), refused as its requests are."""
        raise UsageError(_SYNC)

    def close(self) -> None:
        """A sync client closing: nothing of the pools is open here (their owner closes them)."""
