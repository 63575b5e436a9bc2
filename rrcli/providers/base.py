"""The provider contract, and the ONE place where the HTTP client's errors become rrcli's.

A provider turns a ``Call`` (chat messages and parameters) into a ``Reply`` by one HTTP attempt
(or, for ``sim``, by no network at all). It never retries, never routes and never sleeps for
backoff: the runner owns those. It raises only ``rrcli.errors.ProviderError`` subclasses, each
knowing whether it is transient and any delay the server asked for.

CONTRACT (filled in by the providers work; the runner codes against exactly this):

- ``make_provider(backend, api_key, *, retry, seed)`` returns a ``Provider`` for the backend;
  one ``httpx2.AsyncClient`` per backend, explicit timeouts, pool limits >= the backend's cap,
  redirects never followed.
- ``await provider.send(call, on_text=None)`` makes one attempt. With ``call.stream`` it streams
  and calls ``on_text(chunk)`` for each piece of output text as it arrives (for ``--prompt
  --stream``); without it ``on_text`` is never called.
- ``await provider.aclose()`` closes its client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Call", "Provider", "Reply"]


@dataclass(slots=True)
class Call:
    """One request, provider-neutral.

    ``messages`` are OpenAI-style chat messages (``{"role", "content"}``, a leading ``system``
    message when there is one; an assistant message may carry ``reasoning_content``, sent only
    when the backend has ``reasoning_feedback``). ``params`` are the request parameters, the
    backend's ``params`` under the job's own (the job wins); ``model`` is always the backend's.
    """

    messages: list[dict[str, Any]]
    params: Mapping[str, Any] = field(default_factory=dict)
    stream: bool = False


@dataclass(slots=True)
class Reply:
    """One successful attempt."""

    output: str
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    response_model: str | None = None
    reasoning_content: str | None = None
    http_status: int | None = None
    request_id: str | None = None
    ttft_ms: float | None = None  # streamed calls: time to the first chunk carrying text
    body: dict[str, Any] | None = None  # the provider's response body (batch output formats)
    # An Anthropic ``pause_turn``: the assistant message to append to ``messages`` before the
    # runner sends the same call again, on the same backend, to finish the turn.
    continuation: dict[str, Any] | None = None


class Provider(Protocol):
    """What the runner needs of a provider."""

    #: host[:port] written to traces as ``server_address`` (None for in-process sim)
    server_address: str | None

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply: ...

    async def aclose(self) -> None: ...
