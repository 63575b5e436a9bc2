"""What the OpenAI and Anthropic adapters share: one client per backend, one attempt per send.

An adapter says how to build a request body, how to read a plain response body and how to fold a
stream of SSE events; this class sends it (plain, or streamed with the incremental parser),
measures the time to the first generated text, and routes every failure through the ONE
translation in ``base.py``. A streaming request answered with one plain JSON body (some gateways
do that) is read as the whole response.

Each attempt has one deadline (``_deadline.py``): ``timeout``, or for a stream once its text
began, ``stream_idle_timeout`` from each event that carries output. Bodies are read in chunks
counted against ``max_response_bytes`` (``_body.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

import httpx2
import orjson

from rrcli.config.profile import Backend, RetrySettings
from rrcli.config.urls import endpoint_url
from rrcli.errors import ProviderError, StreamBrokenError
from rrcli.providers._body import (
    body_chunks,
    dropped_while_idle,
    fresh_connections,
    read_body,
    read_head,
    too_large,
)
from rrcli.providers._deadline import Deadline, Deadlines
from rrcli.providers._lean import lean_transport
from rrcli.providers._send import Sender
from rrcli.providers._sse import SSEEvent, SSEParser
from rrcli.providers.base import (
    Call,
    Reply,
    error_body,
    error_from_status,
    invalid_response,
    redact,
    stream_error,
    timed_out,
    translate_transport_error,
)
from rrcli.providers.peer import guard_connections
from rrcli.providers.ratelimit import rate_limit_pause
from rrcli.registry import info, server_address
from rrcli.tokens import MAX_USAGE_TOKENS
from rrcli.vocabulary import tool_arguments, tool_call

__all__ = [
    "HTTPProvider",
    "NewStream",
    "Parse",
    "StreamFold",
    "parse_event_json",
    "token_sum",
    "usage_detail",
]


class StreamFold(Protocol):
    """Folds one response's SSE events into a Reply."""

    done: bool

    def add(self, event: SSEEvent) -> str | None:
        """Take one event; return the output text it carried ("" for reasoning only), or None
        when it carried no generated text. Raises ProviderError for an ``error`` event."""

    def reply(self) -> Reply: ...


#: a plain response body → Reply (InvalidResponseError when it is not one)
Parse = Callable[[dict[str, Any]], Reply]
#: a fresh fold for one response's events
NewStream = Callable[[], StreamFold]


def _merged_headers(*layers: Mapping[str, str]) -> dict[str, str]:
    """The headers of ``layers``, each name once: a later layer's header replaces an earlier
    one's of the same name in any case (``Api-Key`` and ``api-key`` are one header)."""
    out: dict[str, str] = {}
    spelt: dict[str, str] = {}  # lower-case name -> the name as kept
    for layer in layers:
        for name, value in layer.items():
            out.pop(spelt.get(name.lower(), name), None)
            spelt[name.lower()] = name
            out[name] = value
    return out


class HTTPProvider:
    """One backend's HTTP adapter. Subclasses set ``path`` and implement the three hooks; the
    registry says which header the key travels in and which one carries the request id."""

    path: ClassVar[str]
    #: headers every request of the API carries besides the key (Anthropic's version)
    api_headers: ClassVar[Mapping[str, str]] = {}
    #: the media type of the API's streamed answers (another is read as one plain body)
    stream_media_type: ClassVar[str] = "text/event-stream"

    def __init__(
        self,
        backend: Backend,
        api_key: str | None,
        *,
        retry: RetrySettings,
        seed: int | None = None,  # the simulated provider's; HTTP answers are not drawn
        clock: Callable[[], float] = time.perf_counter,
        transport: httpx2.AsyncBaseTransport | None = None,  # tests: MockTransport for parsing
    ) -> None:
        self.backend = backend
        self._key = api_key
        self._retry = retry
        self._clock = clock
        self._base_url = backend.base_url
        self._url = endpoint_url(backend.base_url, self.path)
        self._chat_url = httpx2.URL(self._url)  # parsed once, not at every call
        self.server_address = server_address(backend.provider, backend.base_url)
        entry = info(backend.provider)
        self._request_id_header = entry.request_id_header
        cap = max(1, backend.max_concurrency)
        own = {"content-type": "application/json", **self.api_headers}
        if api_key and entry.auth_header:
            own[entry.auth_header] = self.auth_value(api_key)
        headers = _merged_headers(backend.headers, own)
        self._idle = backend.stream_idle_timeout or backend.timeout
        # the attempt's deadline is kept by ``_deadlines`` (send); the client only times the
        # connect and the wait for a pooled connection (``connect_timeout``, ``pool_timeout``),
        # not each read and write (a timer per socket operation)
        timeout = httpx2.Timeout(backend.timeout, read=None, write=None)
        # kept to a twentieth of the shorter limit (at most 1 s, at least 10 ms)
        self._deadlines = Deadlines(min(1.0, max(0.01, min(backend.timeout, self._idle) / 20)))
        limits = httpx2.Limits(max_connections=cap, max_keepalive_connections=cap)
        self._transport = transport or lean_transport(limits)
        self._client = httpx2.AsyncClient(
            headers=headers,
            timeout=timeout,
            limits=limits,
            follow_redirects=False,
            transport=self._transport,
        )
        guard_connections(self._client, backend.allow_private)  # the address policy, per connection
        self._sender = Sender(self._client, self._transport)

    # --- the adapter's hooks --------------------------------------------------------------

    def auth_value(self, api_key: str) -> str:
        """The auth header's value for ``api_key`` (the key itself unless the API says more)."""
        return api_key

    def chat_url(self, call: Call) -> httpx2.URL | str:
        """The address a chat call is posted to (an API may name the model or the stream in it)."""
        return self._chat_url

    def build_body(self, call: Call) -> dict[str, Any]:
        raise NotImplementedError

    def parse_body(self, data: dict[str, Any]) -> Reply:
        """A plain response body → Reply; raises InvalidResponseError when it is not one."""
        raise NotImplementedError

    def new_stream(self) -> StreamFold:
        raise NotImplementedError

    async def prepare(self, request: httpx2.Request) -> httpx2.Request:
        """The request as sent: an API that signs each request adds its signature here."""
        return request

    def new_parser(self) -> Any:
        """A fresh parser of the stream's bytes into the events the fold takes (SSE)."""
        return SSEParser()

    def endpoint_request(self, call: Call) -> tuple[str, dict[str, Any], Parse, NewStream]:
        """How a call to another endpoint than chat is sent: (url, body, parse a plain body,
        start a stream fold). Profile validation gives such calls only to an API that has the
        endpoint; this one has chat only."""
        raise ProviderError(
            f"{self.backend.provider} backends serve chat only, not /{call.endpoint}",
            type="endpoint_not_served",
            transient=False,
        )

    # --- one attempt ------------------------------------------------------------------------

    async def send(self, call: Call, on_text: Callable[[str], None] | None = None) -> Reply:
        if call.endpoint == "chat":
            url, body, parse, new_stream = (
                self.chat_url(call),
                self.build_body(call),
                self.parse_body,
                self.new_stream,
            )
        else:
            url, body, parse, new_stream = self.endpoint_request(call)
        content = orjson.dumps(body)
        try:
            request = await self.prepare(self._sender.post(url, content))
            deadline = self._deadlines.enter(self.backend.timeout)
            try:
                if call.stream:
                    return await self._send_streamed(request, deadline, on_text, parse, new_stream)
                response, content = await self._send_plain(request)
            except asyncio.CancelledError:
                if self._deadlines.leave(deadline):
                    raise self._timed_out(deadline) from None
                raise
            finally:
                self._deadlines.leave(deadline)
        except httpx2.HTTPError as exc:
            raise translate_transport_error(exc, self._key, self.backend.timeout) from exc
        return self._read_plain(response, content, parse)

    async def _send_plain(self, request: httpx2.Request) -> tuple[httpx2.Response, bytes]:
        """The answer and its whole body (a status error with the body's first bytes)."""
        response = await self._open(request)
        try:
            if not 200 <= response.status_code < 300:
                raise self._status_error(response, await read_head(response))
            return response, await read_body(response, self.backend.max_response_bytes)
        finally:
            await response.aclose()

    async def exchange(
        self,
        method: str,
        url: str,
        *,
        content: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        limit: int | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """The body of a request besides the calls (a Batch API's files and batches), sent
        through this backend's client: its key and headers (``headers`` added), its address
        policy. Within ``timeout`` seconds (the backend's by default), a body up to ``limit``
        bytes (``max_response_bytes`` by default); ProviderError for a failure status, a
        transport error or the time running out, the key masked in its text."""
        seconds = self.backend.timeout if timeout is None else timeout
        request = self._client.build_request(method, url, content=content, headers=headers)
        try:
            async with asyncio.timeout(seconds):
                response = await self._open(request)
                try:
                    if not 200 <= response.status_code < 300:
                        raise self._status_error(response, await read_head(response))
                    return await read_body(response, limit or self.backend.max_response_bytes)
                finally:
                    await response.aclose()
        except TimeoutError:
            raise timed_out(seconds) from None
        except httpx2.HTTPError as exc:
            raise translate_transport_error(exc, self._key, seconds) from exc

    async def aclose(self) -> None:
        await self._client.aclose()

    @property
    def url(self) -> str:
        """The address a chat call is posted to: base_url and the API's path."""
        return self._url

    def url_for(self, call: Call) -> str:
        """The address ``call`` is posted to: ``chat_url``'s for chat, its endpoint's path
        else."""
        if call.endpoint == "chat":
            return str(self.chat_url(call))
        return self.endpoint_request(call)[0]

    async def _open(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` and wait for the answer's head. A pooled connection the server
        closed while it idled (the keep-alive race) costs no attempt: the request is sent
        once more, on a fresh connection."""
        try:
            return await self._sender.send(request)
        except httpx2.HTTPError as exc:
            if not dropped_while_idle(exc):
                raise
        await fresh_connections(self._transport)
        return await self._sender.send(request)

    def _status_error(self, response: httpx2.Response, content: bytes) -> ProviderError:
        return error_from_status(
            response.status_code, response.headers, content, self._retry, secret=self._key
        )

    def _read_plain(self, response: httpx2.Response, content: bytes, parse: Parse) -> Reply:
        try:
            data = orjson.loads(content)
        except orjson.JSONDecodeError:
            raise invalid_response("the body is not JSON", response.status_code) from None
        if not isinstance(data, dict):
            raise invalid_response("the body is not a JSON object", response.status_code)
        if data.get("error"):
            raise stream_error(data["error"], self._key, body=content)
        return self._finish(parse(data), response)

    def _finish(self, reply: Reply, response: httpx2.Response) -> Reply:
        """The response's status, request id (the body's id, else the registry's header) and
        rate-limit pause on ``reply``."""
        reply.http_status = response.status_code
        if reply.request_id is None and self._request_id_header:
            reply.request_id = response.headers.get(self._request_id_header)
        # a dict of the headers once: each of the six budgets' lookups is then no scan of them all
        reply.pause_s = rate_limit_pause(dict(response.headers.items()))
        return reply

    async def _send_streamed(
        self,
        request: httpx2.Request,
        deadline: Deadline,
        on_text: Callable[[str], None] | None,
        parse: Parse,
        new_stream: NewStream,
    ) -> Reply:
        """A streamed attempt: ``timeout`` runs until the first event that carries output, then
        each gap between such events is bounded by ``stream_idle_timeout`` (comments and
        keep-alive events never count)."""
        started = self._clock()
        response = await self._open(request)
        try:
            if not 200 <= response.status_code < 300:
                raise self._status_error(response, await read_head(response))
            if self.stream_media_type not in response.headers.get("content-type", ""):
                content = await read_body(response, self.backend.max_response_bytes)
                return self._read_plain(response, content, parse)
            reply = await self._fold(response, deadline, new_stream(), on_text, started)
            return self._finish(reply, response)
        finally:
            await response.aclose()

    async def _fold(
        self,
        response: httpx2.Response,
        deadline: Deadline,
        fold: StreamFold,
        on_text: Callable[[str], None] | None,
        started: float,
    ) -> Reply:
        """Fold the stream's events; each chunk that carried output moves the deadline to
        ``stream_idle_timeout`` from now. The bytes read count against max_response_bytes."""
        parser = self.new_parser()
        ttft_ms: float | None = None
        limit, idle = self.backend.max_response_bytes, self._idle
        loop = asyncio.get_running_loop()
        size = 0
        try:
            async for chunk in body_chunks(response):
                size += len(chunk)
                if size > limit:
                    raise too_large(limit, response.status_code)
                progress = False
                for event in parser.feed(chunk):
                    piece = fold.add(event)
                    if piece is None:
                        continue
                    progress = True
                    if ttft_ms is None:  # the first output: from now on, gaps are bounded
                        ttft_ms = (self._clock() - started) * 1000.0
                        deadline.key = "stream_idle_timeout"
                    if piece and on_text is not None:
                        on_text(piece)
                if progress:
                    deadline.when = loop.time() + idle
        except httpx2.TimeoutException:
            raise
        except httpx2.TransportError as exc:
            raise self._broken(f"the connection failed mid-stream ({exc})") from exc
        for event in parser.finish():
            fold.add(event)
        if not fold.done:
            raise self._broken("the stream ended before its end marker")
        reply = fold.reply()
        reply.ttft_ms = ttft_ms
        return reply

    def _timed_out(self, deadline: Deadline) -> ProviderError:
        idle = deadline.key == "stream_idle_timeout"
        return timed_out(self._idle if idle else self.backend.timeout, deadline.key)

    def _broken(self, why: str) -> StreamBrokenError:
        return StreamBrokenError(
            f"stream broken: {why}", type="stream_broken", transient=True, status_code=200
        )


def token_sum(usage: Mapping[str, Any], *names: str) -> int | None:
    """The sum of the usage counters present among ``names``; None when none is present. A
    counter that is no count of one call (negative, a boolean, MAX_USAGE_TOKENS or more) is
    unknown: it is left out, so sums stay far inside 64 bits."""
    values = [
        value
        for name in names
        if type(value := usage.get(name)) is int and 0 <= value < MAX_USAGE_TOKENS
    ]
    return sum(values) if values else None


def usage_detail(usage: Mapping[str, Any], group: str, name: str) -> int | None:
    """A count from a usage details object (``prompt_tokens_details.cached_tokens``...)."""
    details = usage.get(group)
    value = details.get(name) if isinstance(details, dict) else None
    return value if isinstance(value, int) else None


def parse_event_json(event: SSEEvent) -> dict[str, Any]:
    """An event's data as a JSON object, or InvalidResponseError."""
    try:
        data = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        raise invalid_response(f"a stream event is not JSON: {event.data[:80]!r}") from None
    if not isinstance(data, dict):
        raise invalid_response("a stream event is not a JSON object")
    return data


def checked_tool_call(
    call_id: object, name: object, raw: object, fault: str, data: object, key: str | None
) -> dict[str, Any]:
    """A tool call in the result's shape, its arguments ``raw`` checked to be a JSON object's
    text (``vocabulary.tool_arguments``); otherwise the answer is invalid, the error saying
    ``fault`` and the text, the body (``data``, the key masked) kept in it."""
    arguments = tool_arguments(raw)
    if arguments is None:
        raise invalid_answer(f"{fault}: {redact(repr(raw), key)[:80]}", data, key)
    return tool_call(call_id, name, arguments)


def invalid_answer(fault: str, data: object, key: str | None) -> ProviderError:
    """A 2xx body that parsed but is no answer of its API (``fault`` says why): the
    ``invalid_response`` error, transient, the body (``data``, the key masked) kept in it."""
    return invalid_response(fault, body=error_body(orjson.dumps(data), key))


def openai_chunk(event: SSEEvent, key: str | None) -> dict[str, Any] | None:
    """One event of an OpenAI-style stream as its JSON chunk; None for the closing ``[DONE]``;
    an ``error`` chunk raised as the stream's error (the key masked)."""
    if event.data == "[DONE]":
        return None
    chunk = parse_event_json(event)
    if chunk.get("error"):
        raise stream_error(chunk["error"], key, body=event.data)
    return chunk
